"""Hybrid search speed: marag's fused search (BM25 + dense exact, reciprocal rank fusion)
against the sum of raw BM25 (bm25s) and raw exact search (numpy), both asked for the
hybrid's depth (it needs that many candidates from each), as queries/s and ratios
(marag / raw; 1.0 = no cost). Corpora, rounds and the table: benchmarks/_speed.py.

    nice -n 10 python benchmarks/speed_hybrid.py --corpora pools --rounds 2
"""

from __future__ import annotations

import sys

from _common import parse, parser
from _speed import Bench, Row, measure, run
from speed_bm25 import raw_bm25
from speed_dense import raw_exact

from marag.index.hybrid import HybridRetriever


def rows(bench: Bench) -> list[Row]:
    hybrid = HybridRetriever({"bm25": bench.bm25, "dense": bench.exact})
    depth, queries, qvecs = hybrid.depth, bench.corpus.queries, bench.qvecs
    bm25, exact = raw_bm25(bench), raw_exact(bench)

    def raw_parts(s: slice):
        return bm25.search(queries[s], depth), exact.search(qvecs[s], depth)

    return [
        measure(bench, "hybrid (bm25 + dense exact)", hybrid, f"sum of both raw engines at k={depth}", raw_parts,
                f"RRF depth {depth}")
    ]


def main(argv: list[str] | None = None) -> None:
    run(parse(parser(__doc__, "speed"), argv), [rows])


if __name__ == "__main__":
    sys.exit(main())
