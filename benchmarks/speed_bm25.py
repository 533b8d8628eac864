"""BM25 speed: `open_index(dir).retriever("bm25")` after `build_index` (the public path)
against raw bm25s (numba backend, Lucene BM25, same k1/b, bm25s's own stemmed
tokenizer), on the same texts, as queries/s and ratios (marag / raw; 1.0 = no cost),
one query per call and all in one call; `--bm25-threads` adds the batches split over
threads. The notes give the index's build time and the share of postings pruning read.
Corpora, rounds and the table: benchmarks/_speed.py.

    nice -n 10 python benchmarks/speed_bm25.py --corpora pools --rounds 2
"""

from __future__ import annotations

import sys

from _common import K, parse, parser
from _speed import Bench, Row, measure, run

from marag.index.bm25 import BM25Retriever
from marag.index.traced import index_text


class RawBM25:
    name = "bm25s (numba, own tokenizer)"

    def __init__(self, chunks, k1: float, b: float):
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


def raw_bm25(bench: Bench) -> RawBM25:
    """The corpus's bm25s index, built once for every measurement that times it."""
    return bench.once("raw bm25", lambda: RawBM25(bench.index.chunks, bench.bm25.k1, bench.bm25.b))


def rows(bench: Bench) -> list[Row]:
    bm25, raw, queries = bench.bm25, raw_bm25(bench), bench.corpus.queries
    postings = bm25.rank_counted(queries, K)[1].sum(axis=0)
    out = [
        measure(bench, "bm25", bm25, raw.name, lambda s: raw.search(queries[s], K),
                f"built via build_index in {bench.build_s:.0f}s; pruning read {postings[0] / postings[1]:.0%} of the postings")
    ]
    if bench.args.bm25_threads > 1:
        n = bench.args.bm25_threads
        threaded = BM25Retriever(bench.index.chunks, bm25.model, n_threads=n)
        out.append(
            measure(bench, f"bm25, {n} threads", threaded, f"{raw.name}, {n} threads",
                    lambda s: raw.search(queries[s], K, threads=n), "threads split a batch; single queries run as above")
        )
    return out


def main(argv: list[str] | None = None) -> None:
    run(parse(parser(__doc__, "speed", "bm25"), argv), [rows])


if __name__ == "__main__":
    sys.exit(main())
