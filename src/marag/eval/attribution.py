"""Why a question was not answered right: one cause per (strategy, question).

Every report explains its failures. The cause is decided at answer time, when the
answer's sources, what the strategy read and its trace are at hand, and stored in the
result record (`"cause"`); reports and the viewer count and filter by it.

The causes, checked in this order (the first that holds is the cause):

| cause | when |
|---|---|
| `correct` | the answer contains a gold answer or its token F1 is at least 0.5 (a yes/no gold: the answer's first word) |
| `error` | the question raised: no answer at all |
| `budget_stop` | the question's hard budget (calls, tokens or the deadline) stopped the strategy, or it answered only after its own budget ran out |
| `protocol_failure` | no usable answer (empty, or the answering step fell back), or more than a quarter of the strategy's steps were fallbacks or refusals (unusable model outputs, rejected queries) |
| `retrieval_miss` | no gold document among what the strategy read |
| `answer_not_extracted` | a gold answer occurs in the text the answer was written from (its sources), but the answer does not give it (not for yes/no answers) |
| `reading_miss` | a gold document was read, and the answer is still wrong |
| `wrong` | wrong, and the causes above that need gold documents do not apply (no gold documents in the dataset, or a strategy that does not retrieve): n/a |
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from marag.agents.answerer import FALLBACK_ANSWER
from marag.eval.metrics.lexical import JUDGEMENTS, contains_answer, gives_answer, max_token_f1, normalize_answer
from marag.eval.rundir import ResultRecord

CAUSES = (
    "correct",
    "error",
    "budget_stop",
    "protocol_failure",
    "retrieval_miss",
    "answer_not_extracted",
    "reading_miss",
    "wrong",
)
FAILURES = CAUSES[1:]
CORRECT_F1 = 0.5  # an answer with at least this token F1 counts as correct (with accuracy 1)
PROTOCOL_SHARE = 0.25  # fallback or refused steps above this share of all steps: a protocol failure

# Steps that are the framework's own bookkeeping or decisions, not model work: left out of
# the share. (`searcher.no_new_query` ends a searcher run after the model's query was
# rejected; the rejection is already counted, counting the ending too would count it twice.)
_BOOKKEEPING = frozenset({
    "budget", "working_memory", "state", "guard", "round", "query_choice", "knowledge_applied", "retrieve", "search",
    "searcher.no_new_query", "evidence_floor", "context_applied", "router.grades", "rewriter.search_strings", "clusterer",
})  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    """What attribution needs to know about one answered question."""

    prediction: str
    answers: list[str]
    gold_docs: list[str]
    read_docs: list[str]  # doc ids of every document a model was shown
    source_text: str  # the texts the answer was written from, joined
    retrieves: bool  # the strategy retrieves at all
    stopped: bool = False  # the hard budget stopped it, or it answered after its own budget
    answer_fell_back: bool = False  # the step that wrote the answer fell back (unusable output)
    steps: int = 0  # model-work steps (bookkeeping steps left out)
    bad_steps: int = 0  # of those, fallbacks and refusals
    error: bool = False


def is_correct(prediction: str, answers: Iterable[str]) -> bool:
    answers = list(answers)
    # a yes/no gold is judged by the reply's first word alone: token F1 would give "No
    # information found" 0.5 against "no"
    spans = [a for a in answers if normalize_answer(a) not in JUDGEMENTS]
    return gives_answer(prediction, answers) == 1.0 or max_token_f1(prediction, spans) >= CORRECT_F1


def attribute(o: Outcome) -> str:
    """The one cause of this outcome (module docstring)."""
    if o.error:
        return "error"
    if is_correct(o.prediction, o.answers):
        return "correct"
    if o.stopped:
        return "budget_stop"
    unusable = not o.prediction.strip() or o.prediction.strip() == FALLBACK_ANSWER or o.answer_fell_back
    if unusable or (o.steps and o.bad_steps / o.steps > PROTOCOL_SHARE):
        return "protocol_failure"
    if not o.gold_docs or not o.retrieves:
        return "wrong"
    if not set(o.gold_docs) & set(o.read_docs):
        return "retrieval_miss"
    spans = [a for a in o.answers if normalize_answer(a) not in JUDGEMENTS]  # "yes" is in any text
    if spans and contains_answer(o.source_text, spans):
        return "answer_not_extracted"
    return "reading_miss"


def outcome_of(answer, answers: list[str], gold_docs: list[str], retrieves: bool) -> Outcome:
    """An `Outcome` from a strategy's `Answer` (its trace, sources, read documents and usage)."""
    trace = answer.trace
    work = [s for s in trace.steps if s.agent not in _BOOKKEEPING]
    writer = next((s for s in reversed(trace.steps) if "answer" in s.outputs and s.outputs.get("answer") == answer.answer), None)
    stopped = bool(answer.usage.get("stopped_by_budget")) or bool(answer.details.get("answered_after_budget"))
    return Outcome(
        prediction=answer.answer,
        answers=list(answers),
        gold_docs=list(gold_docs),
        read_docs=[r["doc_id"] for r in answer.read],
        source_text=" ".join(s.text for s in answer.sources),
        retrieves=retrieves,
        stopped=stopped,
        answer_fell_back=writer is not None and writer.status in ("fallback", "skipped"),
        steps=len(work),
        bad_steps=sum(s.status in ("fallback", "refused", "skipped") for s in work),
    )


def cause_of_record(record: ResultRecord) -> str:
    """The cause stored in a result record; records written before attribution existed
    get the causes that need no trace or source text (never `answer_not_extracted`), and
    so do a stored cause that is not one of `CAUSES` and a stored `correct` that
    `is_correct` no longer grants (records written before a yes/no gold had to be the
    answer's first word)."""
    pred = record.prediction or ""
    stored = record.cause
    if stored in CAUSES and (stored != "correct" or is_correct(pred, record.answers)):
        return stored
    if record.error:
        return "error"
    o = Outcome(
        prediction=pred,
        answers=record.answers,
        gold_docs=record.gold_doc_ids,
        read_docs=record.retrieved_doc_ids,
        source_text="",
        retrieves=bool(record.retrieved_doc_ids),
        stopped=bool(record.cost.get("stopped_by_budget")),
    )
    return attribute(o)
