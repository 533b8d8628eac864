"""No garbage-collector pauses on the hot path (issue 28): a search batch on a loaded
index provokes no full collection, for every built-in retriever kind; the collector's
state is left as found; a long evaluation freezes what it loaded.

The collector is put in a state where a full collection comes after a few hundred
allocations (`full_collection_due`), and each test first checks that plain allocations
do set one off there, so a pass is not an accident of the collector's counters."""

from __future__ import annotations

import asyncio
import gc
import threading
from contextlib import contextmanager

import pytest

from marag.collector import freeze_long_lived, held_collections, thaw
from marag.corpus import chunk_documents, load_corpus
from marag.eval.datasets import load_dataset
from marag.index import IndexConfig, build_index, open_index


@contextmanager
def full_collection_due():
    """Yields the list of generations collected while inside (gc.callbacks). A frozen
    process with a near-empty oldest generation passes CPython's "a quarter of the
    long-lived objects are new" test at once, and thresholds (100, 2, 2) make a full
    collection due after ~1,000 allocations that stay alive."""
    old = gc.get_threshold()
    was_enabled = gc.isenabled()
    gc.enable()
    gc.collect()
    gc.freeze()
    gc.collect()  # the oldest generation is now (nearly) empty: "long-lived" is ~0 objects
    gc.set_threshold(100, 2, 2)
    generations: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            generations.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        yield generations
    finally:
        gc.callbacks.remove(seen)
        gc.set_threshold(*old)
        gc.unfreeze()
        if not was_enabled:
            gc.disable()


def assert_priming_works() -> None:
    with full_collection_due() as generations:
        kept = [{"a": []} for _ in range(20_000)]  # containers that stay alive, as hits do
    assert 2 in generations, "the test setup no longer makes a full collection due"
    del kept


@pytest.fixture(scope="module")
def queries(data_dir) -> list[str]:
    """1,000 real questions: HotpotQA, NQ, MuSiQue, DataMorgana."""
    out: list[str] = []
    for name in ("hotpotqa_train100", "nq_open_oracle", "musique_train100", "datamorgana"):
        out += [q.question for q in load_dataset(name, data_dir).questions]
    assert len(out) >= 1000
    return out[:1000]


@pytest.fixture(scope="module")
def indexes(data_dir, tmp_path_factory):
    """The HotpotQA and NQ pools as one index, exact and HNSW (hashing vectors: no model)."""
    chunks = []
    for name in ("hotpotqa_train100", "nq_open_oracle"):
        chunks += list(chunk_documents(load_corpus(data_dir / name).documents))
    root = tmp_path_factory.mktemp("gc-indexes")
    out = {}
    for ann in ("exact", "hnsw"):
        if ann == "hnsw":
            pytest.importorskip("faiss")
        config = IndexConfig(retrievers=["bm25", "dense"], embedder="hashing", ann=ann)
        build_index(chunks, root / ann, config, progress=False)
        out[ann] = open_index(root / ann)
    return out


@pytest.mark.parametrize(
    "ann,kind", [("exact", "bm25"), ("exact", "dense"), ("hnsw", "dense"), ("exact", "hybrid")]
)
def test_a_batch_of_1000_queries_triggers_no_full_collection(indexes, queries, ann, kind):
    retriever = indexes[ann].retriever(kind)
    unguarded = retriever._search_batch(queries, 10, 0)  # the same work, outside the guard
    retriever.search_batch(queries[:10])  # warm (compiled kernels, loaded parts)
    assert_priming_works()
    with full_collection_due() as generations:
        results = retriever.search_batch(queries, k=10)
        ids = [h.chunk_id for page in results for h in page]  # the hits are made when read
    assert 2 not in generations
    # young collections only, where the collector was held: when the search ends (its
    # pages), and when the first read has made every hit
    assert len(generations) <= 2
    assert len(results) == 1000 and len(ids) == sum(map(len, results)) >= 9000
    assert results == unguarded


def test_paged_and_traced_batches_trigger_no_full_collection(indexes, queries):
    from marag.trace import Trace, activate

    retriever = indexes["exact"].retriever("bm25")
    retriever.search_batch(queries[:10])
    trace = Trace(question="q")
    with full_collection_due() as generations, activate(trace):
        results = retriever.search_batch(queries, k=5, offset=5)
    assert 2 not in generations
    assert len(list(trace.searches())) == 1000 and results == retriever._search_batch(queries, 5, 5)


@pytest.mark.parametrize("ann,kind", [("exact", "bm25"), ("hnsw", "dense")])
def test_single_searches_trigger_no_full_collection(indexes, queries, ann, kind):
    retriever = indexes[ann].retriever(kind)
    if ann == "hnsw":  # a single search takes its hits straight from the graph's answer
        assert retriever._graph_rows_are_chunks()
    retriever.search(queries[0])
    with full_collection_due() as generations:
        results = [retriever.search(q, k=10) for q in queries]
    assert 2 not in generations and len(generations) >= 1  # young ones, at the ends of searches
    assert results == retriever._search_batch(queries, 10, 0)


def test_the_collector_is_left_as_found(indexes, queries):
    retriever = indexes["exact"].retriever("bm25")
    assert gc.isenabled()
    retriever.search_batch(queries[:100])
    assert gc.isenabled()
    gc.disable()  # a caller who switched it off keeps it off
    try:
        retriever.search_batch(queries[:100])
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(ValueError):
        retriever.search_batch(queries[:3], k=0)
    assert gc.isenabled()


def test_held_collections_is_reentrant_and_shared_by_threads():
    held = held_collections()
    with held:
        assert not gc.isenabled()
        with held:
            assert not gc.isenabled()
        assert not gc.isenabled()  # still held by the outer block
    assert gc.isenabled()

    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with held:
            inside.set()
            release.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    inside.wait(5)
    with held:
        pass
    assert not gc.isenabled()  # the other thread still holds it
    release.set()
    t.join()
    assert gc.isenabled()


def test_freeze_long_lived_frees_old_garbage_and_freezes_the_rest():
    class Node:
        pass

    try:
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        freeze_long_lived()
        assert not any(o is a for o in gc.get_objects())  # frozen: no collection walks it
        import weakref

        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is not None  # frozen garbage stays while the run lasts ...
        thaw()
        freeze_long_lived()
        assert gone() is None  # ... and the next run's freeze frees it
    finally:
        thaw()
        assert gc.get_freeze_count() == 0


def test_overlapping_runs_keep_each_others_objects_frozen():
    # marag serve: run B starts while A runs; A ends first and must not thaw B's objects
    try:
        freeze_long_lived()  # A
        freeze_long_lived()  # B
        thaw()  # A ends
        assert gc.get_freeze_count() > 0
        thaw()  # B ends
        assert gc.get_freeze_count() == 0
        thaw()  # one thaw too many does not break the next freeze's pairing
        freeze_long_lived()
        assert gc.get_freeze_count() > 0
    finally:
        thaw()
    assert gc.get_freeze_count() == 0


def test_a_long_evaluation_freezes_what_it_loaded(data_dir, tmp_path):
    from marag.eval.runner import EvalConfig, run_eval
    from marag.llm import ScriptedLLM

    ds = load_dataset("hotpotqa_train100", data_dir)
    first = ds.questions[0]
    walked: list[bool] = []

    def on_result(record, done, total):
        if done == 1:  # is the loaded dataset out of the collector's way while answering?
            walked.append(any(o is first for o in gc.get_objects()))

    cfg = EvalConfig(dataset="hotpotqa_train100", strategies=["vanilla_rag"], limit=3,
                     index=IndexConfig(retrievers=["bm25"]), concurrency=1)
    try:
        asyncio.run(run_eval(cfg, tmp_path / "run", dataset=ds, llm=ScriptedLLM(fn=lambda messages, output: {"answer": "x"}),
                             index_cache=tmp_path / "ix", progress=False, on_result=on_result))
        assert gc.get_freeze_count() == 0  # handed back when the run ended
    finally:
        gc.unfreeze()
    assert walked == [False]


def test_a_failing_search_leaves_the_collector_on(indexes, queries):
    retriever = indexes["exact"].retriever("bm25")

    class Broken(type(retriever)):
        def _search_batch(self, queries, k, offset):
            assert not gc.isenabled()  # held while the batch runs
            raise RuntimeError("engine failed")

    broken = Broken(retriever.chunks, retriever.model)
    with pytest.raises(RuntimeError):
        broken.search_batch(queries[:100])
    assert gc.isenabled()
