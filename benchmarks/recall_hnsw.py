"""HNSW recall@10 against exact search for each efSearch value (`--hnsw-ef`), with the
batch queries/s at each, on the MiniLM vectors of all four shared pools (long DataMorgana
chunks as 256-token windows) and all their questions.

    nice -n 10 python benchmarks/recall_hnsw.py --hnsw-ef 16,32,64,128
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from _common import (DATASETS, K, LookupEmbedder, amortized, cache_dir, cached_vectors, load_pool, parse, parser,
                     renamed, tied_recall)

from marag.corpus.models import Chunk
from marag.index.dense import DenseRetriever, Layout, build_hnsw
from marag.index.traced import index_text


def sweep(args: argparse.Namespace) -> None:
    """recall@10 against exact search for each efSearch, on the MiniLM vectors of all
    four shared pools (long DataMorgana chunks as windows), with all their questions."""
    chunks: list[Chunk] = []
    queries: list[str] = []
    for name in DATASETS:
        c, q = load_pool(name, args.data_dir)
        chunks += renamed(c, name)
        queries += q
    cache = cache_dir(args)
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


def main(argv: list[str] | None = None) -> None:
    sweep(parse(parser(__doc__, "sweep", hnsw_ef="16,32,64,128"), argv))


if __name__ == "__main__":
    sys.exit(main())
