"""What a first pass (one retrieval, one read) shows about whether its answer is right,
as numbers a router weighs: no model call, only what the pass already produced.

- **The reader's confidence**: the log-probabilities the model gave the tokens of its
  answer (llama.cpp and OpenAI-compatible servers report them; `LLMCall.logprobs`):
  their mean, their minimum, the first token's, and the first token's margin over the
  best other token. A reader that hesitates over a name is often choosing between two.
- **Grounding**: whether the answer is a run of words of a passage (and of the first
  or second one), whether it is a passage's title (a bridge entity named instead of
  what was asked: "Formula One Arcade" for its developer), whether it says the
  passages lack the answer, repeats a name of the question, or is not of the kind asked
  (a name for "When ...?": `agents.answer_types`).
- **Retrieval**: the first hit's score and its margin over the second and the last:
  a flat ranking means no passage stood out.
- **The question's shape**: its length, whether it offers candidates (a comparison),
  asks yes or no, names several things (capitalised words after the first) or
  nests a relation ("the director of the film that ..."): the shapes one read gets
  wrong most.

`SIGNALS` is the fixed order routers are trained and applied in; a signal that cannot
be computed (no log-probabilities from this backend) is NaN, which a router replaces
by its training mean. The same function reads a live first pass (`auto`) and the trace
of a recorded one (`from_trace`: any `vanilla_rag`-shaped run), so routers train on
runs already made.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from marag.agents.answer_types import asked_kind, says_unknown, wrong_kind
from marag.agents.answerer import echoes_question, offers_choice
from marag.agents.search.memory import flattened
from marag.index.base import Hit
from marag.strategies.base import FirstPass
from marag.trace import LLMCall, Step, TokenLogprob, Trace

SIGNALS: tuple[str, ...] = (
    "lp_mean", "lp_min", "lp_first", "lp_margin",
    "in_passages", "in_top1", "in_top2", "is_title", "abstains", "echoes", "wrong_kind", "answer_words",
    "score_top", "score_margin", "score_spread",
    "q_words", "q_choice", "q_yes_no", "q_capitalised", "q_nested",
)  # fmt: skip

NAN = float("nan")


def answer_logprobs(tokens: Sequence[TokenLogprob], field: str = "answer") -> list[TokenLogprob]:
    """The tokens that spell the value of `field` in a JSON reply written token by token
    (`{"answer": "Ada Lovelace"}` -> the tokens of `Ada Lovelace`): those overlapping the
    value's characters. Empty when the reply has no such string value."""
    text = "".join(t.token for t in tokens)
    key = re.search(r'"' + re.escape(field) + r'"\s*:\s*"', text)
    if key is None:
        return []
    start = end = key.end()
    while end < len(text) and text[end] != '"':
        end += 2 if text[end] == "\\" else 1
    out, pos = [], 0
    for t in tokens:
        a, pos = pos, pos + len(t.token)
        if pos > start and a < end:
            out.append(t)
    return out


def _confidence(tokens: Sequence[TokenLogprob] | None) -> dict[str, float]:
    span = answer_logprobs(tokens) if tokens else []
    # a token that only closes the string (`"}`) overlaps no value character, so is not here
    if not span:
        return {"lp_mean": NAN, "lp_min": NAN, "lp_first": NAN, "lp_margin": NAN}
    values = [t.logprob for t in span]
    first = span[0]
    margin = first.logprob - first.runner_up if first.runner_up is not None else NAN
    return {"lp_mean": sum(values) / len(values), "lp_min": min(values), "lp_first": first.logprob, "lp_margin": margin}


def _contains(text: str, answer: str) -> bool:
    return bool(answer) and f" {answer} " in f" {flattened(text)} "


_YES_NO_QUESTION = re.compile(r"^(?:is|are|was|were|do|does|did|can|could|has|have|had|will|would)\b", re.IGNORECASE)
_NESTING = re.compile(r"\b(?:of the|whose|that|which|who|where|when)\b", re.IGNORECASE)
_CAPITALISED = re.compile(r"(?<!^)(?<![.?!] )\b[A-Z0-9][\w'’.-]*")


def first_pass_signals(first: FirstPass) -> dict[str, float]:
    """The signals of `SIGNALS` for one first pass (NaN where one cannot be computed)."""
    q, answer = first.question, first.answer.strip()
    norm = flattened(answer)
    found = [_contains(h.text, norm) for h in first.hits]
    scores = [h.score for h in first.hits]
    q_words = q.split()
    return {
        **_confidence(first.logprobs),
        "in_passages": float(any(found)),
        "in_top1": float(found[:1] == [True]),
        "in_top2": float(any(found[:2])),
        "is_title": float(bool(norm) and any(flattened(h.title) == norm for h in first.hits)),
        "abstains": float(says_unknown(answer) or not norm),
        "echoes": float(echoes_question(q, answer)),
        "wrong_kind": float(wrong_kind(q, answer) is not None),
        "answer_words": math.log1p(len(answer.split())),
        "score_top": scores[0] if scores else NAN,
        "score_margin": scores[0] - scores[1] if len(scores) > 1 else NAN,
        "score_spread": scores[0] - scores[-1] if len(scores) > 1 else NAN,
        "q_words": math.log1p(len(q_words)),
        "q_choice": float(offers_choice(q) or getattr(asked_kind(q), "name", None) == "choice"),
        "q_yes_no": float(bool(_YES_NO_QUESTION.search(q.strip()))),
        "q_capitalised": float(len(_CAPITALISED.findall(q.strip()))),
        "q_nested": float(len(_NESTING.findall(" ".join(q_words[1:])))),  # (not the question's own wh-word)
    }


def reader_reply(steps: Sequence[Step]) -> tuple[str, LLMCall | None] | None:
    """The first read of passages among `steps`: the answer that stood (after a recheck,
    and after a span call shortened it, `span_applied`) and the model call that wrote
    it (the last one without an error: a failed recheck leaves the first reply
    standing). None when no step read passages."""
    at = next((i for i, s in enumerate(steps) if s.agent == "answerer" and s.inputs.get("passages")), None)
    if at is None:
        return None
    read = steps[at]
    answer = str(read.outputs.get("answer", ""))
    for after in steps[at + 1 :]:  # the answerer's own span call and its decision follow it
        if after.agent == "span_applied":
            answer = str(after.outputs.get("answer", answer))
        if after.agent not in ("span", "span_applied"):
            break
    call = next((c for c in reversed(read.llm_calls) if c.error is None), None)
    return answer, call


def from_trace(trace: Trace) -> FirstPass | None:
    """The first pass a recorded trace holds: its first search's hits (scores) and the
    first read of passages (`reader_reply`). None when the trace has no such read (a
    strategy that never read passages once)."""
    found = reader_reply(trace.steps)
    read = next((s for s in trace.steps if s.agent == "answerer" and s.inputs.get("passages")), None)
    search = next((c for s in trace.steps for c in s.searches), None)
    if found is None or read is None or search is None:
        return None
    answer, call = found
    passages = [p for p in read.inputs["passages"] if isinstance(p, dict)]
    hits = [
        Hit(doc_id=str(h.get("doc_id", "")), chunk_id=str(h.get("chunk_id", "")), score=float(h.get("score") or 0.0),
            text=str(p.get("text", "")), title=str(p.get("title", "")))
        for p, h in zip(passages, search.hits)
    ]  # fmt: skip
    return FirstPass(
        question=trace.question,
        hits=tuple(hits),
        answer=answer,
        reply=call.response if call else "",
        logprobs=tuple(call.logprobs) if call and call.logprobs else None,
    )
