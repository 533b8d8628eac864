"""What the retrieval benchmarks share: the shared datasets' passages and questions,
cached vectors, timed rounds, HNSW recall against exact search, and the command-line
options (each script takes the ones it uses; benchmarks/retrieval.py takes them all)."""

from __future__ import annotations

import argparse
import gc
import hashlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from marag.corpus.models import Chunk
from marag.index.embed import get_embedder

DATASETS = {
    "hotpotqa": "hotpotqa_train100",
    "musique": "musique_train100",
    "nq": "nq_open_oracle",
    "datamorgana": "datamorgana",
}
K = 10


# -- data ----------------------------------------------------------------------------------------
def load_pool(name: str, data_dir: str | None) -> tuple[list[Chunk], list[str]]:
    """A shared dataset's passages (marag's loader and chunker) and its questions."""
    from marag.config import data_dir as find_data
    from marag.corpus import chunk_documents, load_corpus

    corpus = load_corpus(find_data(data_dir) / DATASETS[name])
    return list(chunk_documents(corpus.documents)), [q.question for q in corpus.questions]


def renamed(chunks: list[Chunk], tag: str) -> list[Chunk]:
    return [Chunk(id=f"{c.id}@{tag}", doc_id=c.doc_id, title=c.title, text=c.text) for c in chunks]


# -- vectors ---------------------------------------------------------------------------------------
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


def cache_dir(args: argparse.Namespace) -> Path | None:
    return Path(args.cache_dir) if args.cache_dir else None


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


def tied_recall(scores, kth: np.ndarray) -> np.ndarray:
    """Per query, the share of the k returned hits that score at least the exact k-th
    best (with a little float slack)."""
    return np.array([np.sum(np.asarray(s[:K]) >= t - 1e-5) / K for s, t in zip(scores, kth)])


# -- timing ----------------------------------------------------------------------------------------
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


# -- command line ------------------------------------------------------------------------------------
# (the measurements that use an option, its flags, argparse's keywords), in the order --help lists them
OPTIONS: list[tuple[set[str], tuple[str, ...], dict]] = [
    ({"speed"}, ("--corpora",), dict(default="pools,pools-dup,tiled,tiled-dup",
                                     help="comma-separated: pools, pools-dup, tiled, tiled-dup, synthetic")),
    ({"speed"}, ("--passages",), dict(type=int, default=200_000, help="size of the tiled and synthetic corpora")),
    ({"speed"}, ("--single-queries",), dict(
        type=int, default=700,
        help="queries timed one per call (all 700 by default: rounds of 200 took ~10 ms on the pools, "
             "and the ratio moved by up to 0.15 between runs)")),
    ({"speed", "sweep"}, ("--rounds", "--repeats"), dict(
        dest="rounds", type=int, default=5,
        help="timed rounds per measurement (reported amortized over all rounds, and the best round)")),
    ({"speed"}, ("--no-freeze",), dict(
        action="store_true",
        help="do not freeze the objects loaded before timing (gc.freeze); full collections then walk them")),
    ({"speed"}, ("--seed",), dict(type=int, default=13)),
    ({"speed", "dataset"}, ("--embedder",), dict(
        default="auto",
        help="dense embedder of the tiled corpora (auto: wordllama if installed, else hashing; "
             "minilm in --dataset mode); the pools always use minilm")),
    ({"speed", "sweep"}, ("--cache-dir",), dict(
        default=str(Path(tempfile.gettempdir()) / "marag-bench-vectors"),
        help="where encoded vectors are kept between runs ('' = nowhere)")),
    ({"dataset"}, ("--threads",), dict(type=int, default=2, help="onnxruntime threads for MiniLM")),
    ({"bm25"}, ("--bm25-threads",), dict(type=int, default=2,
                                         help="also time BM25 batches split over this many threads")),
    ({"hnsw", "sweep"}, ("--hnsw-m",), dict(type=int, default=32)),
    ({"hnsw", "sweep"}, ("--ef-construction",), dict(type=int, default=100)),
    ({"hnsw"}, ("--ef-search",), dict(type=int, default=None, help="default: IndexConfig's")),
    ({"sweep"}, ("--hnsw-ef",), dict(default="", help="efSearch values for the HNSW recall table, e.g. 16,32,64,128")),
    ({"dataset"}, ("--dataset",), dict(choices=sorted(DATASETS), help="measure recall on a shared dataset instead")),
    ({"dataset"}, ("--long-chunks",), dict(default="truncate,windows",
                                           help="dense treatments of long chunks to compare in --dataset mode")),
    ({"all"}, ("--data-dir",), dict(default=None)),
    ({"dataset"}, ("--limit",), dict(type=int, default=0, help="questions to use in --dataset mode (0: all)")),
    ({"dataset"}, ("--chunk-size",), dict(type=int, default=512)),
    ({"dataset"}, ("--chunk-overlap",), dict(type=int, default=80)),
    ({"all"}, ("--progress",), dict(action="store_true", help="show progress bars")),
]


def parser(doc: str, *uses: str, **defaults) -> argparse.ArgumentParser:
    """A parser with the options of the measurements `uses` (speed, bm25, hnsw, sweep,
    dataset), described by the first paragraph of `doc`; `defaults` override defaults."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    for used_by, flags, keywords in OPTIONS:
        if used_by & {"all", *uses}:
            ap.add_argument(*flags, **keywords)
    ap.set_defaults(**defaults)
    return ap


def parse(ap: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    args = ap.parse_args(argv)
    if getattr(args, "ef_search", 0) is None:
        from marag.index.config import IndexConfig

        args.ef_search = IndexConfig().hnsw_ef_search
    return args
