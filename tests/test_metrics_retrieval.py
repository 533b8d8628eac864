from __future__ import annotations

import asyncio
import math
import random
import sys

import pytest

from marag.corpus.models import Question
from marag.errors import MaragError
from marag.eval.metrics import METRICS, EvalExample, metric_names, score_example
from marag.eval.metrics.retrieval import first_relevant_rank, recall_at_k, set_precision_recall_f1

ALL = metric_names("retrieval")


def _ex(retrieved: list[str], gold: list[str]) -> EvalExample:
    return EvalExample(
        question=Question(id="q", question="?", gold_doc_ids=gold), prediction="", retrieved_doc_ids=retrieved
    )


def _score(retrieved: list[str], gold: list[str], names=None) -> dict[str, float]:
    return {k: r.value for k, r in asyncio.run(score_example(_ex(retrieved, gold), names or ALL)).items()}


def test_registered_names():
    assert set(ALL) == {
        "retrieval_precision", "retrieval_recall", "retrieval_f1",
        "recall@2", "recall@5", "recall@10", "mrr", "ndcg@10", "sources_recall",
        "agent_answerable", "agent_useful",  # routing strategies' agent-level rates (test_ropmura)
    }  # fmt: skip


def test_sources_recall_scores_what_the_answer_cites_not_what_was_read():
    ex = _ex(["a", "b", "c"], ["a", "c"]).model_copy(update={"source_doc_ids": ["a"]})
    got = {k: r.value for k, r in asyncio.run(score_example(ex, ["retrieval_recall", "sources_recall"])).items()}
    assert got == {"retrieval_recall": 1.0, "sources_recall": 0.5}


def test_set_precision_recall_f1_by_hand():
    # retrieved {a,b,c,d}, gold {b,e}: 1 hit -> P = 1/4, R = 1/2, F1 = 2*(1/8)/(3/4) = 1/3
    assert set_precision_recall_f1(["a", "b", "c", "d"], ["b", "e"]) == pytest.approx((1 / 4, 1 / 2, 1 / 3))
    assert set_precision_recall_f1([], ["b"]) == (0.0, 0.0, 0.0)
    assert set_precision_recall_f1(["a"], ["b"]) == (0.0, 0.0, 0.0)
    s = _score(["a", "b", "c", "d"], ["b", "e"], ["retrieval_precision", "retrieval_recall", "retrieval_f1"])
    assert s == pytest.approx({"retrieval_precision": 0.25, "retrieval_recall": 0.5, "retrieval_f1": 1 / 3})


def test_recall_at_k():
    ranked = ["a", "b", "c", "d", "e", "f", "g"]
    gold = ["b", "f", "z"]
    assert recall_at_k(ranked, gold, 2) == pytest.approx(1 / 3)  # b in top 2
    assert recall_at_k(ranked, gold, 5) == pytest.approx(1 / 3)  # f is at rank 6
    assert recall_at_k(ranked, gold, 10) == pytest.approx(2 / 3)
    # a repeated id occupies one rank only
    assert recall_at_k(["a", "a", "b"], ["b"], 2) == 1.0
    s = _score(ranked, gold, ["recall@2", "recall@5", "recall@10"])
    assert s == pytest.approx({"recall@2": 1 / 3, "recall@5": 1 / 3, "recall@10": 2 / 3})


def test_mrr():
    s = asyncio.run(score_example(_ex(["x", "y", "b", "e"], ["b", "e"]), ["mrr"]))["mrr"]
    assert s.value == pytest.approx(1 / 3)  # first relevant document at rank 3
    assert s.details["first_relevant_rank"] == 3
    assert _score(["b"], ["b"], ["mrr"])["mrr"] == 1.0
    assert _score(["x", "y"], ["b"], ["mrr"])["mrr"] == 0.0
    assert _score([], ["b"], ["mrr", "ndcg@10"]) == {"mrr": 0.0, "ndcg@10": 0.0}


def test_ndcg_by_hand():
    # retrieved [a,b,c,d], gold {b,e}: DCG = 1/log2(2+1) (b at rank 2)
    # ideal: both gold at ranks 1, 2 -> IDCG = 1/log2(2) + 1/log2(3) = 1 + 1/log2(3)
    dcg = 1 / math.log2(3)
    assert _score(["a", "b", "c", "d"], ["b", "e"], ["ndcg@10"])["ndcg@10"] == pytest.approx(dcg / (1 + dcg))
    # a gold document at rank 11 is outside the cutoff
    assert _score([f"x{i}" for i in range(10)] + ["b"], ["b"], ["ndcg@10"])["ndcg@10"] == 0.0
    assert _score(["b", "e", "a"], ["b", "e"], ["ndcg@10"])["ndcg@10"] == pytest.approx(1.0)


# -- cross-check the ir-measures numbers with a pure-python version ----------------------


def _rr(ranked, gold):
    rank = first_relevant_rank(ranked, gold)
    return 1 / rank if rank else 0.0


def _ndcg10(ranked, gold):
    g = set(gold)
    dcg = sum(1 / math.log2(i + 1) for i, d in enumerate(ranked[:10], 1) if d in g)
    idcg = sum(1 / math.log2(i + 1) for i in range(1, min(len(g), 10) + 1))
    return dcg / idcg


def test_ir_measures_agree_with_pure_python():
    rng = random.Random(7)
    pool = [f"d{i}" for i in range(30)]
    for _ in range(40):
        ranked = rng.sample(pool, rng.randint(0, 15))
        gold = rng.sample(pool, rng.randint(1, 12))  # includes more than 10 gold: IDCG capped at 10
        s = _score(ranked, gold, ["mrr", "ndcg@10"])
        assert s["mrr"] == pytest.approx(_rr(ranked, gold), abs=1e-9)
        assert s["ndcg@10"] == pytest.approx(_ndcg10(ranked, gold), abs=1e-9)


def test_rank_order_is_kept_for_ids_that_sort_differently():
    # trec_eval re-sorts by score and breaks ties by doc id; scores by rank keep our order
    assert _score(["z", "a"], ["z"], ["mrr"])["mrr"] == 1.0
    assert _score(["a", "z"], ["z"], ["mrr"])["mrr"] == 0.5


def test_without_ir_measures_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ir_measures", None)  # makes `import ir_measures` fail
    with pytest.raises(MaragError, match="ir-measures") as info:
        _score(["a"], ["a"], ["mrr"])
    assert "marag[eval]" in info.value.hint
    with pytest.raises(MaragError, match="ir-measures"):
        METRICS.get("ndcg@10")().check()  # what a runner calls before starting
    # the other retrieval metrics do not need it
    assert _score(["a"], ["a"], ["recall@2"]) == {"recall@2": 1.0}


def test_no_gold_documents_means_not_applicable():
    assert _score(["a", "b"], []) == {}
