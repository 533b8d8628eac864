"""Retrieval speed on a synthetic corpus, and retrieval quality on real benchmark data.

Speed (default): a seeded synthetic corpus (Zipf-distributed pseudo-words, 30-80 words
per passage) and queries drawn from its passages; for BM25, dense (exact and HNSW) and
hybrid it prints build time, size on disk and queries/s, one query at a time and as one
batch.

    nice -n 10 python benchmarks/retrieval.py --passages 200000 --queries 2000

Encoding 200k passages with MiniLM takes over an hour on two cores, so the dense rows
use `--embedder` (default: wordllama when installed, else the hashing embedder) and
MiniLM's encoding rate is measured on `--minilm-sample` passages and reported apart.

Quality: `--dataset hotpotqa|musique|nq` indexes that shared dataset's corpus with
marag's own loader and chunker and prints document-level recall@2/5/10 of BM25, dense,
and hybrid (equal weights, and BM25 weighted 2:1).

    nice -n 10 python benchmarks/retrieval.py --dataset hotpotqa
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from marag.corpus.models import Chunk
from marag.index.bm25 import BM25Retriever
from marag.index.dense import DenseRetriever, build_hnsw
from marag.index.embed import get_embedder
from marag.index.hybrid import HybridRetriever
from marag.index.traced import index_text

DATASETS = {"hotpotqa": "hotpotqa_train100", "musique": "musique_train100", "nq": "nq_open_oracle"}


# -- synthetic corpus -----------------------------------------------------------------------
def vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    """Pronounceable pseudo-words (consonant-vowel syllables), unique, in random order."""
    cons, vows = list("bcdfghjklmnprstvwz"), list("aeiou")
    words: set[str] = set()
    while len(words) < size:
        n = int(rng.integers(1, 5))
        words.add("".join(rng.choice(cons) + rng.choice(vows) for _ in range(n)) + str(rng.choice(cons)))
    out = sorted(words)
    rng.shuffle(out)
    return out


def synthetic(
    passages: int, queries: int, seed: int, vocab_size: int = 50_000
) -> tuple[list[Chunk], list[str]]:
    rng = np.random.default_rng(seed)
    vocab = np.array(vocabulary(vocab_size, rng))
    p = 1.0 / np.arange(1, vocab_size + 1) ** 1.07  # Zipf-like word frequencies
    p /= p.sum()
    lengths = rng.integers(30, 81, size=passages)
    words = vocab[rng.choice(vocab_size, size=int(lengths.sum()), p=p)]
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    chunks = [
        Chunk(id=f"p{i}#0", doc_id=f"p{i}", text=" ".join(words[bounds[i] : bounds[i + 1]]))
        for i in range(passages)
    ]
    qs = []
    for _ in range(queries):
        src = words[bounds[(j := int(rng.integers(passages)))] : bounds[j + 1]]
        qs.append(" ".join(rng.choice(src, size=int(rng.integers(3, 7)), replace=False)))
    return chunks, qs


# -- measuring ------------------------------------------------------------------------------
def dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def qps(retriever, queries: list[str], k: int = 10) -> tuple[float, float]:
    retriever.search(queries[0], k=k)  # warm-up: JIT compile, lazy loads
    t0 = time.perf_counter()
    for q in queries:
        retriever.search(q, k=k)
    single = len(queries) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    retriever.search_batch(queries, k=k)
    batch = len(queries) / (time.perf_counter() - t0)
    return single, batch


def pick_embedder(name: str) -> str:
    if name != "auto":
        return name
    return "wordllama" if importlib.util.find_spec("wordllama") else "hashing"


def speed(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    chunks, queries = synthetic(args.passages, args.queries, args.seed)
    print(
        f"synthetic corpus: {len(chunks)} passages, {len(queries)} queries "
        f"(generated in {time.perf_counter() - t0:.1f}s, seed {args.seed})",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="marag-bench-"))
    rows = []
    try:
        t0 = time.perf_counter()
        bm25 = BM25Retriever.from_chunks(chunks)
        bm25_build = time.perf_counter() - t0
        bm25.save(work / "bm25")
        rows.append(("bm25", bm25_build, dir_mb(work / "bm25"), *qps(bm25, queries), "numba, 1 thread"))
        print(rows[-1], flush=True)

        emb_name = pick_embedder(args.embedder)
        embedder = get_embedder(emb_name)
        t0 = time.perf_counter()
        exact = DenseRetriever.from_chunks(chunks, embedder, progress=args.progress)
        embed_s = time.perf_counter() - t0
        exact.save(work / "dense")
        note = f"{emb_name} ({embedder.dim}d), {len(chunks) / embed_s:,.0f} passages/s"
        rows.append(
            (f"dense exact [{emb_name}]", embed_s, dir_mb(work / "dense"), *qps(exact, queries), note)
        )
        print(rows[-1], flush=True)

        if importlib.util.find_spec("faiss"):
            t0 = time.perf_counter()
            graph = build_hnsw(np.asarray(exact.vectors), m=args.hnsw_m, ef_construction=args.ef_construction)
            graph_s = time.perf_counter() - t0
            hnsw = DenseRetriever(
                chunks, exact.vectors, embedder, ann="hnsw", hnsw=graph, ef_search=args.ef_search
            )
            hnsw.save(work / "hnsw")
            exact_top = [{h.chunk_id for h in hits} for hits in exact.search_batch(queries, k=10)]
            hnsw_top = [{h.chunk_id for h in hits} for hits in hnsw.search_batch(queries, k=10)]
            recall = np.mean([len(a & b) / max(len(a), 1) for a, b in zip(exact_top, hnsw_top)])
            rows.append(
                (
                    f"dense hnsw [{emb_name}]",
                    embed_s + graph_s,
                    dir_mb(work / "hnsw"),
                    *qps(hnsw, queries),
                    f"graph {graph_s:.1f}s (M={args.hnsw_m}, efC={args.ef_construction}, efS={args.ef_search}); "
                    f"recall@10 vs exact {recall:.3f}",
                )
            )
            print(rows[-1], flush=True)
        else:
            print("faiss not installed: skipping HNSW (pip install 'marag[faiss]')")

        hybrid = HybridRetriever({"bm25": bm25, "dense": exact})
        rows.append(
            (
                "hybrid (bm25 + dense exact)",
                bm25_build + embed_s,
                dir_mb(work / "bm25") + dir_mb(work / "dense"),
                *qps(hybrid, queries),
                f"RRF k=60, depth {hybrid.depth}",
            )
        )
        print(rows[-1], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    minilm_rate = None
    if args.minilm_sample > 0:
        minilm = get_embedder("minilm", threads=args.threads)
        sample = [index_text(c) for c in chunks[: args.minilm_sample]]
        minilm.embed(sample[:8])  # warm-up
        t0 = time.perf_counter()
        minilm.embed(sample, progress=args.progress)
        minilm_rate = len(sample) / (time.perf_counter() - t0)

    print(f"\n## Retrieval speed: {len(chunks):,} synthetic passages, {len(queries):,} queries, k=10\n")
    print("| retriever | build s | size MB | single q/s | batch q/s | notes |")
    print("|---|---:|---:|---:|---:|---|")
    for name, build_s, mb, single, batch, note in rows:
        print(f"| {name} | {build_s:.1f} | {mb:.1f} | {single:,.0f} | {batch:,.0f} | {note} |")
    if minilm_rate is not None:
        print(
            f"\nMiniLM (int8 ONNX, {args.threads} threads) encodes {minilm_rate:,.1f} passages/s "
            f"on {args.minilm_sample} of these passages: {len(chunks) / minilm_rate / 3600:.1f} h for the whole corpus."
        )


# -- recall on real data ----------------------------------------------------------------------
def recall_at(ranked_docs: list[str], gold: list[str], k: int) -> float:
    return len(set(ranked_docs[:k]) & set(gold)) / len(set(gold))


def doc_ranking(hits) -> list[str]:
    seen: dict[str, None] = {}
    for h in hits:
        seen.setdefault(h.doc_id, None)
    return list(seen)


def recall(args: argparse.Namespace) -> None:
    from marag.config import data_dir
    from marag.corpus import chunk_documents, load_corpus  # the corpus layer's own loader
    from marag.index.store import IndexConfig, build_index, corpus_hash, open_index

    path = data_dir(args.data_dir) / DATASETS[args.dataset]
    corpus = load_corpus(path)
    questions = [q for q in corpus.questions if q.gold_doc_ids][: args.limit or None]
    chunks = chunk_documents(corpus.documents, size=args.chunk_size, overlap=args.chunk_overlap)
    print(
        f"{args.dataset}: {len(corpus.documents)} documents, {len(chunks)} chunks, {len(questions)} questions "
        f"with gold documents",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="marag-recall-"))
    try:
        emb_name = "minilm" if args.embedder == "auto" else args.embedder
        t0 = time.perf_counter()
        build_index(
            list(chunks),
            work / "idx",
            IndexConfig(embedder=emb_name),
            corpus_hash(corpus.documents),
            progress=args.progress,
        )
        build_s = time.perf_counter() - t0
        idx = open_index(
            work / "idx", embedder_options={"threads": args.threads} if emb_name == "minilm" else None
        )
        bm25, dense = idx.retriever("bm25"), idx.retriever("dense")
        systems = {
            "bm25": bm25,
            f"dense ({emb_name})": dense,
            "hybrid 1:1": HybridRetriever({"bm25": bm25, "dense": dense}, rrf_k=60),
            "hybrid bm25 2:1": HybridRetriever(
                {"bm25": bm25, "dense": dense}, weights={"bm25": 2.0, "dense": 1.0}
            ),
        }
        texts = [q.question for q in questions]
        ks = (2, 5, 10)
        print(f"\n## Recall on {args.dataset} ({len(questions)} questions; index built in {build_s:.1f}s)\n")
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
    ap.add_argument("--passages", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument(
        "--embedder",
        default="auto",
        help="dense embedder (auto: wordllama if installed, else hashing; minilm in --dataset mode)",
    )
    ap.add_argument("--minilm-sample", type=int, default=1000, help="passages to time MiniLM on (0: skip)")
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime threads for MiniLM")
    ap.add_argument("--hnsw-m", type=int, default=32)
    ap.add_argument("--ef-construction", type=int, default=100)
    ap.add_argument("--ef-search", type=int, default=64)
    ap.add_argument("--dataset", choices=sorted(DATASETS), help="measure recall on a shared dataset instead")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--limit", type=int, default=0, help="questions to use in --dataset mode (0: all)")
    ap.add_argument("--chunk-size", type=int, default=512)
    ap.add_argument("--chunk-overlap", type=int, default=80)
    ap.add_argument("--progress", action="store_true", help="show progress bars")
    args = ap.parse_args(argv)
    if args.dataset:
        recall(args)
    else:
        speed(args)


if __name__ == "__main__":
    sys.exit(main())
