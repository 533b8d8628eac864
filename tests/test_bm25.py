"""BM25: exact agreement with a from-scratch reference, paging, ties, restriction, I/O."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest

from marag.corpus.models import Chunk
from marag.index.bm25 import BM25Retriever, tokenize
from marag.index.traced import index_text
from marag.trace import Trace, activate

K1, B = 1.5, 0.75


def make_chunks(texts: list[str], titles: list[str] | None = None) -> list[Chunk]:
    titles = titles or [""] * len(texts)
    return [
        Chunk(id=f"d{i}#0", doc_id=f"d{i}", text=t, title=ti) for i, (t, ti) in enumerate(zip(texts, titles))
    ]


def reference_scores(doc_tokens: list[list[str]], query_tokens: list[str], k1: float, b: float) -> np.ndarray:
    """Lucene BM25, written out term by term in float64:
    sum over query tokens t of idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl)),
    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))."""
    n = len(doc_tokens)
    avgdl = sum(len(d) for d in doc_tokens) / n
    df = Counter(t for d in doc_tokens for t in set(d))
    tfs = [Counter(d) for d in doc_tokens]
    scores = np.zeros(n)
    for t in query_tokens:
        if t not in df:
            continue
        idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
        for i, tf in enumerate(tfs):
            f = tf.get(t, 0)
            if f:
                scores[i] += idf * f / (f + k1 * (1 - b + b * len(doc_tokens[i]) / avgdl))
    return scores


@pytest.fixture(scope="module")
def hotpot(data_dir):
    corpus = json.loads((data_dir / "hotpotqa_train100" / "hotpotqa_train_corpus.json").read_text())
    chunks = [
        Chunk(id=f"{title}#0", doc_id=title, title=title, text="".join(sentences).strip())
        for title, sentences in list(corpus.items())[:300]
    ]
    questions = json.loads((data_dir / "hotpotqa_train100" / "hotpotqa_train.json").read_text())
    return chunks, [q["question"] for q in questions[:20]]


@pytest.fixture(scope="module")
def small():
    texts = [
        "The cat sat on the mat near the door.",
        "A dog chased the cat around the garden.",
        "Dogs and cats are common household pets.",
        "The stock market fell sharply on Monday.",
        "Investors worried about the market and rising rates.",
        "Gardening tips: water the plants in the morning.",
        "The garden was full of roses and tulips.",
        "Cats sleep for most of the day.",
    ]
    chunks = make_chunks(texts)
    return chunks, BM25Retriever.from_chunks(chunks)


def test_tokenizer_lowercases_drops_stopwords_and_stems():
    assert tokenize(["The Running Dogs of a City, x 42"]) == [["run", "dog", "citi", "42"]]


@pytest.fixture(params=["plain", "pruned"])
def prune_from(request, monkeypatch) -> int:
    """Run a test with small queries searched plainly (the default) and with every query
    going through dynamic pruning."""
    value = BM25Retriever.prune_from if request.param == "plain" else 0
    monkeypatch.setattr(BM25Retriever, "prune_from", value)
    return value


def test_rankings_match_exact_reference(hotpot, prune_from):
    chunks, queries = hotpot
    retriever = BM25Retriever.from_chunks(chunks, k1=K1, b=B)
    assert (retriever.k1, retriever.b) == (K1, B)
    doc_tokens = tokenize([index_text(c) for c in chunks])
    position = {c.id: i for i, c in enumerate(chunks)}
    compared = 0
    for query, hits in zip(queries, retriever.search_batch(queries, k=10)):
        ref = reference_scores(doc_tokens, tokenize([query])[0], K1, B)
        positions = [position[h.chunk_id] for h in hits]
        # Every score bm25s reports is the reference score of that chunk.
        for pos, h in zip(positions, hits):
            assert h.score == pytest.approx(ref[pos], rel=1e-5, abs=1e-6)
        # Same top-10: reference order is score descending, ties by position; scores are
        # compared rounded so float32 vs float64 noise cannot reorder true ties.
        ref_order = sorted(
            (i for i in range(len(chunks)) if ref[i] > 0), key=lambda i: (-round(ref[i], 4), i)
        )[:10]
        got = sorted(positions, key=lambda i: (-round(ref[i], 4), i))
        assert got == positions, f"hits not in reference order for {query!r}"
        assert positions == ref_order, f"top-10 differs from the reference for {query!r}"
        compared += len(hits)
    assert compared >= 150  # the queries really matched documents


def test_paging_is_consistent_with_a_larger_k(hotpot):
    chunks, queries = hotpot
    retriever = BM25Retriever.from_chunks(chunks)
    for q in queries[:5]:
        full = [h.chunk_id for h in retriever.search(q, k=12)]
        paged = [h.chunk_id for off in range(0, 12, 3) for h in retriever.search(q, k=3, offset=off)]
        assert paged == full and len(full) == 12


def test_ties_are_ordered_by_position_even_across_page_boundaries():
    texts = ["alpha beta"] + ["gamma delta"] * 6 + ["alpha gamma"]
    r = BM25Retriever.from_chunks(make_chunks(texts))
    # Six identical chunks tie; every page must take them in index order.
    ids = [h.chunk_id for h in r.search("delta", k=6)]
    assert ids == [f"d{i}#0" for i in range(1, 7)]
    assert [h.chunk_id for h in r.search("delta", k=2, offset=2)] == ["d3#0", "d4#0"]
    assert [h.chunk_id for h in r.search("delta", k=2, offset=5)] == ["d6#0"]  # only 6 match


def test_chunks_without_query_terms_are_not_hits(small):
    _, r = small
    assert r.search("zebra quantum") == []
    assert r.search("") == []
    hits = r.search("market", k=10)
    assert {h.chunk_id for h in hits} == {"d3#0", "d4#0"}
    assert all(h.score > 0 for h in hits)


def test_restriction_returns_only_the_subset(small):
    chunks, r = small
    sub = r.restrict([0, 1, 7], label="pets")
    assert sub.name == "bm25[pets]" and sub.size == 3
    hits = sub.search("cat", k=10)
    assert [h.chunk_id for h in hits] and {h.chunk_id for h in hits} <= {"d0#0", "d1#0", "d7#0"}
    assert sub.search("market") == []
    # The unrestricted retriever is unchanged, and a boolean mask works the same way.
    assert {h.chunk_id for h in r.search("market")} == {"d3#0", "d4#0"}
    mask = np.zeros(len(chunks), bool)
    mask[4] = True
    assert [h.chunk_id for h in r.restrict(mask).search("market")] == ["d4#0"]


def test_arguments_are_validated(small):
    _, r = small
    with pytest.raises(ValueError, match="k must be"):
        r.search("cat", k=0)
    with pytest.raises(ValueError, match="offset must be"):
        r.search("cat", offset=-1)
    with pytest.raises(TypeError):
        r.search_batch("cat")  # a bare string is not a batch
    with pytest.raises(ValueError, match="positions"):
        r.restrict([99])


def test_save_and_load_give_identical_results(small, tmp_path):
    chunks, r = small
    r.save(tmp_path / "bm25")
    loaded = BM25Retriever.load_dir(tmp_path / "bm25", chunks)
    for q in ["cat garden", "market rates", "plants"]:
        assert [(h.chunk_id, h.score) for h in loaded.search(q, k=5)] == [
            (h.chunk_id, h.score) for h in r.search(q, k=5)
        ]


def test_each_query_is_recorded_in_the_trace(small):
    _, r = small
    trace = Trace()
    with activate(trace):
        r.search_batch(["cat", "market"], k=2, offset=1)
    calls = list(trace.searches())
    assert [c.query for c in calls] == ["cat", "market"]
    assert all(c.retriever == "bm25" and c.k == 2 and c.offset == 1 for c in calls)
    assert [(h["doc_id"], h["chunk_id"]) for h in calls[1].hits] == [("d4", "d4#0")]
    assert calls[1].hits[0]["score"] > 0
    assert calls[0].latency_s >= 0


def reference_top(ref: np.ndarray, k: int, offset: int = 0, allowed=None) -> list[int]:
    """Positions ranked offset..offset+k-1 by the reference: score descending (rounded,
    so float32 vs float64 noise cannot reorder true ties), then position."""
    ok = [i for i in range(len(ref)) if ref[i] > 0 and (allowed is None or allowed[i])]
    return sorted(ok, key=lambda i: (-round(ref[i], 4), i))[offset : offset + k]


def test_duplicated_passages_rank_like_the_reference_on_every_page(hotpot, prune_from):
    # Every passage three times, the copies spread apart (as web corpora repeat pages):
    # nearly every page boundary falls inside a run of equal scores.
    base, queries = hotpot
    base = base[:120]
    chunks = [
        Chunk(id=f"{c.id}@{copy}", doc_id=c.doc_id, title=c.title, text=c.text)
        for copy in range(3)
        for c in base
    ]
    retriever = BM25Retriever.from_chunks(chunks, k1=K1, b=B)
    doc_tokens = tokenize([index_text(c) for c in chunks])
    position = {c.id: i for i, c in enumerate(chunks)}
    tied_pages = 0
    for query in queries:
        ref = reference_scores(doc_tokens, tokenize([query])[0], K1, B)
        for k, offset in ((10, 0), (2, 1), (3, 5), (4, 13)):
            got = [position[h.chunk_id] for h in retriever.search(query, k=k, offset=offset)]
            assert got == reference_top(ref, k, offset), (query, k, offset)
            tied_pages += len(got) > 0 and round(ref[got[-1]], 4) in {round(ref[i], 4) for i in got[:-1]}
    assert tied_pages >= 20  # the ties really did cross page boundaries
    # The batch path gives the same pages as one query at a time.
    batch = retriever.search_batch(queries, k=3, offset=5)
    assert [[h.chunk_id for h in hits] for hits in batch] == [
        [h.chunk_id for h in retriever.search(q, k=3, offset=5)] for q in queries
    ]


def test_restricted_rankings_match_the_reference(hotpot, prune_from):
    chunks, queries = hotpot
    retriever = BM25Retriever.from_chunks(chunks, k1=K1, b=B)
    allowed = np.zeros(len(chunks), bool)
    allowed[::3] = True
    sub = retriever.restrict(allowed)
    doc_tokens = tokenize([index_text(c) for c in chunks])
    position = {c.id: i for i, c in enumerate(chunks)}
    for query in queries:
        ref = reference_scores(doc_tokens, tokenize([query])[0], K1, B)
        got = [position[h.chunk_id] for h in sub.search(query, k=8, offset=1)]
        assert got == reference_top(ref, 8, 1, allowed)


def test_threaded_batches_equal_one_thread(hotpot):
    chunks, queries = hotpot
    one = BM25Retriever.from_chunks(chunks)
    two = BM25Retriever(chunks, one.model, n_threads=2)
    many = queries * 8  # enough queries to be split across threads
    assert [[(h.chunk_id, h.score) for h in hits] for hits in two.search_batch(many, k=5)] == [
        [(h.chunk_id, h.score) for h in hits] for hits in one.search_batch(many, k=5)
    ]
    # slices of uneven size, each made into hits while the threads rank the next ones
    assert two.search_batch(many[:151], k=5, offset=3) == one.search_batch(many[:151], k=5, offset=3)
    assert all(np.array_equal(a, b) for a, b in zip(two._rank(many, 7)[:3], one._rank(many, 7)[:3]))


def test_a_step_outside_any_trace_still_collects_its_searches(small):
    from marag.trace import step

    _, r = small
    with step("searcher") as s:
        hits = r.search("market", k=1)
    assert [(c.query, c.hits[0]["chunk_id"]) for c in s.searches] == [("market", hits[0].chunk_id)]


def test_scores_are_bm25s_scores_bit_for_bit(hotpot, prune_from):
    # Pruning reads terms in another order than bm25s; the hits it keeps must still carry
    # exactly the scores bm25s itself computes (float32, query order).
    chunks, queries = hotpot
    retriever = BM25Retriever.from_chunks(chunks)
    position = {c.id: i for i, c in enumerate(chunks)}
    for query, hits in zip(queries, retriever.search_batch(queries, k=10)):
        ids = retriever.model.get_tokens_ids(tokenize([query])[0])
        raw_docs, raw_scores = retriever.model.retrieve([ids], k=10, show_progress=False)
        raw = sorted(zip(raw_scores[0].tolist(), raw_docs[0].tolist()), key=lambda sd: (-sd[0], sd[1]))
        raw = [(s, d) for s, d in raw if s > 0]
        assert [(h.score, position[h.chunk_id]) for h in hits] == raw


def pruning_corpus() -> list[Chunk]:
    """Every chunk holds the common words; a few also hold rarer ones, at different
    lengths, so scores spread and some tie (copies)."""
    rng = np.random.default_rng(7)
    common = ["river", "water", "bridge", "city", "north"]
    rare = ["zephyr", "quartz", "obsidian", "marmot"]
    texts = []
    for i in range(400):
        words = list(rng.choice(common, size=int(rng.integers(3, 12))))
        if i % 7 == 0:
            words += list(rng.choice(rare, size=int(rng.integers(1, 3))))
        texts.append(" ".join(words))
    texts += texts[:40]  # exact copies at later positions
    return make_chunks(texts)


@pytest.mark.parametrize("k", [1, 3, 10, 40])
def test_pruned_search_equals_the_reference_and_skips_postings(k, monkeypatch):
    monkeypatch.setattr(BM25Retriever, "prune_from", 0)  # these queries are small; prune anyway
    chunks = pruning_corpus()
    retriever = BM25Retriever.from_chunks(chunks, k1=K1, b=B)
    doc_tokens = tokenize([index_text(c) for c in chunks])
    queries = [
        "zephyr river water",  # one rare term decides; the common ones only reorder
        "quartz obsidian bridge city north",
        "river water bridge",  # only common terms: nothing to prune
        "marmot marmot river",  # a repeated term counts twice, as in bm25s
    ]
    ranked, work = retriever.rank_counted(queries, k)
    position = {c.id: i for i, c in enumerate(chunks)}
    for query, hits in zip(queries, retriever.search_batch(queries, k=k)):
        ref = reference_scores(doc_tokens, tokenize([query])[0], K1, B)
        assert [position[h.chunk_id] for h in hits] == reference_top(ref, k), query
    read, total = work[:, 0], work[:, 1]
    assert (read <= total).all()
    if k <= 10:  # fewer chunks hold the rare terms than 40: then nothing can be skipped
        assert read[0] < total[0] and read[1] < total[1]


def test_remembered_query_words_give_the_same_rankings_after_the_memory_overflows(hotpot):
    """Query words are analysed once and remembered per index; a small bound forces the
    memory to start over mid-batch, which must not change any ranking."""
    chunks, queries = hotpot
    fresh = BM25Retriever.from_chunks(chunks, k1=K1, b=B)
    expected = fresh.search_batch(queries, k=10)
    tiny = BM25Retriever(chunks, fresh.model)
    tiny.word_cache_size = 12
    # Stop words, repeats, words the corpus lacks and mixed case, then the real queries.
    odd = ["the THE the of", "Zzyzx qwertyuiop", "Film film FILMS"]
    for _ in range(2):  # the second time, every word is remembered (or the memory restarted)
        got = tiny.search_batch(odd + queries, k=10)
        assert got[3:] == expected
        assert got[:3] == fresh.search_batch(odd, k=10)
        assert len(tiny._word_ids) <= max(12, len({w for q in odd + queries for w in q.lower().split()}) * 2)
    assert got[0] == [] and got[1] == []  # only stop words / only unknown words: no hits
    assert [h.chunk_id for h in got[2]] == [h.chunk_id for h in fresh.search("film", k=10)]
