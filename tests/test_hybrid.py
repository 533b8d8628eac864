"""Hybrid retrieval: weighted RRF checked by hand on fixed rankings."""

from __future__ import annotations

import pytest

from marag.corpus.models import Chunk
from marag.index.base import Hit
from marag.index.hybrid import HybridRetriever
from marag.index.kinds import RETRIEVERS
from marag.index.retriever import BaseRetriever
from marag.trace import Trace, activate

CHUNKS = [
    Chunk(id=f"c{i}", doc_id=f"doc{i}", text=f"text {i}") for i in range(1, 7)
]  # c1..c6 at positions 0..5
POS = {c.id: i for i, c in enumerate(CHUNKS)}


class Fixed(BaseRetriever):
    """Returns the same ranking for every query (scores descending), honouring restriction."""

    def __init__(self, name: str, ranking: list[str]):
        super().__init__(CHUNKS, name)
        self.ranking = ranking
        self.asked: list[tuple[int, int]] = []

    def _search_batch(self, queries, k, offset):
        self.asked.append((k, offset))
        allowed = [c for c in self.ranking if self._allowed is None or self._allowed[POS[c]]]
        page = allowed[offset : offset + k]
        return [[self._hit(POS[c], 10.0 - r) for r, c in enumerate(page)] for _ in queries]


class Foreign:
    """A retriever that is not a BaseRetriever: only the public protocol."""

    name = "foreign"

    def __init__(self, ranking: list[str]):
        self.ranking = ranking

    def search(self, query, k=10, offset=0):
        return self.search_batch([query], k, offset)[0]

    def search_batch(self, queries, k=10, offset=0):
        hits = [
            Hit(doc_id="doc" + c[1:], chunk_id=c, score=1.0, text="")
            for c in self.ranking[offset : offset + k]
        ]
        return [hits for _ in queries]


def test_weighted_rrf_matches_hand_computation():
    a, b = Fixed("a", ["c1", "c2", "c3"]), Fixed("b", ["c3", "c4", "c1"])
    h = HybridRetriever({"a": a, "b": b}, weights={"a": 1.0, "b": 2.0}, rrf_k=60)
    expected = {
        "c1": 1 / 61 + 2 / 63,
        "c2": 1 / 62,
        "c3": 1 / 63 + 2 / 61,
        "c4": 2 / 62,
    }
    hits = h.search("q", k=10)
    assert [x.chunk_id for x in hits] == ["c3", "c1", "c4", "c2"]
    for x in hits:
        assert x.score == pytest.approx(expected[x.chunk_id], abs=1e-15)
    assert hits[0].doc_id == "doc3" and hits[0].text == "text 3"


def test_equal_fused_scores_are_ordered_by_chunk_position():
    # c5 and c2 each appear once at rank 1 with equal weights: a tie, broken by position.
    h = HybridRetriever([Fixed("a", ["c5"]), Fixed("b", ["c2"])])
    assert [x.chunk_id for x in h.search("q")] == ["c2", "c5"]
    h = HybridRetriever([Fixed("a", ["c2"]), Fixed("b", ["c5"])])
    assert [x.chunk_id for x in h.search("q")] == ["c2", "c5"]


def test_members_retrieve_max_of_depth_and_offset_plus_k():
    a, b = Fixed("a", ["c1", "c2", "c3", "c4", "c5", "c6"]), Fixed("b", ["c6", "c5", "c4"])
    h = HybridRetriever([a, b], depth=4)
    h.search("q", k=2)
    h.search("q", k=3, offset=2)
    assert a.asked == [(4, 0), (5, 0)] and b.asked == [(4, 0), (5, 0)]
    full = [x.chunk_id for x in HybridRetriever([a, b], depth=10).search("q", k=6)]
    paged = [
        x.chunk_id
        for off in (0, 2, 4)
        for x in HybridRetriever([a, b], depth=10).search("q", k=2, offset=off)
    ]
    assert paged == full and len(full) == 6


def test_zero_weight_member_is_left_out_and_foreign_members_work():
    a, b = Fixed("a", ["c1"]), Fixed("b", ["c2"])
    h = HybridRetriever({"a": a, "b": b}, weights={"a": 0.0, "b": 1.0})
    assert [x.chunk_id for x in h.search("q")] == ["c2"] and a.asked == []
    mixed = HybridRetriever({"fixed": Fixed("a", ["c1", "c2"]), "foreign": Foreign(["c2", "c3"])})
    assert [x.chunk_id for x in mixed.search("q")] == ["c2", "c1", "c3"]


def test_one_trace_record_per_hybrid_query():
    h = HybridRetriever([Fixed("a", ["c1"]), Fixed("b", ["c2"])])
    trace = Trace()
    with activate(trace):
        h.search_batch(["x", "y"], k=1)
    assert [(c.retriever, c.query) for c in trace.searches()] == [("hybrid", "x"), ("hybrid", "y")]


def test_restriction_applies_to_every_member():
    h = HybridRetriever([Fixed("a", ["c1", "c2", "c3"]), Fixed("b", ["c4", "c3", "c6"])])
    sub = h.restrict([2, 5], label="odd")  # positions of c3, c6
    assert sub.name == "hybrid[odd]"
    assert {x.chunk_id for x in sub.search("q")} == {"c3", "c6"}
    assert len(h.search("q")) == 5  # the original is unrestricted


def test_bad_arguments():
    a = Fixed("a", ["c1"])
    with pytest.raises(ValueError, match="not members"):
        HybridRetriever({"a": a}, weights={"z": 1.0})
    with pytest.raises(ValueError, match="named 'a'"):
        HybridRetriever([a, Fixed("a", ["c2"])])
    with pytest.raises(ValueError, match="k must be"):
        HybridRetriever([a]).search("q", k=0)


def test_registry_lists_the_built_in_kinds():
    assert {"bm25", "dense", "hybrid"} <= set(RETRIEVERS.names())
    assert RETRIEVERS.get("hybrid") is HybridRetriever


def reference_rrf(rankings: dict[str, list[str]], weights: dict[str, float], rrf_k: int, position) -> list:
    """Weighted RRF written out with dicts: (chunk id, score) best first, equal scores
    (to 12 decimals) by position, then chunk id."""
    fused: dict[str, float] = {}
    for name, ranking in rankings.items():
        for rank, chunk_id in enumerate(ranking, start=1):
            fused[chunk_id] = fused.get(chunk_id, 0.0) + weights[name] / (rrf_k + rank)
    order = sorted(fused, key=lambda c: (-round(fused[c], 12), position(c), c))
    return [(c, fused[c]) for c in order]


def test_fusion_of_real_retrievers_matches_the_reference(data_dir):
    import json

    from marag.index.bm25 import BM25Retriever
    from marag.index.dense import DenseRetriever
    from marag.index.embed import get_embedder

    corpus = json.loads((data_dir / "hotpotqa_train100" / "hotpotqa_train_corpus.json").read_text())
    base = [
        Chunk(id=f"{t}#0", doc_id=t, title=t, text="".join(s).strip()) for t, s in list(corpus.items())[:150]
    ]
    # Twice over, so both members return runs of equal scores and the fusion sees ties.
    chunks = base + [c.model_copy(update={"id": c.id + "'"}) for c in base]
    questions = json.loads((data_dir / "hotpotqa_train100" / "hotpotqa_train.json").read_text())
    queries = [q["question"] for q in questions[:15]]
    members = {
        "bm25": BM25Retriever.from_chunks(chunks),
        "dense": DenseRetriever.from_chunks(chunks, get_embedder("hashing")),
    }
    weights = {"bm25": 1.0, "dense": 0.5}
    h = HybridRetriever(members, weights=weights, depth=30)
    pos = {c.id: i for i, c in enumerate(chunks)}
    for query, hits in zip(queries, h.search_batch(queries, k=8, offset=3)):
        rankings = {n: [x.chunk_id for x in m.search(query, k=30)] for n, m in members.items()}
        expected = reference_rrf(rankings, weights, 60, pos.__getitem__)[3:11]
        assert [x.chunk_id for x in hits] == [c for c, _ in expected]
        assert [x.score for x in hits] == pytest.approx([s for _, s in expected], abs=1e-15)
        assert all(x.text == chunks[pos[x.chunk_id]].text for x in hits)


def test_foreign_hits_outside_the_index_are_fused_and_kept():
    # "zz" and "aa" are not chunks of this index: they are fused like any other, tie
    # among themselves by chunk id, and keep the hit the first member returned.
    rankings = {"a": ["c4", "c3"], "f1": ["zz", "aa"], "f2": ["aa", "zz"]}
    h = HybridRetriever(
        {"a": Fixed("a", rankings["a"]), "f1": Foreign(rankings["f1"]), "f2": Foreign(rankings["f2"])}
    )
    hits = h.search("q", k=10)
    expected = reference_rrf(rankings, {n: 1.0 for n in rankings}, 60, lambda c: POS.get(c, float("inf")))
    assert [x.chunk_id for x in hits] == ["aa", "zz", "c4", "c3"] == [c for c, _ in expected]
    assert [x.score for x in hits] == pytest.approx([s for _, s in expected], abs=1e-15)
    assert (hits[0].doc_id, hits[0].text) == ("doca", "")  # the foreign retriever's own hit
    assert [x.chunk_id for x in h.search("q", k=2, offset=1)] == ["zz", "c4"]
