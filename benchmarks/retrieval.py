"""Retrieval speed against the raw engines, and retrieval quality on real benchmark data.

Speed (default): marag's retrievers against the engines they wrap, on the same texts and
the same vectors, in one run, as queries/s and ratios (marag / raw; 1.0 = no cost), each
both amortized over all `--rounds` (total time, every pause such as a garbage collection
included: what a user pays) and for the best round alone, with the full (generation-2)
garbage collections that started inside each side's rounds. Objects loaded before timing
are frozen (`gc.freeze`, as `marag eval` does; `--no-freeze` to see the difference):
otherwise a collection that the raw engine's allocations set off would walk marag's
loaded index on the raw engine's time.

- BM25: `open_index(dir).retriever("bm25")` after `build_index` (the public path) vs raw
  bm25s (numba backend, Lucene BM25, same k1/b, bm25s's own stemmed tokenizer).
- dense exact: DenseRetriever vs the engine it wraps, numpy (a matrix product per block
  of queries, argpartition, a sort of the top); faiss IndexFlatIP's speed on the same
  vectors is noted beside it. Query vectors are computed beforehand and handed to both
  sides (marag through a lookup embedder): the embedding model's time is not the
  wrapper's.
- dense HNSW: DenseRetriever(ann="hnsw") vs a faiss graph searched directly. marag stores
  a passage that occurs several times once; the raw graph holds every chunk's vector.
- hybrid: marag's fused search vs the sum of raw BM25 and raw exact search, both asked
  for the hybrid's depth (it needs that many candidates from each).

Corpora (`--corpora`): `pools` (the HotpotQA and NQ passage pools, 1.6k passages, MiniLM
vectors), `pools-dup` (the same, every passage three times), `tiled` (`--passages`
passages of real text: the HotpotQA, NQ, MuSiQue and DataMorgana pools tiled with
sentence-level perturbation so no two passages are identical), `tiled-dup` (as many
passages, a quarter of them unique, each present four times at scattered positions),
and `synthetic` (Zipf pseudo-words, the old default). Encoding 200k passages with MiniLM
takes over an hour on two cores, so the tiled corpora use `--embedder` (default
wordllama, else hashing). Queries are the HotpotQA and NQ questions.

    nice -n 10 python benchmarks/retrieval.py                      # all real-text corpora
    python benchmarks/retrieval.py --corpora pools,pools-dup --hnsw-ef 16,32,64,128

`--hnsw-ef` also prints HNSW recall@10 against exact search for each efSearch value, on
the MiniLM vectors of all four shared pools (DataMorgana as 256-token windows).

Quality: `--dataset hotpotqa|musique|nq|datamorgana` indexes that shared dataset's corpus
with marag's own loader and chunker and prints document-level recall@2/5/10 of BM25,
dense (long chunks truncated, and read as windows) and hybrid.

    nice -n 10 python benchmarks/retrieval.py --dataset datamorgana
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from marag.collector import freeze_long_lived
from marag.corpus.models import Chunk
from marag.index.bm25 import BM25Retriever
from marag.index.dense import DenseRetriever, Layout, build_hnsw
from marag.index.embed import get_embedder
from marag.index.hybrid import HybridRetriever
from marag.index.traced import index_text

DATASETS = {
    "hotpotqa": "hotpotqa_train100",
    "musique": "musique_train100",
    "nq": "nq_open_oracle",
    "datamorgana": "datamorgana",
}
K = 10


# -- corpora ----------------------------------------------------------------------------------
def load_pool(name: str, data_dir: str | None) -> tuple[list[Chunk], list[str]]:
    """A shared dataset's passages (marag's loader and chunker) and its questions."""
    from marag.config import data_dir as find_data
    from marag.corpus import chunk_documents, load_corpus

    corpus = load_corpus(find_data(data_dir) / DATASETS[name])
    return list(chunk_documents(corpus.documents)), [q.question for q in corpus.questions]


def renamed(chunks: list[Chunk], tag: str) -> list[Chunk]:
    return [Chunk(id=f"{c.id}@{tag}", doc_id=c.doc_id, title=c.title, text=c.text) for c in chunks]


def pools(data_dir: str | None) -> tuple[list[Chunk], list[str]]:
    chunks, queries = [], []
    for name in ("hotpotqa", "nq"):
        c, q = load_pool(name, data_dir)
        chunks += c
        queries += q
    return chunks, queries


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def passages_of(chunks: list[Chunk], words: int = 120) -> list[str]:
    """Real passages of at most ~`words` words: short chunks as they are, long ones
    (DataMorgana's web pages) cut at sentence ends."""
    out = []
    for c in chunks:
        current: list[str] = []
        for sentence in _SENTENCE_END.split(c.text.strip()):
            current.append(sentence)
            if sum(len(s.split()) for s in current) >= words:
                out.append(" ".join(current))
                current = []
        if current:
            out.append(" ".join(current))
    return [p for p in out if len(p.split()) >= 5]


def perturbed(base: list[str], n: int, seed: int) -> list[str]:
    """`n` distinct passages made from `base`: copies after the first have one of their
    sentences dropped, repeated or replaced by a sentence of another passage, and
    adjacent sentences swapped, so they are near-duplicates as on the web."""
    rng = np.random.default_rng(seed)
    split = [_SENTENCE_END.split(p) for p in base]
    out, seen = list(base[:n]), set(base[:n])
    while len(out) < n:
        i = int(rng.integers(len(base)))
        sentences = list(split[i])
        j = int(rng.integers(len(sentences)))
        op = int(rng.integers(3))
        other = split[int(rng.integers(len(base)))]
        if op == 0 and len(sentences) > 1:
            del sentences[j]
        elif op == 1:
            sentences.insert(j, sentences[j])
        else:
            sentences[j] = other[int(rng.integers(len(other)))]
        if len(sentences) > 1:
            a = int(rng.integers(len(sentences) - 1))
            sentences[a], sentences[a + 1] = sentences[a + 1], sentences[a]
        text = " ".join(sentences)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def tiled(args: argparse.Namespace, duplicates: int) -> list[Chunk]:
    """`args.passages` passages of real text, `duplicates` exact copies of each unique
    one, the copies at scattered positions."""
    base = []
    for name in DATASETS:
        base += passages_of(load_pool(name, args.data_dir)[0])
    texts = perturbed(base, args.passages // duplicates, args.seed)
    order = np.random.default_rng(args.seed + 1).permutation(len(texts) * duplicates)
    return [Chunk(id=f"t{i}#0", doc_id=f"t{i}", text=texts[j % len(texts)]) for i, j in enumerate(order)]


def synthetic(passages: int, seed: int, vocab_size: int = 50_000) -> list[Chunk]:
    """Zipf-distributed pronounceable pseudo-words, 30-80 per passage."""
    rng = np.random.default_rng(seed)
    cons, vows = list("bcdfghjklmnprstvwz"), list("aeiou")
    words: set[str] = set()
    while len(words) < vocab_size:
        syllables = int(rng.integers(1, 5))
        words.add("".join(rng.choice(cons) + rng.choice(vows) for _ in range(syllables)) + str(rng.choice(cons)))
    vocab = np.array(sorted(words))
    rng.shuffle(vocab)
    p = 1.0 / np.arange(1, vocab_size + 1) ** 1.07
    lengths = rng.integers(30, 81, size=passages)
    drawn = vocab[rng.choice(vocab_size, size=int(lengths.sum()), p=p / p.sum())]
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return [
        Chunk(id=f"p{i}#0", doc_id=f"p{i}", text=" ".join(drawn[bounds[i] : bounds[i + 1]]))
        for i in range(passages)
    ]


# -- vectors ------------------------------------------------------------------------------------
def cached_vectors(
    embedder_name: str, texts: list[str], cache: Path | None, windows: bool = False, progress: bool = False
):
    """(vectors, windows) of `texts` (text i's vectors are rows windows[i]..windows[i+1]-1),
    from the cache directory when encoded before."""
    key = hashlib.sha256("\x00".join([embedder_name, str(windows), *texts]).encode()).hexdigest()[:24]
    path = cache / f"{embedder_name}-{key}.npz" if cache else None
    if path and path.is_file():
        saved = np.load(path)
        return saved["vectors"], saved["starts"]
    embedder = get_embedder(embedder_name)
    if windows and hasattr(embedder, "embed_windows"):
        vectors, starts = embedder.embed_windows(texts, overlap=32, progress=progress)
    else:
        vectors, starts = embedder.embed(texts, progress=progress), np.arange(len(texts) + 1)
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, vectors=vectors, starts=starts)
    return vectors, starts


class LookupEmbedder:
    """Returns precomputed query vectors, so searches time the search, not the model."""

    name = "lookup"

    def __init__(self, queries: list[str], vectors: np.ndarray):
        self.dim = vectors.shape[1]
        self._rows = {q: i for i, q in enumerate(queries)}
        self._vectors = vectors

    def embed(self, texts, batch_size: int = 32, progress: bool = False) -> np.ndarray:
        if len(texts) == 1:  # a view, as the raw engines' single queries get (qvecs[i:i+1])
            i = self._rows[texts[0]]
            return self._vectors[i : i + 1]
        return self._vectors[[self._rows[t] for t in texts]]


# -- raw engines ----------------------------------------------------------------------------------
class RawBM25:
    name = "bm25s (numba, own tokenizer)"

    def __init__(self, chunks: list[Chunk], k1: float, b: float):
        import bm25s
        import Stemmer

        self._bm25s = bm25s
        self.stemmer = Stemmer.Stemmer("english")
        self.model = bm25s.BM25(k1=k1, b=b, method="lucene", backend="numba")
        tokens = bm25s.tokenize([index_text(c) for c in chunks], stopwords="en", stemmer=self.stemmer, show_progress=False)
        self.model.index(tokens, show_progress=False)

    def search(self, queries: list[str], k: int, threads: int = 1):
        tokens = self._bm25s.tokenize(queries, stopwords="en", stemmer=self.stemmer, show_progress=False, return_ids=False)
        return self.model.retrieve(tokens, k=k, show_progress=False, n_threads=threads)


class RawExact:
    """Exact inner-product search as marag's exact retriever does it, without marag: a
    numpy matrix product per block of queries, then argpartition and a sort of the top."""

    name = "numpy matmul + argpartition"

    def __init__(self, vectors: np.ndarray, block: int):
        self.vectors, self.block = np.ascontiguousarray(vectors, dtype=np.float32), block

    def search(self, q: np.ndarray, k: int):
        out = []
        for a in range(0, len(q), self.block):
            s = q[a : a + self.block] @ self.vectors.T
            top = np.argpartition(-s, k - 1, axis=1)[:, :k]
            order = np.argsort(-np.take_along_axis(s, top, axis=1), axis=1)
            out.append(np.take_along_axis(top, order, axis=1))
        return np.concatenate(out)


def faiss_flat_note(vectors: np.ndarray, qvecs: np.ndarray, repeats: int, n_single: int) -> str:
    """faiss's exact search on the same vectors, for reference: another engine (C++
    selection), not the one marag wraps."""
    if not importlib.util.find_spec("faiss"):
        return ""
    import faiss

    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(np.ascontiguousarray(vectors, dtype=np.float32))
    single, batch = timed_rounds(
        [lambda: [flat.search(qvecs[i : i + 1], K) for i in range(n_single)], lambda: flat.search(qvecs, K)], repeats
    )
    single, batch = single.per_second(n_single)[0], batch.per_second(len(qvecs))[0]
    return f"; faiss IndexFlatIP {single:,.0f} / {batch:,.0f} q/s amortized"


class RawHNSW:
    name = "faiss HNSW"

    def __init__(self, graph, ef_search: int):
        import faiss

        self.graph = graph
        self.params = lambda k: faiss.SearchParametersHNSW(efSearch=max(ef_search, k))

    def search(self, q: np.ndarray, k: int):
        return self.graph.search(q, k, params=self.params(k))


# -- measuring -------------------------------------------------------------------------------------
@dataclass
class Timing:
    """One function's timed rounds (after an untimed warm-up)."""

    best: float  # the fastest round, s
    total: float  # all rounds, s: what a user running them one after another waits
    rounds: int
    full_collections: int  # generation-2 garbage collections that started inside its rounds
    collection_s: float  # time those took

    def per_second(self, work: int) -> tuple[float, float]:
        """(amortized, best-round) items per second for `work` items per round."""
        return work * self.rounds / self.total, work / self.best


class _Collections:
    """Counts full (generation-2) collections, and their time, charged to `current`."""

    def __init__(self, n: int):
        self.counts, self.seconds, self.current = [0] * n, [0.0] * n, None
        self._started = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if info["generation"] != 2 or self.current is None:
            return
        if phase == "start":
            self._started = time.perf_counter()
            self.counts[self.current] += 1
        else:
            self.seconds[self.current] += time.perf_counter() - self._started


def timed_rounds(fns: list[Callable[[], object]], rounds: int) -> list[Timing]:
    """`rounds` timed runs of each function after a warm-up, the functions taking turns
    within each round, so a burst of load from other jobs falls on all of them rather
    than on whichever happened to run then. Each function's total time counts every
    pause inside its rounds (garbage collections included); its best round does not."""
    for fn in fns:
        fn()
    best, total = [float("inf")] * len(fns), [0.0] * len(fns)
    seen = _Collections(len(fns))
    gc.callbacks.append(seen)
    try:
        for _ in range(rounds):
            for i, fn in enumerate(fns):
                seen.current = i
                t0 = time.perf_counter()
                fn()
                dt = time.perf_counter() - t0
                seen.current = None
                best[i] = min(best[i], dt)
                total[i] += dt
    finally:
        gc.callbacks.remove(seen)
    return [Timing(b, t, rounds, c, s) for b, t, c, s in zip(best, total, seen.counts, seen.seconds)]


def amortized(fn: Callable[[], object], rounds: int) -> float:
    """Seconds per round, all rounds counted (pauses included)."""
    timing = timed_rounds([fn], rounds)[0]
    return timing.total / timing.rounds


@dataclass
class Row:
    corpus: str
    passages: int
    retriever: str
    raw: str
    # q/s: marag single, raw single, marag batch, raw batch
    speeds: tuple[float, float, float, float]  # amortized over all rounds (total time)
    best: tuple[float, float, float, float]  # the best round
    full_collections: tuple[int, int]  # generation-2 collections inside marag's / raw's rounds
    note: str = ""


def measure(
    corpus: "Corpus", name: str, retriever, raw_name: str, raw: Callable[[slice], object], args, note: str = ""
) -> Row:
    """q/s of a marag retriever and of the raw engine doing the same work: one query per
    call (the first `--single-queries` queries), then all queries in one call. `raw`
    answers the queries in a slice of corpus.queries."""
    queries, rounds = corpus.queries, args.rounds
    n_single = min(len(queries), args.single_queries)
    if not args.no_freeze:
        # What is loaded now stays for the whole measurement, as in `marag eval` (which
        # freezes it too): a full collection walks only what either side allocates.
        # Without it, marag's searches still set off no collection (they hold them), but
        # the raw engine's allocations would, and pay for walking marag's loaded index.
        freeze_long_lived()
    t = timed_rounds(
        [
            lambda: [retriever.search(q, k=K) for q in queries[:n_single]],
            lambda: [raw(slice(i, i + 1)) for i in range(n_single)],
            lambda: retriever.search_batch(queries, k=K),
            lambda: raw(slice(None)),
        ],
        rounds,
    )
    per = [timing.per_second(n) for timing, n in zip(t, (n_single, n_single, len(queries), len(queries)))]
    row = Row(
        corpus.label, len(corpus.chunks), name, raw_name,
        speeds=tuple(a for a, _ in per), best=tuple(b for _, b in per),  # type: ignore[arg-type]
        full_collections=(t[0].full_collections + t[2].full_collections, t[1].full_collections + t[3].full_collections),
        note=note,
    )
    print(format_row(row), flush=True)
    return row


def format_row(r: Row) -> str:
    def four(v: tuple[float, float, float, float]) -> str:
        single, raw_single, batch, raw_batch = v
        return (
            f"{single:,.0f} | {raw_single:,.0f} | {single / raw_single:.2f} | "
            f"{batch:,.0f} | {raw_batch:,.0f} | {batch / raw_batch:.2f}"
        )

    return (
        f"| {r.corpus} | {r.passages:,} | {r.retriever} | {r.raw} | {four(r.speeds)} | {four(r.best)} | "
        f"{r.full_collections[0]} / {r.full_collections[1]} | {r.note} |"
    )


TABLE_HEAD = (
    "| corpus | passages | retriever | raw engine | marag single q/s | raw single q/s | ratio | marag batch q/s | "
    "raw batch q/s | ratio | best round: marag single | raw single | ratio | marag batch | raw batch | ratio | "
    "full collections marag / raw | notes |\n"
    "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)


# -- one corpus, every retriever ---------------------------------------------------------------------
@dataclass
class Corpus:
    label: str
    chunks: list[Chunk]
    queries: list[str]
    embedder: str
    unique_texts: list[str]  # what gets embedded ...
    which: np.ndarray  # ... and chunk i's vector is the one of unique_texts[which[i]]


def corpora(args: argparse.Namespace) -> list[Corpus]:
    names = [n for n in args.corpora.split(",") if n]
    unknown = set(names) - {"pools", "pools-dup", "tiled", "tiled-dup", "synthetic"}
    if unknown:
        raise SystemExit(f"unknown corpora {sorted(unknown)}")
    if not names:
        return []
    pool, queries = pools(args.data_dir)
    texts = [index_text(c) for c in pool]
    out = []
    n = len(pool)
    if "pools" in names:
        out.append(Corpus("pools", pool, queries, "minilm", texts, np.arange(n)))
    if "pools-dup" in names:
        copies = [c for copy in range(3) for c in renamed(pool, str(copy))]
        out.append(Corpus("pools x3", copies, queries, "minilm", texts, np.tile(np.arange(n), 3)))
    emb = pick_embedder(args.embedder)
    for label, copies in (("tiled", 1), ("tiled-dup", 4)):
        if label in names:
            chunks = tiled(args, copies)
            unique = sorted({c.text for c in chunks})
            where = {t: i for i, t in enumerate(unique)}
            tag = "real text" if copies == 1 else f"real text, {len(unique):,} unique x{copies}"
            out.append(Corpus(f"{label} ({tag})", chunks, queries, emb, unique, np.array([where[c.text] for c in chunks])))
    if "synthetic" in names:
        chunks = synthetic(args.passages, args.seed)
        out.append(Corpus("synthetic", chunks, queries, emb, [c.text for c in chunks], np.arange(len(chunks))))
    return out


def pick_embedder(name: str) -> str:
    if name != "auto":
        return name
    return "wordllama" if importlib.util.find_spec("wordllama") else "hashing"


def speed_corpus(corpus: Corpus, args, work: Path, cache: Path | None) -> list[Row]:
    from marag.index import IndexConfig, build_index, open_index

    t0 = time.perf_counter()
    build_index(corpus.chunks, work / "idx", IndexConfig(retrievers=["bm25"]), overwrite=True, progress=False)
    index = open_index(work / "idx")
    bm25 = index.retriever("bm25")
    build_s = time.perf_counter() - t0
    raw_bm25 = RawBM25(index.chunks, bm25.k1, bm25.b)
    queries = corpus.queries
    postings = bm25.rank_counted(queries, K)[1].sum(axis=0)
    rows = [
        measure(corpus, "bm25", bm25, raw_bm25.name, lambda s: raw_bm25.search(queries[s], K), args,
                f"built via build_index in {build_s:.0f}s; pruning read {postings[0] / postings[1]:.0%} of the postings")
    ]
    if args.bm25_threads > 1:
        n = args.bm25_threads
        threaded = BM25Retriever(index.chunks, bm25.model, n_threads=n)
        rows.append(
            measure(corpus, f"bm25, {n} threads", threaded, f"{raw_bm25.name}, {n} threads",
                    lambda s: raw_bm25.search(queries[s], K, threads=n), args,
                    "threads split a batch; single queries run as above")
        )
    unique_vectors, _ = cached_vectors(corpus.embedder, corpus.unique_texts, cache, progress=args.progress)
    vectors = np.ascontiguousarray(unique_vectors[corpus.which])  # what a raw engine indexes: one per chunk
    qvecs, _ = cached_vectors(corpus.embedder, queries, cache, progress=args.progress)
    lookup = LookupEmbedder(queries, qvecs)
    # marag stores each distinct text's vector once (see marag.index.dense).
    layout = Layout(np.arange(len(unique_vectors) + 1), corpus.which)
    exact = DenseRetriever(index.chunks, unique_vectors, lookup, layout=layout)
    raw_exact = RawExact(vectors, exact.query_block)
    emb_note = (
        f"{corpus.embedder} {vectors.shape[1]}d; marag holds {len(unique_vectors):,} distinct vectors, "
        f"raw all {len(vectors):,}; query encoding excluded"
    ) + faiss_flat_note(vectors, qvecs, args.rounds, min(len(queries), args.single_queries))
    rows.append(
        measure(corpus, "dense exact", exact, raw_exact.name, lambda s: raw_exact.search(qvecs[s], K), args, emb_note)
    )
    if importlib.util.find_spec("faiss"):
        rows.append(hnsw_row(corpus, exact, vectors, qvecs, args))
    hybrid = HybridRetriever({"bm25": bm25, "dense": exact})
    depth = hybrid.depth

    def raw_parts(s: slice):
        return raw_bm25.search(queries[s], depth), raw_exact.search(qvecs[s], depth)

    rows.append(
        measure(corpus, "hybrid (bm25 + dense exact)", hybrid, f"sum of both raw engines at k={depth}", raw_parts,
                args, f"RRF depth {depth}")
    )
    return rows


def hnsw_row(corpus: Corpus, exact: DenseRetriever, vectors: np.ndarray, qvecs: np.ndarray, args) -> Row:
    """marag's graph (over its distinct vectors) vs a faiss graph over every chunk's vector,
    as a raw faiss user would build it; recall counts a hit whose exact score ties the
    k-th best as found, since copies of a passage are interchangeable."""
    t0 = time.perf_counter()
    graph = build_hnsw(exact.vectors, m=args.hnsw_m, ef_construction=args.ef_construction)
    graph_s = time.perf_counter() - t0
    hnsw = DenseRetriever(
        exact.chunks, exact.vectors, exact.embedder, ann="hnsw", hnsw=graph, ef_search=args.ef_search,
        layout=exact.layout,
    )
    raw_graph = graph if len(vectors) == len(exact.vectors) else build_hnsw(vectors, args.hnsw_m, args.ef_construction)
    raw = RawHNSW(raw_graph, args.ef_search)
    kth = np.array([hits[-1].score for hits in exact.search_batch(corpus.queries, k=K)])
    marag_scores = [[h.score for h in hits] for hits in hnsw.search_batch(corpus.queries, k=K)]
    raw_scores = raw.search(qvecs, K)[0]
    note = (
        f"M={args.hnsw_m}, efC={args.ef_construction}, efS={args.ef_search}; marag graph {graph_s:.0f}s; "
        f"recall@10 vs exact: marag {tied_recall(marag_scores, kth).mean():.3f}, raw {tied_recall(raw_scores, kth).mean():.3f}"
    )
    return measure(corpus, "dense HNSW", hnsw, raw.name, lambda s: raw.search(qvecs[s], K), args, note)


def tied_recall(scores, kth: np.ndarray) -> np.ndarray:
    """Per query, the share of the k returned hits that score at least the exact k-th
    best (with a little float slack)."""
    return np.array([np.sum(np.asarray(s[:K]) >= t - 1e-5) / K for s, t in zip(scores, kth)])


# -- HNSW recall on real MiniLM vectors ---------------------------------------------------------------
def hnsw_sweep(args, cache: Path | None) -> None:
    """recall@10 against exact search for each efSearch, on the MiniLM vectors of all
    four shared pools (long DataMorgana chunks as windows), with all their questions."""
    chunks: list[Chunk] = []
    queries: list[str] = []
    for name in DATASETS:
        c, q = load_pool(name, args.data_dir)
        chunks += renamed(c, name)
        queries += q
    vectors, windows = cached_vectors(
        "minilm", [index_text(c) for c in chunks], cache, windows=True, progress=args.progress
    )
    qvecs, _ = cached_vectors("minilm", queries, cache, progress=args.progress)
    lookup = LookupEmbedder(queries, qvecs)
    layout = Layout(windows, np.arange(len(chunks)))
    exact = DenseRetriever(chunks, vectors, lookup, layout=layout)
    graph = build_hnsw(vectors, m=args.hnsw_m, ef_construction=args.ef_construction)
    print(
        f"\n## HNSW recall@{K} against exact search: MiniLM vectors of the four shared pools "
        f"({len(chunks):,} chunks, {len(vectors):,} windows), {len(queries):,} questions, "
        f"M={args.hnsw_m}, efConstruction={args.ef_construction}\n"
    )
    print("| efSearch | recall@10 | worst query | batch q/s (amortized) |")
    print("|---:|---:|---:|---:|")
    kth = np.array([hits[-1].score for hits in exact.search_batch(queries, k=K)])
    for ef in (int(x) for x in args.hnsw_ef.split(",")):
        hnsw = DenseRetriever(chunks, vectors, lookup, ann="hnsw", hnsw=graph, ef_search=ef, layout=layout)
        per_query = tied_recall([[h.score for h in hits] for hits in hnsw.search_batch(queries, k=K)], kth)
        qps = len(queries) / amortized(lambda: hnsw.search_batch(queries, k=K), args.rounds)
        print(f"| {ef} | {np.mean(per_query):.4f} | {min(per_query):.1f} | {qps:,.0f} |", flush=True)


def machine() -> str:
    """CPU model and core count, as the kernel reports them."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model or 'unknown CPU'}, {os.cpu_count()} cores"


def print_speed_table(rows: list[Row], n_queries: int, args, seconds: float) -> None:
    blas = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or "library default"
    print(
        f"\n## Retrieval speed, marag vs the raw engine (k={K}, {args.rounds} rounds, amortized and best round, "
        f"{seconds:.0f}s in all)\n"
    )
    print(
        f"Settings: {machine()}; Python {sys.version.split()[0]}; BM25 threads 1 "
        f"(and {args.bm25_threads} in the rows that say so), BLAS threads {blas}; k={K}; {n_queries} queries "
        f"(HotpotQA and NQ questions); {args.rounds} timed rounds after one untimed warm-up, marag and the raw "
        f"engine taking turns in each round; "
        + ("objects loaded before timing frozen (gc.freeze, as `marag eval` does)." if not args.no_freeze
           else "nothing frozen (--no-freeze).")
        + "\n"
    )
    print(
        f"single = one query per call (the first {min(n_queries, args.single_queries)}), batch = all of them in one "
        "call; ratio = marag / raw (1.0: the wrapper costs nothing). The first six speed columns are amortized: "
        "all queries of all rounds over the total time of all rounds, every pause (garbage collection, "
        "other jobs) included; the next six are the best round alone. Full collections: generation-2 garbage "
        "collections that started inside marag's / the raw engine's timed rounds.\n"
    )
    print(TABLE_HEAD)
    for r in rows:
        print(format_row(r))


def speed(args: argparse.Namespace) -> None:
    cache = Path(args.cache_dir) if args.cache_dir else None
    rows: list[Row] = []
    work = Path(tempfile.mkdtemp(prefix="marag-bench-"))
    started = time.perf_counter()
    n_queries = 0
    try:
        for corpus in corpora(args):
            n_queries = len(corpus.queries)
            print(f"\n{corpus.label}: {len(corpus.chunks):,} passages, {n_queries} queries", flush=True)
            rows += speed_corpus(corpus, args, work, cache)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if rows:
        print_speed_table(rows, n_queries, args, time.perf_counter() - started)
    if args.hnsw_ef:
        hnsw_sweep(args, cache)


# -- recall on real data ----------------------------------------------------------------------
def recall_at(ranked_docs: list[str], gold: list[str], k: int) -> float:
    return len(set(ranked_docs[:k]) & set(gold)) / len(set(gold))


def doc_ranking(hits) -> list[str]:
    seen: dict[str, None] = {}
    for h in hits:
        seen.setdefault(h.doc_id, None)
    return list(seen)


def recall_systems(work: Path, chunks, corpus, args) -> tuple[dict[str, object], float]:
    """BM25, dense with long chunks truncated and as windows, and their hybrids."""
    from marag.index import IndexConfig, build_index, corpus_hash, open_index

    emb_name = "minilm" if args.embedder == "auto" else args.embedder
    options = {"threads": args.threads} if emb_name == "minilm" else None
    systems: dict[str, object] = {}
    t0 = time.perf_counter()
    for mode in args.long_chunks.split(","):
        parts = ["bm25", "dense"] if not systems else ["dense"]
        config = IndexConfig(embedder=emb_name, retrievers=parts, dense_long_chunks=mode,
                             chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap)
        build_index(list(chunks), work / mode, config, corpus_hash(corpus.documents), progress=args.progress)
        idx = open_index(work / mode, embedder_options=options)
        if "bm25" not in systems:
            systems["bm25"] = idx.retriever("bm25")
        dense = idx.retriever("dense")
        layout = idx.manifest["parts"]["dense"]["layout"]
        label = f"dense {emb_name}, {mode} ({layout['vectors']:,} vectors)"
        systems[label] = dense
        # The hybrid needs members over the same chunk list to fuse arrays; over two
        # index directories they are equal lists, so it fuses their hits instead.
        pair = {"bm25": systems["bm25"], "dense": dense}
        systems[f"hybrid 1:1, {mode}"] = HybridRetriever(pair)
        systems[f"hybrid bm25 2:1, {mode}"] = HybridRetriever(pair, weights={"bm25": 2.0, "dense": 1.0})
    return systems, time.perf_counter() - t0


def recall(args: argparse.Namespace) -> None:
    from marag.config import data_dir
    from marag.corpus import chunk_documents, load_corpus  # the corpus layer's own loader

    corpus = load_corpus(data_dir(args.data_dir) / DATASETS[args.dataset])
    questions = [q for q in corpus.questions if q.gold_doc_ids][: args.limit or None]
    chunks = chunk_documents(corpus.documents, size=args.chunk_size, overlap=args.chunk_overlap)
    print(
        f"{args.dataset}: {len(corpus.documents)} documents, {len(chunks)} chunks of {args.chunk_size} words, "
        f"{len(questions)} questions with gold documents",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="marag-recall-"))
    try:
        systems, build_s = recall_systems(work, chunks, corpus, args)
        texts = [q.question for q in questions]
        ks = (2, 5, 10)
        print(f"\n## Recall on {args.dataset} ({len(questions)} questions; indexes built in {build_s:.0f}s)\n")
        print("| retriever | " + " | ".join(f"R@{k}" for k in ks) + " |")
        print("|---|" + "---:|" * len(ks))
        for name, r in systems.items():
            results = r.search_batch(texts, k=max(ks) * 3)  # chunks; deduplicated to documents below
            ranked = [doc_ranking(hits) for hits in results]
            vals = [np.mean([recall_at(d, q.gold_doc_ids, k) for d, q in zip(ranked, questions)]) for k in ks]
            print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in vals) + " |", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpora", default="pools,pools-dup,tiled,tiled-dup",
                    help="comma-separated: pools, pools-dup, tiled, tiled-dup, synthetic")
    ap.add_argument("--passages", type=int, default=200_000, help="size of the tiled and synthetic corpora")
    ap.add_argument("--single-queries", type=int, default=700,
                    help="queries timed one per call (all 700 by default: rounds of 200 took ~10 ms on the pools, "
                         "and the ratio moved by up to 0.15 between runs)")
    ap.add_argument("--rounds", "--repeats", dest="rounds", type=int, default=5,
                    help="timed rounds per measurement (reported amortized over all rounds, and the best round)")
    ap.add_argument("--no-freeze", action="store_true",
                    help="do not freeze the objects loaded before timing (gc.freeze); full collections then walk them")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--embedder", default="auto",
                    help="dense embedder of the tiled corpora (auto: wordllama if installed, else hashing; "
                         "minilm in --dataset mode); the pools always use minilm")
    ap.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "marag-bench-vectors"),
                    help="where encoded vectors are kept between runs ('' = nowhere)")
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime threads for MiniLM")
    ap.add_argument("--bm25-threads", type=int, default=2, help="also time BM25 batches split over this many threads")
    ap.add_argument("--hnsw-m", type=int, default=32)
    ap.add_argument("--ef-construction", type=int, default=100)
    ap.add_argument("--ef-search", type=int, default=None, help="default: IndexConfig's")
    ap.add_argument("--hnsw-ef", default="", help="efSearch values for the HNSW recall table, e.g. 16,32,64,128")
    ap.add_argument("--dataset", choices=sorted(DATASETS), help="measure recall on a shared dataset instead")
    ap.add_argument("--long-chunks", default="truncate,windows",
                    help="dense treatments of long chunks to compare in --dataset mode")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--limit", type=int, default=0, help="questions to use in --dataset mode (0: all)")
    ap.add_argument("--chunk-size", type=int, default=512)
    ap.add_argument("--chunk-overlap", type=int, default=80)
    ap.add_argument("--progress", action="store_true", help="show progress bars")
    args = ap.parse_args(argv)
    if args.ef_search is None:
        from marag.index.config import IndexConfig

        args.ef_search = IndexConfig().hnsw_ef_search
    if args.dataset:
        recall(args)
    else:
        speed(args)


if __name__ == "__main__":
    sys.exit(main())
