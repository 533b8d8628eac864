"""The next hop by link: documents a question's texts name by title that no search has
shown yet, the best of them for the question first (`marag.index.links`).

A multi-hop question describes its second entity instead of naming it, so no query the
agent writes ranks that entity's article; but the first hop's article usually names it
("... starred Paul Gross"). UniRAG, mRAG and KAIR add these documents after a search without
a model call. A retriever over a remote engine (no chunks to match titles against, no
subset search) links nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from marag.agents.search.memory import SearchMemory
from marag.index.base import Hit
from marag.index.links import title_links
from marag.index.traced import hit_of
from marag.trace import record_read, step


async def linked_hits(retriever: object, question: str, texts: Sequence[str], memory: SearchMemory, want: int, query: str = "") -> list[Hit]:
    """Up to `want` documents named by title in `texts` that no search of the question
    has read (`memory`): those the question ranks highest among them, then the rest in
    the order they were named (a lexical retriever ranks only documents sharing a word
    with the question, and the next hop's rarely does). They are read now: marked in
    `memory` and in the trace's reads. Recorded as a "linked_docs" step (`query`: the
    search it follows) when anything is named."""
    if want <= 0:
        return []
    links = await asyncio.to_thread(title_links, retriever)  # made once per index: off the event loop
    if links is None:
        return []
    positions = links.named(texts, skip={h.doc_id for h in memory.read.values()})
    if not positions:
        return []
    subset = retriever.restrict(positions, label="linked")  # type: ignore[attr-defined]
    with step("linked_docs", query=query, named=len(positions)) as g:
        hits = list(await asyncio.to_thread(subset.search, question, want))
        found = {h.doc_id for h in hits}
        chunks = retriever.chunks  # type: ignore[attr-defined]
        hits += [hit_of(chunks[p], 0.0) for p in positions if chunks[p].doc_id not in found][: want - len(hits)]
        g.outputs = {"chunk_ids": [h.chunk_id for h in hits]}
    memory.mark_read(hits)
    record_read(hits)
    return hits
