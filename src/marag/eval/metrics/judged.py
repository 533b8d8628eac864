"""Metrics that ask an LLM judge (the agents in `marag.eval.judges`).

Every judge call gets the metric's temperature (0.0 unless the runner repeats the
metric with several seeds) and the caller's seed. A judge whose output is unusable
never fails the example: each agent has a deterministic fallback, and list-labelling
judges are retried item by item before an item gets its default label.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean
from typing import Any, Callable, Sequence

from pydantic import BaseModel

from marag.errors import MaragError
from marag.eval.judges import (
    FALLBACK_REASON,
    MAX_ASPECTS,
    NUGGET_BATCH,
    AspectExtractor,
    AspectsInput,
    CorrectnessInput,
    CorrectnessJudge,
    CorrectnessAspectJudge,
    CorrectnessAspectsInput,
    ListJudge,
    NuggetInput,
    NuggetJudge,
    ScoreInput,
    ScoreJudge,
    SupportInput,
    SupportJudge,
    lexical_correctness,
    lexical_support,
    pack_documents,
    split_aspects,
)
from marag.eval.metrics.base import METRICS, EvalExample, Metric, MetricResult
from marag.eval.metrics.lexical import reference_texts
from marag.llm.base import LLM


class JudgedMetric(Metric):
    needs_judge = True
    kind = "judged"

    def _require(self, judge: LLM | None) -> LLM:
        if judge is None:
            raise MaragError(
                f"metric {self.name!r} needs a judge LLM",
                hint="pass a judge model (e.g. `--judge llamacpp:...`), or leave judged metrics out",
            )
        return judge


def all_references(ex: EvalExample) -> list[str]:
    """Reference answer first, then the gold answers, without repeats."""
    q = ex.question
    ref = q.metadata.get("reference_answer")
    texts = ([ref] if isinstance(ref, str) else []) + list(q.answers)
    return [t for t in dict.fromkeys(t.strip() for t in texts) if t]


async def label_items(
    agent: ListJudge,
    judge: LLM,
    items: Sequence[str],
    make_input: Callable[[list[str]], BaseModel],
    batch_size: int,
    temperature: float,
    seed: int | None,
    stand_in: Callable[[str], Any],
) -> tuple[list[Any], int]:
    """One label per item from a list-labelling agent, `batch_size` items per call.

    The agent's output model demands exactly one label per item, so a batch comes back
    either complete or empty (the agent's fallback). An empty batch of several items is
    asked again one item at a time; an item that still gets no label gets
    `stand_in(item)`. Returns (labels, how many came from the stand-in)."""
    field = agent.list_field
    labels: list[Any] = []
    stood_in = 0
    for start in range(0, len(items), max(1, batch_size)):
        batch = list(items[start : start + max(1, batch_size)])
        got: list[Any] = list(getattr(await agent(judge, make_input(batch), temperature=temperature, seed=seed), field))
        if len(got) != len(batch):
            got = []
            for item in batch:
                one = (
                    getattr(await agent(judge, make_input([item]), temperature=temperature, seed=seed), field)
                    if len(batch) > 1
                    else []
                )
                if len(one) == 1:
                    got.append(one[0])
                else:
                    got.append(stand_in(item))
                    stood_in += 1
        labels.extend(got)
    return labels, stood_in


async def extract_aspects(
    judge: LLM, question: str, text: str, temperature: float, seed: int | None
) -> tuple[list[str], str]:
    """The judge's aspects of `text` (cleaned, at most MAX_ASPECTS) and their source:
    "judge", or "sentences" when the judge gave none and the text's sentences stand in."""
    out = await AspectExtractor()(judge, AspectsInput(question=question, text=text), temperature=temperature, seed=seed)
    aspects = [a for a in dict.fromkeys(a.strip() for a in out.aspects) if a][:MAX_ASPECTS]
    if aspects:
        return aspects, "judge"
    return split_aspects(text), "sentences"


def _single(ok: bool, value: float, **details: Any) -> MetricResult:
    """A metric that rests on one judgment (`ok`: the judge gave it, not the stand-in)."""
    return MetricResult(value=value, details={**details, "fallback": not ok}, decisions=1, fallbacks=int(not ok))


# -- single-call judges --------------------------------------------------------------


@METRICS.register("judge_correct")
class JudgeCorrect(JudgedMetric):
    name = "judge_correct"
    requires = frozenset({"reference"})
    description = "LLM judge: is the answer correct given the reference answers? (1/0, with a justification)"

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        inp = CorrectnessInput(question=ex.question.question, references=all_references(ex), prediction=ex.prediction)
        out = await CorrectnessJudge()(self._require(judge), inp, temperature=self.temperature, seed=seed)
        return _single(out.justification != FALLBACK_REASON, float(out.correct), justification=out.justification)


@METRICS.register("judge_score")
class JudgeScore(JudgedMetric):
    name = "judge_score"
    requires = frozenset({"reference"})
    description = "LLM judge: 0-5 similarity of the answer to the reference (raw score, not rescaled)."

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        refs, _ = reference_texts(ex.question)
        inp = ScoreInput(question=ex.question.question, references=refs, prediction=ex.prediction)
        out = await ScoreJudge()(self._require(judge), inp, temperature=self.temperature, seed=seed)
        return _single(out.reason != FALLBACK_REASON, float(out.score), reason=out.reason)


# -- mRAG's aspect-based rewards ---------------------------------------------------------


def correctness_from_scores(scores: Sequence[int]) -> float:
    """mRAG correctness: each aspect's score in -1..2 mapped to (s + 1) / 3, averaged
    (correct and relevant = 1, correct with irrelevant information = 2/3, not
    addressed = 1/3, wrong = 0)."""
    return fmean((s + 1) / 3 for s in scores) if scores else 0.0


def faithfulness_from_scores(scores: Sequence[int]) -> float:
    """mRAG faithfulness: each aspect's score in -1..1 mapped to (s + 1) / 2, averaged
    (fully supported = 1, partially = 1/2, not supported = 0)."""
    return fmean((s + 1) / 2 for s in scores) if scores else 0.0


def _aspect_result(value: float, aspects: list[str], scores: list[int], source: str, stood_in: int, **extra) -> MetricResult:
    return MetricResult(
        value=value,
        details={
            "aspects": [{"aspect": a, "score": s} for a, s in zip(aspects, scores)],
            "aspects_from": source,
            "stand_in_scores": stood_in,
            **extra,
        },
        decisions=len(aspects) + 1,  # the extraction, then one judgment per aspect
        fallbacks=stood_in + (source != "judge"),
    )


@METRICS.register("mrag_correctness")
class MragCorrectness(JudgedMetric):
    name = "mrag_correctness"
    requires = frozenset({"reference"})
    description = (
        "mRAG correctness: aspects of the expected answer, each judged against the response "
        "(2 correct+relevant, 1 correct+irrelevant, 0 not addressed, -1 wrong), (s+1)/3, averaged."
    )
    default_batch = 1  # the paper judges each aspect in its own call

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        judge = self._require(judge)
        q = ex.question.question
        refs, _ = reference_texts(ex.question)
        if not refs:
            return MetricResult(value=0.0, details={"note": "the reference answer is empty"})
        aspects, source = await extract_aspects(judge, q, refs[0], self.temperature, seed)
        scores, stood_in = await label_items(
            CorrectnessAspectJudge(),
            judge,
            aspects,
            lambda batch: CorrectnessAspectsInput(question=q, reference=refs[0], response=ex.prediction, aspects=batch),
            self.batch or self.default_batch,
            self.temperature,
            seed,
            stand_in=lambda aspect: lexical_correctness(aspect, ex.prediction),
        )
        return _aspect_result(correctness_from_scores(scores), aspects, scores, source, stood_in)


@METRICS.register("mrag_faithfulness")
class MragFaithfulness(JudgedMetric):
    name = "mrag_faithfulness"
    description = (
        "mRAG faithfulness: aspects of the response, each judged against the retrieved texts "
        "(1 fully, 0 partially, -1 not supported), (s+1)/2, averaged (0 without retrieved texts)."
    )
    default_batch = 1

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        judge = self._require(judge)
        docs = pack_documents(ex.retrieved_texts)
        if not docs:
            return MetricResult(value=0.0, details={"note": "no retrieved documents to check the answer against"})
        if not ex.prediction.strip():
            return MetricResult(value=0.0, details={"note": "empty answer"})
        aspects, source = await extract_aspects(judge, ex.question.question, ex.prediction, self.temperature, seed)
        scores, stood_in = await label_items(
            SupportJudge(),
            judge,
            aspects,
            lambda batch: SupportInput(documents=docs, aspects=batch),
            self.batch or self.default_batch,
            self.temperature,
            seed,
            stand_in=lambda aspect: lexical_support(aspect, docs),
        )
        return _aspect_result(
            faithfulness_from_scores(scores),
            aspects,
            scores,
            source,
            stood_in,
            documents_used=len(docs),
            documents_retrieved=len(ex.retrieved_texts),
        )


# -- nuggets (TREC RAG'24 / AutoNuggetizer) ---------------------------------------------


@dataclass(frozen=True)
class Nugget:
    text: str
    vital: bool


def parse_nuggets(raw: Any) -> list[Nugget]:
    """`metadata["nuggets"]`: dicts {text, importance: vital|okay} or plain strings.
    Only "okay" (any case) marks a nugget as non-vital; a missing or other importance
    counts as vital, so a list without importance labels still has a V_strict."""
    nuggets = []
    for n in raw or []:
        if isinstance(n, str):
            text, importance = n, "vital"
        else:
            text, importance = str(n.get("text", "")), str(n.get("importance") or "vital")
        if text.strip():
            nuggets.append(Nugget(" ".join(text.split()), importance.strip().lower() != "okay"))
    return nuggets


_STRICT = {"support": 1.0, "partial_support": 0.0, "not_support": 0.0}
_LENIENT = {"support": 1.0, "partial_support": 0.5, "not_support": 0.0}


def nugget_scores(nuggets: Sequence[Nugget], labels: Sequence[str]) -> dict[str, float | None]:
    """AutoNuggetizer's four scores: strict counts only `support`; the non-strict
    "score" variants count `partial_support` as 0.5. Vital variants average over the
    vital nuggets (None when there are none)."""

    def mean(table: dict[str, float], vital_only: bool) -> float | None:
        vals = [table[lab] for n, lab in zip(nuggets, labels) if n.vital or not vital_only]
        return fmean(vals) if vals else None

    return {
        "v_strict": mean(_STRICT, True),
        "all_strict": mean(_STRICT, False),
        "v_score": mean(_LENIENT, True),
        "all_score": mean(_LENIENT, False),
    }


async def nugget_assignment(
    ex: EvalExample, judge: LLM, temperature: float, seed: int | None, batch: int | None = None
) -> tuple[list[Nugget], list[str], int]:
    """Label every nugget against the prediction (memoized on the example, so the
    nugget metrics share one set of judge calls). Returns (nuggets, labels, how many
    labels the lexical stand-in gave)."""
    key = ("nugget_assignment", id(judge), getattr(judge, "model", ""), seed, temperature, batch)
    if key in ex._memo:
        return ex._memo[key]
    nuggets = parse_nuggets(ex.question.metadata.get("nuggets"))
    if ex.prediction.strip():
        labels, defaulted = await label_items(
            NuggetJudge(),
            judge,
            [n.text for n in nuggets],
            lambda batch: NuggetInput(question=ex.question.question, answer=ex.prediction, nuggets=batch),
            batch or NUGGET_BATCH,
            temperature,
            seed,
            stand_in=lambda nugget: _SUPPORT_LABEL[lexical_support(nugget, [ex.prediction])],
        )
    else:  # nothing can be supported by an empty answer; no need to ask
        labels, defaulted = ["not_support"] * len(nuggets), 0
    ex._memo[key] = result = (nuggets, labels, defaulted)
    return result


_SUPPORT_LABEL = {1: "support", 0: "partial_support", -1: "not_support"}


class _NuggetMetric(JudgedMetric):
    requires = frozenset({"nuggets"})
    score_key: str

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        nuggets, labels, defaulted = await nugget_assignment(
            ex, self._require(judge), self.temperature, seed, self.batch
        )
        scores = nugget_scores(nuggets, labels)
        value = scores[self.score_key]
        return MetricResult(
            value=0.0 if value is None else value,
            details={
                **scores,
                "labels": [{"nugget": n.text, "vital": n.vital, "label": lab} for n, lab in zip(nuggets, labels)],
                "defaulted": defaulted,
            },
            decisions=len(nuggets) if ex.prediction.strip() else 0,
            fallbacks=defaulted,
        )


@METRICS.register("nugget_vstrict")
class NuggetVStrict(_NuggetMetric):
    name = "nugget_vstrict"
    score_key = "v_strict"
    description = (
        "TREC RAG'24 V_strict: fraction of vital nuggets the judge labels fully supported by the answer "
        "(details carry all_strict, v_score, all_score)."
    )

    def applies(self, ex: EvalExample) -> bool:
        return super().applies(ex) and any(n.vital for n in parse_nuggets(ex.question.metadata.get("nuggets")))


@METRICS.register("nugget_all")
class NuggetAll(_NuggetMetric):
    name = "nugget_all"
    score_key = "all_score"
    description = "AutoNuggetizer All score: mean over all nuggets, support = 1, partial support = 0.5."
