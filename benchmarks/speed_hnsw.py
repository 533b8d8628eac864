"""Dense HNSW speed: DenseRetriever(ann="hnsw") against a faiss graph searched directly,
as queries/s and ratios (marag / raw; 1.0 = no cost), with each side's recall@10 against
exact search in the notes. marag stores a passage that occurs several times once; the
raw graph holds every chunk's vector. Needs faiss. Corpora, rounds and the table:
benchmarks/_speed.py.

    nice -n 10 python benchmarks/speed_hnsw.py --corpora pools --rounds 2
"""

from __future__ import annotations

import importlib.util
import sys
import time

import numpy as np
from _common import K, parse, parser, tied_recall
from _speed import Bench, Row, measure, run

from marag.index.dense import DenseRetriever, build_hnsw


class RawHNSW:
    name = "faiss HNSW"

    def __init__(self, graph, ef_search: int):
        import faiss

        self.graph = graph
        self.params = lambda k: faiss.SearchParametersHNSW(efSearch=max(ef_search, k))

    def search(self, q: np.ndarray, k: int):
        return self.graph.search(q, k, params=self.params(k))


def rows(bench: Bench) -> list[Row]:
    """marag's graph (over its distinct vectors) vs a faiss graph over every chunk's vector,
    as a raw faiss user would build it; recall counts a hit whose exact score ties the
    k-th best as found, since copies of a passage are interchangeable."""
    if not importlib.util.find_spec("faiss"):
        return []
    exact, vectors, qvecs, args, queries = bench.exact, bench.vectors, bench.qvecs, bench.args, bench.corpus.queries
    t0 = time.perf_counter()
    graph = build_hnsw(exact.vectors, m=args.hnsw_m, ef_construction=args.ef_construction)
    graph_s = time.perf_counter() - t0
    hnsw = DenseRetriever(
        exact.chunks, exact.vectors, exact.embedder, ann="hnsw", hnsw=graph, ef_search=args.ef_search,
        layout=exact.layout,
    )
    raw_graph = graph if len(vectors) == len(exact.vectors) else build_hnsw(vectors, args.hnsw_m, args.ef_construction)
    raw = RawHNSW(raw_graph, args.ef_search)
    kth = np.array([hits[-1].score for hits in exact.search_batch(queries, k=K)])
    marag_scores = [[h.score for h in hits] for hits in hnsw.search_batch(queries, k=K)]
    raw_scores = raw.search(qvecs, K)[0]
    note = (
        f"M={args.hnsw_m}, efC={args.ef_construction}, efS={args.ef_search}; marag graph {graph_s:.0f}s; "
        f"recall@10 vs exact: marag {tied_recall(marag_scores, kth).mean():.3f}, raw {tied_recall(raw_scores, kth).mean():.3f}"
    )
    return [measure(bench, "dense HNSW", hnsw, raw.name, lambda s: raw.search(qvecs[s], K), note)]


def main(argv: list[str] | None = None) -> None:
    run(parse(parser(__doc__, "speed", "hnsw"), argv), [rows])


if __name__ == "__main__":
    sys.exit(main())
