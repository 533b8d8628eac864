"""Rank passages already in hand for a text: the run's retriever searching only them.

A strategy that has gathered a handful of passages reads them best with the one that
says what is asked first (the 1.5B default model answers from what it reads first:
`marag.agents.answerer`). The order they were found in is the order of the searches,
not of the question. Searching the same index restricted to those passages ranks them
for the question (and whatever the strategy has learned) without a model call."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

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
