"""The harness of the speed benchmarks (speed_bm25, speed_dense, speed_hnsw, speed_hybrid):
what one corpus's measurements share (its BM25 index, its vectors, exact search), timing
a marag retriever against the raw engine it wraps on the same work, and the table.

Each side is timed both amortized over all `--rounds` (total time, every pause such as a
garbage collection included: what a user pays) and for the best round alone, with the
full (generation-2) garbage collections that started inside each side's rounds. Objects
loaded before timing are frozen (`gc.freeze`, as `marag eval` does; `--no-freeze` to see
the difference): otherwise a collection that the raw engine's allocations set off would
walk marag's loaded index on the raw engine's time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable

import numpy as np
from _common import K, LookupEmbedder, cache_dir, cached_vectors, timed_rounds
from _corpora import Corpus, corpora

from marag.collector import freeze_long_lived
from marag.index.dense import DenseRetriever, Layout


# -- what one corpus's measurements share, made when first asked for --------------------------------
@dataclass
class Bench:
    corpus: Corpus
    args: argparse.Namespace
    work: Path
    cache: Path | None
    build_s: float = 0.0
    _made: dict = field(default_factory=dict)
    _index: object = None

    def once(self, name: str, make: Callable[[], object]):
        """What `make` returns, made on the first call for `name` (e.g. a raw engine
        that two measurements time)."""
        if name not in self._made:
            self._made[name] = make()
        return self._made[name]

    @cached_property
    def bm25(self):
        """marag's BM25 over the corpus: `build_index` (the public path), then `open_index`;
        `build_s` is the time both took."""
        from marag.index import IndexConfig, build_index, open_index

        t0 = time.perf_counter()
        build_index(self.corpus.chunks, self.work / "idx", IndexConfig(retrievers=["bm25"]), overwrite=True, progress=False)
        self._index = open_index(self.work / "idx")
        bm25 = self._index.retriever("bm25")
        self.build_s = time.perf_counter() - t0
        return bm25

    @property
    def index(self):
        """The corpus's opened index (the BM25 one, built on first use)."""
        self.bm25  # noqa: B018
        return self._index

    @cached_property
    def unique_vectors(self) -> np.ndarray:
        c = self.corpus
        return cached_vectors(c.embedder, c.unique_texts, self.cache, progress=self.args.progress)[0]

    @cached_property
    def vectors(self) -> np.ndarray:
        """What a raw engine indexes: one vector per chunk."""
        return np.ascontiguousarray(self.unique_vectors[self.corpus.which])

    @cached_property
    def qvecs(self) -> np.ndarray:
        c = self.corpus
        return cached_vectors(c.embedder, c.queries, self.cache, progress=self.args.progress)[0]

    @cached_property
    def exact(self) -> DenseRetriever:
        """marag's exact search, storing each distinct text's vector once (see marag.index.dense)."""
        lookup = LookupEmbedder(self.corpus.queries, self.qvecs)
        layout = Layout(np.arange(len(self.unique_vectors) + 1), self.corpus.which)
        return DenseRetriever(self.index.chunks, self.unique_vectors, lookup, layout=layout)


# -- marag against the raw engine ---------------------------------------------------------------------
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


def measure(bench: Bench, name: str, retriever, raw_name: str, raw: Callable[[slice], object], note: str = "") -> Row:
    """q/s of a marag retriever and of the raw engine doing the same work: one query per
    call (the first `--single-queries` queries), then all queries in one call. `raw`
    answers the queries in a slice of corpus.queries."""
    corpus, args = bench.corpus, bench.args
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
    threads = f" (and {args.bm25_threads} in the rows that say so)" if hasattr(args, "bm25_threads") else ""
    print(
        f"\n## Retrieval speed, marag vs the raw engine (k={K}, {args.rounds} rounds, amortized and best round, "
        f"{seconds:.0f}s in all)\n"
    )
    print(
        f"Settings: {machine()}; Python {sys.version.split()[0]}; BM25 threads 1{threads}, BLAS threads {blas}; k={K}; "
        f"{n_queries} queries (HotpotQA and NQ questions); {args.rounds} timed rounds after one untimed warm-up, "
        f"marag and the raw engine taking turns in each round; "
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


def run(args: argparse.Namespace, measurements: list[Callable[[Bench], list[Row]]]) -> None:
    """Each measurement on each corpus in turn, then one table of all their rows."""
    rows: list[Row] = []
    work = Path(tempfile.mkdtemp(prefix="marag-bench-"))
    started = time.perf_counter()
    n_queries = 0
    try:
        for corpus in corpora(args):
            n_queries = len(corpus.queries)
            print(f"\n{corpus.label}: {len(corpus.chunks):,} passages, {n_queries} queries", flush=True)
            bench = Bench(corpus, args, work, cache_dir(args))
            for measurement in measurements:
                rows += measurement(bench)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if rows:
        print_speed_table(rows, n_queries, args, time.perf_counter() - started)
