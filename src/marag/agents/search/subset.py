"""Rank passages already in hand for a text: the run's retriever searching only them.

A strategy that has gathered a handful of passages reads them best with the one that
says what is asked first (the 1.5B default model answers from what it reads first:
`marag.agents.answerer`). The order they were found in is the order of the searches,
not of the question. Searching the same index restricted to those passages ranks them
for the question (and whatever the strategy has learned) without a model call."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from marag.agents.documents import named_in
from marag.index.base import Hit
from marag.trace import step


async def rank_within(retriever: object, hits: Sequence[Hit], query: str, n: int | None = None, label: str = "ranked") -> list[Hit]:
    """The first `n` (None: all) of `hits` in the order `query` ranks them: those the
    restricted search returns, then the rest in their given order (a lexical retriever
    ranks only passages sharing a word with the query). Recorded as a `label` step. A
    retriever that cannot search a subset of its index (a remote engine) keeps the
    given order."""
    want = len(hits) if n is None else min(n, len(hits))
    index = getattr(retriever, "index", None)
    if len(hits) < 2 or index is None or not hasattr(retriever, "restrict"):
        return list(hits[:want])
    by_id = {h.chunk_id: h for h in hits}
    subset = retriever.restrict([index.position(c) for c in by_id], label=label)
    with step(label, n=want, of=len(hits)) as s:
        found = [by_id[h.chunk_id] for h in await asyncio.to_thread(subset.search, query, want) if h.chunk_id in by_id]
        ranked = {h.chunk_id for h in found}
        found += [h for h in hits if h.chunk_id not in ranked][: want - len(found)]
        s.outputs = {"chunk_ids": [h.chunk_id for h in found]}
    return found


def with_named(ranked: Sequence[Hit], question: str, n: int) -> list[Hit]:
    """The first `n` of `ranked` (best first), except that two kinds of passage keep their
    place even when ranked lower: those whose title the question names, and for each of
    them the best-ranked passage below the first `n` whose title its text names (the next
    hop: the question names "Charles Andrews", whose page names "Hebron Academy"; pages
    it names within the first `n` are read anyway). In ranked order; when those alone are
    more than `n`, the named pages first, each kind best-ranked first. Why: a ranking by
    the question's words puts a page that shares them ("T.M. Landry College Preparatory"
    for "... what college preparatory boys' school?") above the page that answers, and
    the two pages of a comparison need not both rank in the first `n`."""
    named = named_in([question], ranked)
    seats = [h.chunk_id for h in named]
    below = ranked[n:]
    for h in named:
        hop = next((x for x in named_in([h.text], below) if x.chunk_id not in seats), None)
        if hop is not None:
            seats.append(hop.chunk_id)
    kept = seats[: len(named)] + sorted(seats[len(named) :], key=[h.chunk_id for h in ranked].index)
    kept = kept[:n]
    kept += [h.chunk_id for h in ranked if h.chunk_id not in seats][: n - len(kept)]
    keep = set(kept)
    return [h for h in ranked if h.chunk_id in keep]
