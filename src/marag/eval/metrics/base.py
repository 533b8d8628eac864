"""The metric interface: every metric scores one `EvalExample` and returns a float
(plus optional details), registered by name in `METRICS`.

Lexical and retrieval metrics are plain computations; judged metrics call an LLM (the
judge, configured separately from the strategy's LLM). Repeats of judged metrics
(`--judge-repeats`) are run by the caller with different seeds, so a metric scores once.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, Field, PrivateAttr

from marag.corpus.models import Question
from marag.llm.base import LLM
from marag.registry import Registry


class EvalExample(BaseModel):
    """What a metric sees for one answered question."""

    question: Question  # answers, gold_doc_ids, metadata (nuggets, reference_answer, category, ...)
    prediction: str
    # every document the strategy's models were shown, in reading order, de-duplicated:
    # what the retrieval metrics score (the same notion for every strategy)
    retrieved_doc_ids: list[str] = Field(default_factory=list)
    source_doc_ids: list[str] = Field(default_factory=list)  # the answer's sources (mRAG's S, KAIR's C, ...)
    retrieved_texts: list[str] = Field(default_factory=list)  # texts the answer was grounded on (its sources)
    details: dict[str, Any] = Field(default_factory=dict)  # the strategy's own report (`Answer.details`)
    gold_collections: list[str] = Field(default_factory=list)  # collections holding the gold documents
    # Results several metrics share (e.g. one nugget assignment read by nugget_vstrict
    # and nugget_all), so the judge is asked once per example, seed and temperature.
    _memo: dict[Any, Any] = PrivateAttr(default_factory=dict)


class MetricResult(BaseModel):
    value: float
    details: dict[str, Any] = Field(default_factory=dict)
    # Judged metrics: how many judgments went into the value, and how many of them a
    # deterministic stand-in made because the judge's output was unusable.
    decisions: int = 0
    fallbacks: int = 0


class Metric:
    name: ClassVar[str]
    # what the example must carry for the metric to apply: "answers", "gold_doc_ids",
    # "nuggets", "reference" (a reference answer: metadata.reference_answer or answers[0])
    requires: ClassVar[frozenset[str]] = frozenset()
    needs_judge: ClassVar[bool] = False
    kind: ClassVar[str] = "answer"  # answer | retrieval | judged (for listings and reports)
    description: ClassVar[str] = ""
    # what a question that failed (no answer at all) counts as in a report: the worst
    # value, which is 0 for the usual higher-is-better metric
    worst: ClassVar[float] = 0.0

    def __init__(self, temperature: float = 0.0, batch: int | None = None):
        # The judge's sampling temperature (metrics without a judge ignore it); the
        # runner raises it when it repeats a judged metric with several seeds.
        self.temperature = temperature
        # Items (aspects, nuggets) a list-labelling judge gets per call; None = the
        # metric's own default (the paper's setting).
        self.batch = batch

    def check(self) -> None:
        """Raise a MaragError (with a hint) when this metric cannot run in this
        environment, e.g. an optional dependency is missing. Callers check before
        scoring anything, so a long run does not fail on its first example."""

    def applies(self, ex: EvalExample) -> bool:
        q = ex.question
        have = {
            "answers": bool(q.answers),
            "gold_doc_ids": bool(q.gold_doc_ids),
            "invited_agents": "invited_collections" in ex.details,
            "gold_collections": bool(ex.gold_collections),
            "nuggets": bool(q.metadata.get("nuggets")),
            "reference": bool(q.metadata.get("reference_answer") or q.answers),
        }
        return all(have.get(r, False) for r in self.requires)

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        raise NotImplementedError


METRICS: Registry[type[Metric]] = Registry("metrics")
