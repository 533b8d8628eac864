"""Evaluation metrics: lexical answer metrics, document retrieval metrics and LLM-judged
metrics, all registered by name in `METRICS`.

    from marag.eval.metrics import score_example, metric_names
    results = await score_example(ex, ["em", "f1", "recall@5", "judge_correct"], judge=llm)
"""

from __future__ import annotations

from typing import Any, Iterable

from marag.errors import MaragError
from marag.eval.metrics import agents, judged, lexical, retrieval  # noqa: F401  (register the built-ins)
from marag.eval.metrics.base import METRICS, EvalExample, Metric, MetricResult
from marag.llm.base import LLM

KINDS = ("answer", "retrieval", "judged")

__all__ = [
    "KINDS",
    "METRICS",
    "EvalExample",
    "Metric",
    "MetricResult",
    "describe_metrics",
    "metric_names",
    "score_example",
]


def metric_names(kind: str | None = None) -> list[str]:
    """Registered metric names, optionally only one kind (answer | retrieval | judged)."""
    if kind is not None and kind not in KINDS:
        raise MaragError(f"unknown metric kind {kind!r}", hint=f"choose one of: {', '.join(KINDS)}")
    return [n for n in METRICS.names() if kind is None or getattr(METRICS.get(n), "kind", "answer") == kind]


def describe_metrics() -> list[dict[str, Any]]:
    """One row per registered metric, for `marag metrics` style listings."""
    rows = []
    for n in METRICS.names():
        cls = METRICS.get(n)
        rows.append(
            {
                "name": n,
                "kind": getattr(cls, "kind", "answer"),
                "requires": sorted(getattr(cls, "requires", ())),
                "needs_judge": bool(getattr(cls, "needs_judge", False)),
                "description": getattr(cls, "description", ""),
            }
        )
    return rows


async def score_example(
    ex: EvalExample,
    metric_names: Iterable[str],
    judge: LLM | None = None,
    seed: int | None = None,
    temperature: float = 0.0,
    batch: int | None = None,
) -> dict[str, MetricResult]:
    """Score one example with the named metrics, in order; metrics that do not apply
    (the example lacks gold answers, gold documents, nuggets, ...) are left out of the
    result. Unknown names, metrics that cannot run here (`Metric.check`) and judged
    metrics without a judge fail before any scoring.
    Metrics run one after another so that those sharing judge calls (the nugget
    metrics) reuse them. `batch`: items per call for list-labelling judges (aspects,
    nuggets); None keeps each metric's default."""
    names = list(dict.fromkeys(metric_names))
    metrics: list[Metric] = [METRICS.get(n)(temperature=temperature, batch=batch) for n in names]
    for m in metrics:
        m.check()
    if judge is None and (needy := [n for n, m in zip(names, metrics) if m.needs_judge]):
        raise MaragError(
            f"metrics {', '.join(needy)} need a judge LLM",
            hint="pass a judge model, or leave the judged metrics out",
        )
    results: dict[str, MetricResult] = {}
    for n, m in zip(names, metrics):
        if m.applies(ex):
            results[n] = await m.score(ex, judge=judge, seed=seed)
    return results
