"""Dense retrieval: exact search vs brute force, HNSW recall, embedders, restriction, I/O."""

from __future__ import annotations

import importlib.util
import zlib

import numpy as np
import pytest

from marag.corpus.models import Chunk
from marag.errors import IndexFormatError, MaragError
from marag.index.dense import DenseRetriever
from marag.index.embed import EMBEDDERS, Embedder, get_embedder, verify_sha256
from marag.trace import Trace, activate


class TableEmbedder:
    """Maps known query strings to fixed vectors (unknown ones to a seeded random unit vector)."""

    name = "table"

    def __init__(self, dim: int, table: dict[str, np.ndarray] | None = None):
        self.dim = dim
        self.table = table or {}
        self.calls = 0

    def embed(self, texts, batch_size: int = 32, progress: bool = False) -> np.ndarray:
        self.calls += 1
        out = []
        for t in texts:
            if t in self.table:
                v = self.table[t]
            else:
                v = np.random.default_rng(zlib.crc32(t.encode())).standard_normal(self.dim)
            out.append(v / np.linalg.norm(v))
        return np.asarray(out, dtype=np.float32)


def unit_rows(n: int, dim: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def chunks_for(n: int) -> list[Chunk]:
    return [Chunk(id=f"d{i}#0", doc_id=f"d{i}", text=f"passage {i}") for i in range(n)]


def brute_force(vectors: np.ndarray, q: np.ndarray, k: int) -> list[int]:
    scores = [float(np.dot(v.astype(np.float64), q.astype(np.float64))) for v in vectors]
    return sorted(range(len(vectors)), key=lambda i: (-round(scores[i], 5), i))[:k]


def test_exact_search_matches_brute_force():
    vectors = unit_rows(500, 32)
    queries = [f"q{i}" for i in range(12)]
    emb = TableEmbedder(32)
    r = DenseRetriever(chunks_for(500), vectors, emb)
    qv = emb.embed(queries)
    results = r.search_batch(queries, k=10)
    assert emb.calls == 2  # one embedding call for the whole batch (plus ours)
    for q, hits in zip(qv, results):
        assert [int(h.doc_id[1:]) for h in hits] == brute_force(vectors, q, 10)
        assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))


def test_paging_and_ties_by_position():
    vectors = unit_rows(50, 8, seed=1)
    vectors[10:15] = vectors[3]  # five identical rows tie with row 3
    emb = TableEmbedder(8, {"q": vectors[3]})
    r = DenseRetriever(chunks_for(50), vectors, emb)
    top = [h.chunk_id for h in r.search("q", k=6)]
    assert top == ["d3#0", "d10#0", "d11#0", "d12#0", "d13#0", "d14#0"]
    paged = [h.chunk_id for off in (0, 2, 4) for h in r.search("q", k=2, offset=off)]
    assert paged == top


def test_restriction_searches_only_the_subset():
    vectors = unit_rows(100, 16, seed=2)
    emb = TableEmbedder(16, {"q": vectors[7]})
    r = DenseRetriever(chunks_for(100), vectors, emb)
    assert r.search("q", k=1)[0].chunk_id == "d7#0"
    allowed = list(range(50, 100))
    sub = r.restrict(allowed, label="half")
    hits = sub.search("q", k=10)
    assert len(hits) == 10 and all(int(h.doc_id[1:]) >= 50 for h in hits)
    # Same ranking as brute force over the subset.
    assert [int(h.doc_id[1:]) for h in hits] == [50 + i for i in brute_force(vectors[50:], vectors[7], 10)]
    assert len(sub.restrict([60, 70]).search("q", k=10)) == 2


@pytest.mark.skipif(
    importlib.util.find_spec("faiss") is None, reason="faiss not installed (pip install 'marag[faiss]')"
)
def test_hnsw_recall_against_exact():
    vectors = unit_rows(3000, 32, seed=3)
    emb = TableEmbedder(32)
    chunks = chunks_for(3000)
    exact = DenseRetriever(chunks, vectors, emb)
    hnsw = DenseRetriever(chunks, vectors, emb, ann="hnsw", ef_search=64)
    queries = [f"q{i}" for i in range(50)]
    found = 0
    for e, h in zip(exact.search_batch(queries, k=10), hnsw.search_batch(queries, k=10)):
        found += len({x.chunk_id for x in e} & {x.chunk_id for x in h})
    assert found / 500 >= 0.9
    # A restricted HNSW retriever searches its subset exactly.
    sub = hnsw.restrict(list(range(100)))
    assert {h.chunk_id for h in sub.search("q0", k=5)} == {
        h.chunk_id for h in exact.restrict(list(range(100))).search("q0", k=5)
    }


def test_save_and_load_roundtrip_with_lazy_embedder(tmp_path):
    chunks = [
        Chunk(id=f"d{i}#0", doc_id=f"d{i}", text=t)
        for i, t in enumerate(
            ["cats purr and sleep", "dogs bark at night", "the stock market fell", "cats and dogs play"]
        )
    ]
    r = DenseRetriever.from_chunks(chunks, get_embedder("hashing"))
    r.save(tmp_path / "dense")
    assert (tmp_path / "dense" / "vectors.npy").is_file()
    made = []

    def factory():
        made.append(1)
        return get_embedder("hashing")

    loaded = DenseRetriever.load_dir(tmp_path / "dense", chunks, embedder=factory)
    assert made == []  # nothing loaded until the first query
    assert [h.chunk_id for h in loaded.search("cats", k=2)] == [h.chunk_id for h in r.search("cats", k=2)]
    assert made == [1]
    assert loaded.vectors.dtype == np.float32 and loaded.vectors.shape == (4, 256)


def test_embedder_with_wrong_dimension_is_refused(tmp_path):
    r = DenseRetriever(chunks_for(3), unit_rows(3, 8), TableEmbedder(8))
    r.save(tmp_path / "d")
    loaded = DenseRetriever.load_dir(tmp_path / "d", chunks_for(3), embedder=lambda: TableEmbedder(16))
    with pytest.raises(IndexFormatError, match="16-dim"):
        loaded.search("x")


def test_search_is_traced():
    r = DenseRetriever(chunks_for(20), unit_rows(20, 8), TableEmbedder(8))
    trace = Trace()
    with activate(trace):
        hits = r.search("anything", k=3)
    (call,) = trace.searches()
    assert call.retriever == "dense" and call.k == 3
    assert [h["chunk_id"] for h in call.hits] == [h.chunk_id for h in hits]


def test_registry_and_protocol():
    assert {"minilm", "wordllama", "hashing"} <= set(EMBEDDERS.names())
    assert isinstance(get_embedder("hashing"), Embedder)
    with pytest.raises(MaragError, match="unknown embedders"):
        get_embedder("nope")


def test_sha256_mismatch_is_refused(tmp_path):
    f = tmp_path / "model.onnx"
    f.write_bytes(b"not a model")
    with pytest.raises(MaragError, match="expected 00"):
        verify_sha256(f, "00" * 32, "test model", hint="reinstall")


@pytest.fixture(scope="module")
def minilm():
    return get_embedder("minilm")


def test_minilm_similar_sentences_score_higher(minilm):
    v = minilm.embed(
        ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."]
    )
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    food_bread, food_girl = float(v[0] @ v[1]), float(v[0] @ v[2])
    assert food_bread > 0.5 and food_bread > food_girl + 0.3


def test_minilm_truncates_and_batches_consistently(minilm):
    long = "word " * 2000  # far beyond 256 tokens
    texts = ["short text", long, "another short text about cats"]
    together = minilm.embed(texts, batch_size=2)
    alone = np.vstack([minilm.embed([t]) for t in texts])
    assert np.allclose(together, alone, atol=1e-4)  # padding does not change a text's vector


@pytest.mark.skipif(
    importlib.util.find_spec("wordllama") is None, reason="wordllama not installed (marag[fast-embed])"
)
def test_wordllama_loads_offline_and_ranks_sensibly():
    emb = get_embedder("wordllama")
    v = emb.embed(
        ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.", ""]
    )
    assert v.shape == (4, 256)
    assert float(v[0] @ v[1]) > float(v[0] @ v[2])
    assert not np.isnan(v).any() and np.allclose(v[3], 0)  # no tokens: a zero row, not NaN
