"""Document-level retrieval metrics against `question.gold_doc_ids`.

`ex.retrieved_doc_ids` is the de-duplicated list of documents the strategy's models
were shown over the whole run (what it read), in reading order: the same notion for a
retrieve-then-read baseline (its k passages) and an agent (every page it judged).
`sources_recall` scores the answer's sources instead (mRAG's S, KAIR's context). Precision, recall and F1 treat it as a set (KAIR's
retrieval F1); recall@k, MRR and nDCG@10 use its order. Relevance is binary: a document
is relevant iff its id is a gold id.

MRR and nDCG come from `ir-measures` (the trec_eval implementations via pytrec_eval),
so numbers are comparable with published IR results. It is an optional dependency
(it pulls in scipy): `pip install 'marag[eval]'`.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from marag.errors import MaragError
from marag.eval.metrics.base import METRICS, EvalExample, Metric, MetricResult
from marag.llm.base import LLM


def ranked_unique(doc_ids: Iterable[str]) -> list[str]:
    """First occurrence of each id, in order (the runner already de-duplicates; a
    repeated id must never count twice)."""
    return list(dict.fromkeys(doc_ids))


def set_precision_recall_f1(retrieved: Iterable[str], gold: Iterable[str]) -> tuple[float, float, float]:
    """Set-based precision, recall and their harmonic mean (0 when there is nothing to
    divide by)."""
    r, g = set(retrieved), set(gold)
    hits = len(r & g)
    p = hits / len(r) if r else 0.0
    rec = hits / len(g) if g else 0.0
    f = 2 * p * rec / (p + rec) if p + rec else 0.0
    return p, rec, f


def recall_at_k(retrieved: Sequence[str], gold: Iterable[str], k: int) -> float:
    """Fraction of the gold documents among the first k retrieved."""
    g = set(gold)
    return len(set(ranked_unique(retrieved)[:k]) & g) / len(g) if g else 0.0


def first_relevant_rank(retrieved: Sequence[str], gold: Iterable[str]) -> int | None:
    g = set(gold)
    return next((i for i, d in enumerate(ranked_unique(retrieved), 1) if d in g), None)


def _ir_measures():
    try:
        import ir_measures
    except ImportError:
        raise MaragError(
            "mrr and ndcg@10 need the ir-measures package, which is not installed",
            hint="pip install 'marag[eval]' (or pip install ir-measures), or leave these metrics out",
        ) from None
    return ir_measures


def ir_measure(measure: str, retrieved: Sequence[str], gold: Iterable[str]) -> float:
    """One ir-measures measure (e.g. "RR", "nDCG@10") for one ranked list.

    Scores are assigned by rank (first = highest, all distinct) so trec_eval's
    re-sorting by score keeps our order and never breaks ties by doc id."""
    irm = _ir_measures()
    ranked = ranked_unique(retrieved)
    qrels = [irm.Qrel("q", d, 1) for d in dict.fromkeys(gold)]
    run = [irm.ScoredDoc("q", d, float(len(ranked) - i)) for i, d in enumerate(ranked)]
    parsed = irm.parse_measure(measure)
    for m in irm.iter_calc([parsed], qrels, run):
        return float(m.value)
    return 0.0  # trec_eval reports nothing for an empty run


class _RetrievalMetric(Metric):
    requires = frozenset({"gold_doc_ids"})
    kind = "retrieval"

    @staticmethod
    def _counts(ex: EvalExample) -> dict[str, Any]:
        r, g = set(ex.retrieved_doc_ids), set(ex.question.gold_doc_ids)
        return {"retrieved": len(r), "gold": len(g), "hits": len(r & g)}


@METRICS.register("retrieval_precision")
class RetrievalPrecision(_RetrievalMetric):
    name = "retrieval_precision"
    description = "Fraction of the retrieved documents (as a set) that are gold."

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        p, _, _ = set_precision_recall_f1(ex.retrieved_doc_ids, ex.question.gold_doc_ids)
        return MetricResult(value=p, details=self._counts(ex))


@METRICS.register("retrieval_recall")
class RetrievalRecall(_RetrievalMetric):
    name = "retrieval_recall"
    description = "Fraction of the gold documents retrieved at any rank."

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        _, r, _ = set_precision_recall_f1(ex.retrieved_doc_ids, ex.question.gold_doc_ids)
        return MetricResult(value=r, details=self._counts(ex))


@METRICS.register("retrieval_f1")
class RetrievalF1(_RetrievalMetric):
    name = "retrieval_f1"
    description = "Harmonic mean of set-based retrieval precision and recall (KAIR's retrieval F1)."

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        p, r, f = set_precision_recall_f1(ex.retrieved_doc_ids, ex.question.gold_doc_ids)
        return MetricResult(value=f, details={**self._counts(ex), "precision": p, "recall": r})


class RecallAtK(_RetrievalMetric):
    k: int

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        return MetricResult(value=recall_at_k(ex.retrieved_doc_ids, ex.question.gold_doc_ids, self.k))


def _recall_at(k: int) -> type[RecallAtK]:
    name = f"recall@{k}"
    cls = type(
        f"RecallAt{k}",
        (RecallAtK,),
        {"name": name, "k": k, "description": f"Fraction of the gold documents among the top {k} retrieved."},
    )
    return METRICS.register(name)(cls)


@METRICS.register("sources_recall")
class SourcesRecall(_RetrievalMetric):
    name = "sources_recall"
    description = "Fraction of the gold documents among the answer's sources (S: what the answer was written from)."

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        _, r, _ = set_precision_recall_f1(ex.source_doc_ids, ex.question.gold_doc_ids)
        return MetricResult(value=r)


RECALL_CUTOFFS = (2, 5, 10)
for _k in RECALL_CUTOFFS:
    _recall_at(_k)


class _IRMeasure(_RetrievalMetric):
    def check(self) -> None:
        _ir_measures()


@METRICS.register("mrr")
class MRR(_IRMeasure):
    name = "mrr"
    description = "Reciprocal rank of the first gold document (0 if none retrieved); via ir-measures RR."

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        value = ir_measure("RR", ex.retrieved_doc_ids, ex.question.gold_doc_ids)
        rank = first_relevant_rank(ex.retrieved_doc_ids, ex.question.gold_doc_ids)
        return MetricResult(value=value, details={"first_relevant_rank": rank})


@METRICS.register("ndcg@10")
class NDCG10(_IRMeasure):
    name = "ndcg@10"
    description = "nDCG over the top 10 with binary relevance; via ir-measures nDCG@10."

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        return MetricResult(value=ir_measure("nDCG@10", ex.retrieved_doc_ids, ex.question.gold_doc_ids))
