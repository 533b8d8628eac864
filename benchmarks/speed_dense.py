"""Dense exact search speed: DenseRetriever against the engine it wraps, numpy (a matrix
product per block of queries, argpartition, a sort of the top), on the same vectors, as
queries/s and ratios (marag / raw; 1.0 = no cost); faiss IndexFlatIP's speed on the same
vectors is noted beside it. Query vectors are computed beforehand and handed to both
sides (marag through a lookup embedder): the embedding model's time is not the
wrapper's. Corpora, rounds and the table: benchmarks/_speed.py.

    nice -n 10 python benchmarks/speed_dense.py --corpora pools --rounds 2
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
from _common import K, parse, parser, timed_rounds
from _speed import Bench, Row, measure, run


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


def raw_exact(bench: Bench) -> RawExact:
    """numpy search over every chunk's vector, made once for every measurement that times it."""
    return bench.once("raw exact", lambda: RawExact(bench.vectors, bench.exact.query_block))


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


def rows(bench: Bench) -> list[Row]:
    exact, raw, qvecs, args = bench.exact, raw_exact(bench), bench.qvecs, bench.args
    note = (
        f"{bench.corpus.embedder} {bench.vectors.shape[1]}d; marag holds {len(bench.unique_vectors):,} distinct vectors, "
        f"raw all {len(bench.vectors):,}; query encoding excluded"
    ) + faiss_flat_note(bench.vectors, qvecs, args.rounds, min(len(bench.corpus.queries), args.single_queries))
    return [measure(bench, "dense exact", exact, raw.name, lambda s: raw.search(qvecs[s], K), note)]


def main(argv: list[str] | None = None) -> None:
    run(parse(parser(__doc__, "speed"), argv), [rows])


if __name__ == "__main__":
    sys.exit(main())
