"""The shared retriever base: hits and trace records built without re-validation."""

from __future__ import annotations

import copy
import pickle

import pytest
from pydantic import BaseModel, ValidationError

from marag.corpus.models import Chunk
from marag.index.base import Hit
from marag.index.traced import hit_of, trusted_constructor
from marag.trace import SearchCall


def test_fast_hits_are_ordinary_checked_hits():
    chunk = Chunk(id="doc#3", doc_id="doc", text="some text", title="Title", metadata={"x": 1})
    fast = hit_of(chunk, 2.5)
    slow = Hit(doc_id="doc", chunk_id="doc#3", score=2.5, text="some text", title="Title")
    assert type(fast) is Hit and fast == slow and not (fast != slow)
    assert fast.model_dump() == slow.model_dump() == {"doc_id": "doc", "chunk_id": "doc#3", "score": 2.5, "text": "some text", "title": "Title"}
    assert fast.model_dump_json() == slow.model_dump_json() and Hit.model_validate(fast.model_dump()) == fast
    assert repr(fast) == "Hit(doc_id='doc', chunk_id='doc#3', score=2.5, text='some text', title='Title')"
    assert pickle.loads(pickle.dumps(fast)) == slow and copy.deepcopy(fast) == slow and copy.copy(fast) == slow
    assert fast.model_copy(update={"score": 1.0}).score == 1.0 and fast.score == 2.5
    fast.score = 3.0  # assignment works and touches only this hit
    assert fast.score == 3.0 and hit_of(chunk, 2.5).score == 2.5


def test_a_hit_checks_what_it_is_given():
    h = Hit(doc_id="d", chunk_id="d#0", score=3, text="t")
    assert h.score == 3.0 and type(h.score) is float and h.title == ""  # ints become floats, as pydantic did
    import numpy as np

    assert type(Hit(doc_id="d", chunk_id="d#0", score=np.float32(0.5), text="t").score) is float
    with pytest.raises(TypeError, match="Hit.doc_id must be a string"):
        Hit(doc_id=7, chunk_id="d#0", score=1.0, text="t")
    with pytest.raises(TypeError, match="Hit.score must be a number"):
        Hit(doc_id="d", chunk_id="d#0", score="high", text="t")
    with pytest.raises(TypeError):
        Hit(doc_id="d", chunk_id="d#0", text="t")  # score is required
    with pytest.raises(ValueError, match="unknown Hit field"):
        Hit.model_validate({"doc_id": "d", "chunk_id": "d#0", "score": 1.0, "text": "t", "rank": 1})
    with pytest.raises(ValueError, match="unknown Hit field"):
        h.model_copy(update={"rank": 1})
    with pytest.raises(TypeError):
        hash(h)  # mutable, like the pydantic model it replaced
    assert h != h.model_copy(update={"score": 2.0}) and h != "d#0"


def test_hits_validate_and_serialize_as_fields_of_pydantic_models():
    class Answer(BaseModel):
        sources: list[Hit]
        best: Hit | None = None

    h = Hit(doc_id="d", chunk_id="d#0", score=1.5, text="t", title="T")
    a = Answer(sources=[h, {"doc_id": "e", "chunk_id": "e#0", "score": 1, "text": "u"}])
    assert a.sources[0] is h and a.sources[1] == Hit(doc_id="e", chunk_id="e#0", score=1.0, text="u")
    assert a.model_dump()["sources"][0] == h.model_dump()
    assert Answer.model_validate_json(a.model_dump_json()) == a
    with pytest.raises(ValidationError):
        Answer(sources=[{"doc_id": "d", "chunk_id": "d#0", "text": "no score"}])
    with pytest.raises(ValidationError):
        Answer(sources=["d#0"])
    schema = Answer.model_json_schema()
    assert "score" in str(schema) and "doc_id" in str(schema)


def test_trusted_constructor_falls_back_to_validation_when_the_probe_disagrees():
    class Strict(BaseModel):
        n: int
        label: str = "x"

    # The probe leaves a field out, so the fast path could not be trusted: validate.
    make = trusted_constructor(Strict, {"n": 1})
    with pytest.raises(ValidationError):
        make({"n": "not a number"})
    full = trusted_constructor(Strict, {"n": 1, "label": "y"})
    assert full({"n": 2, "label": "z"}) == Strict(n=2, label="z")


def test_search_records_built_fast_equal_validated_ones():
    make = trusted_constructor(
        SearchCall,
        {"retriever": "r", "query": "q", "k": 1, "offset": 0, "hits": [], "latency_s": 0.0},
    )
    values = {
        "retriever": "bm25",
        "query": "who",
        "k": 2,
        "offset": 1,
        "hits": [{"doc_id": "d", "chunk_id": "d#0", "score": 1.5}],
        "latency_s": 0.25,
    }
    assert make(dict(values)) == SearchCall(**values)
    assert make(dict(values)).model_dump_json() == SearchCall(**values).model_dump_json()


def test_hits_of_a_batch_are_independent_objects():
    from marag.index.bm25 import BM25Retriever

    chunks = [Chunk(id=f"d{i}#0", doc_id=f"d{i}", text=f"apple pie number {i}", title="") for i in range(4)]
    pages = BM25Retriever.from_chunks(chunks).search_batch(["apple pie", "apple"], k=3)
    a, b = pages[0][0], pages[1][0]
    assert a is not b and a == Hit(**a.model_dump())
    a.score = -1.0  # assignment touches this hit only
    assert b.score > 0 and all(h.score > 0 for page in pages for h in page if h is not a)
    assert b.model_copy(update={"score": 9.0}).score == 9.0 and b.score != 9.0
    assert [len(p) for p in pages] == [3, 3] and [h.chunk_id for h in pages[0]] == [h.chunk_id for h in pages[1]]


def _apple_batch():
    from marag.index.bm25 import BM25Retriever

    chunks = [Chunk(id=f"d{i}#0", doc_id=f"d{i}", text=f"apple pie number {i}" + " apple" * i, title="") for i in range(6)]
    retriever = BM25Retriever.from_chunks(chunks)
    queries = ["apple pie", "number 3", "pie", "nothing like it"]
    return retriever, queries


def test_batch_pages_are_made_when_read_and_behave_as_the_lists_they_stand_for():
    from marag.index.traced import LazyHits

    retriever, queries = _apple_batch()
    pages = retriever.search_batch(queries, k=3)
    eager = [retriever.search(q, k=3) for q in queries]  # one query: plain lists
    assert all(type(p) is list for p in eager)
    assert [type(p) for p in pages] == [LazyHits] * 4
    # len (and truth) without making hits; the whole batch's hits at the first read
    assert [len(p) for p in pages] == [len(p) for p in eager] == [3, 3, 3, 0] and not pages[3]
    batch = pages[0]._flat
    assert batch.pages is None and all(p._flat is batch for p in pages)
    first = pages[1][0]
    assert [len(p) for p in batch.pages] == [3, 3, 3, 0] and pages[0]._hits is None and pages[3] == []
    assert first == eager[1][0] and pages[1][0] is first  # made once, kept
    for page, plain in zip(pages, eager):
        assert page == plain and plain == page and not (page != plain)
        assert list(page) == plain and page[:2] == plain[:2] and type(page[:2]) is list
        assert page + plain == plain + plain == plain + page and type(plain + page) is list
        assert list(reversed(page)) == plain[::-1] and all(h in page for h in plain)
        assert repr(page) == repr(plain) and page.copy() == plain and page.copy() is not page
        assert page.index(plain[0]) == 0 if plain else True
        assert pickle.loads(pickle.dumps(page)) == plain and type(pickle.loads(pickle.dumps(page))) is list
        assert copy.deepcopy(page) == plain
    assert pages[0] != pages[2] and pages == [retriever.search(q, k=3) for q in queries]
    with pytest.raises(TypeError):
        hash(pages[0])
    with pytest.raises(TypeError):
        pages[0] + "text"  # type: ignore[operator]


def test_batch_pages_validate_into_pydantic_list_fields():
    from marag.trace import SearchCall  # noqa: F401 - any model with a list[Hit] field will do

    class Answer(BaseModel):
        sources: list[Hit]

    retriever, queries = _apple_batch()
    page = retriever.search_batch(queries, k=2)[0]
    answer = Answer(sources=page)
    assert type(answer.sources) is list and answer.sources == list(page)
    assert Answer.model_validate_json(answer.model_dump_json()) == answer


def test_a_traced_batch_makes_its_hits_at_once():
    from marag.trace import Trace, activate

    retriever, queries = _apple_batch()
    trace = Trace(question="q")
    with activate(trace):
        pages = retriever.search_batch(queries, k=2)
    assert all(type(p) is list for p in pages)  # the trace read them all already
    assert [[h["doc_id"] for h in s.hits] for s in trace.searches()] == [[h.doc_id for h in p] for p in pages]


def test_pages_of_one_batch_read_from_several_threads_share_their_hits():
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    retriever, queries = _apple_batch()
    made, make = [], retriever._hits_at

    def slow(positions, scores):  # several threads arrive while the first is making hits
        made.append(threading.get_ident())
        time.sleep(0.05)
        return make(positions, scores)

    retriever._hits_at = slow
    pages = retriever.search_batch(queries * 4, k=3)
    with ThreadPoolExecutor(4) as pool:
        firsts = list(pool.map(lambda p: p[0] if p else None, pages[:4]))
    assert len(made) == 1  # the batch's hits were made once
    assert all(f is p[0] for f, p in zip(firsts, pages) if p) and pages[4:8] == pages[:4]


def test_a_single_search_checks_its_arguments_and_equals_its_batch_of_one():
    from marag.trace import Trace, activate

    retriever, queries = _apple_batch()
    for q in queries:
        for offset in (0, 2):
            single = retriever.search(q, k=3, offset=offset)
            assert type(single) is list and single == list(retriever.search_batch([q], k=3, offset=offset)[0])
    with pytest.raises(TypeError, match="query must be a string"):
        retriever.search(["apple"], k=3)
    with pytest.raises(ValueError, match="k must be an integer"):
        retriever.search("apple", k=0)
    with pytest.raises(ValueError, match="offset must be an integer"):
        retriever.search("apple", offset=-1)
    # traced: the single search is recorded, with its hits
    trace = Trace()
    with activate(trace):
        hits = retriever.search("apple pie", k=2)
    (call,) = trace.searches()
    assert call.query == "apple pie" and [h["chunk_id"] for h in call.hits] == [h.chunk_id for h in hits]
