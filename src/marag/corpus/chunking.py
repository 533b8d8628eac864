"""Split documents into overlapping token windows.

A token here is a run of non-whitespace characters (`str.split()` semantics). That is
fast, needs no model, and is the same on every machine. A word is worth more than one
subword token: measured with the bundled MiniLM WordPiece tokenizer, there are 0.77
words per subword token on DataMorgana web pages and 0.62 on HotpotQA Wikipedia
paragraphs (names and numbers split more), so `size=512` words is roughly 650-830
model tokens. Pick sizes with that in mind when a downstream model (an embedder with a
256/512-token limit, a small LLM context) truncates.

Chunk text is a slice of the document text from the first token's start to the last
token's end, so the whitespace and newlines inside a chunk are exactly the original.
Window `i` covers tokens `[i*(size-overlap), i*(size-overlap)+size)`; the last window
ends at the document's last token (it may be shorter). Chunk ids are
`"<doc_id>#<window index>"`, stable as long as the text and the settings stay the same.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from itertools import accumulate

from marag.corpus._gc import paused_gc
from marag.corpus.models import Chunk, Document

log = logging.getLogger(__name__)

_GAPS = re.compile(r"(\s+)")  # same whitespace as str.split()


class ChunkList(list[Chunk]):
    """The chunks, plus how many documents were skipped for having no text."""

    skipped_empty: int = 0


def _validate(size: int, overlap: int) -> None:
    if not isinstance(size, int) or not isinstance(overlap, int):
        raise ValueError(
            f"chunk size and overlap must be integers (got size={size!r}, overlap={overlap!r})"
        )
    if overlap < 0:
        raise ValueError(f"chunk overlap must be >= 0 (got {overlap})")
    if size <= overlap:
        raise ValueError(
            f"chunk size must be larger than the overlap (got size={size}, overlap={overlap}); "
            "e.g. size=512, overlap=80"
        )


def chunk_documents(documents: Iterable[Document], size: int = 512, overlap: int = 80) -> ChunkList:
    """Cut each document into windows of `size` whitespace tokens overlapping by
    `overlap`; documents with `size` tokens or fewer give one chunk, documents with only
    whitespace give none (counted in `ChunkList.skipped_empty`)."""
    _validate(size, overlap)
    with paused_gc():
        chunks = _chunk(documents, size, size - overlap)
    if chunks.skipped_empty:
        log.info("skipped %d document(s) with empty text", chunks.skipped_empty)
    return chunks


def _windows(n_tokens: int, size: int, step: int) -> list[tuple[int, int]]:
    """Token ranges [start, end) of each window; the last one ends at the last token."""
    out = []
    start = 0
    while True:
        end = min(start + size, n_tokens)
        out.append((start, end))
        if end == n_tokens:
            return out
        start += step


def _chunk(documents: Iterable[Document], size: int, step: int) -> ChunkList:
    chunks = ChunkList()
    append = chunks.append
    # Chunk(...) validation copies `metadata` into a new dict (shallow), so chunks never
    # alias their document's dict; it is also faster than model_construct.
    for doc in documents:
        stripped = doc.text.strip()
        if not stripped:
            chunks.skipped_empty += 1
            continue
        # n tokens need at least 2n-1 characters, so short texts skip the tokenizing:
        # most passage corpora are all short, and this is their whole cost.
        tokens = None if len(stripped) < 2 * size else stripped.split()
        if tokens is None or len(tokens) <= size:
            append(
                Chunk(
                    id=f"{doc.id}#0",
                    doc_id=doc.id,
                    text=stripped,
                    position=0,
                    title=doc.title,
                    metadata=doc.metadata,
                )
            )
            continue
        n_tokens = len(tokens)
        if " ".join(tokens) == stripped:
            # Single-spaced text (most passage corpora): a window's slice is exactly the
            # join of its tokens, which is several times faster than locating offsets.
            texts = [" ".join(tokens[a:b]) for a, b in _windows(n_tokens, size, step)]
        else:
            # [token, gap, token, gap, ..., token]: running lengths give every token's
            # character offsets without a Python-level loop over tokens.
            offsets = list(accumulate(map(len, _GAPS.split(stripped)), initial=0))
            texts = [
                stripped[offsets[2 * a] : offsets[2 * b - 1]]
                for a, b in _windows(n_tokens, size, step)
            ]
        for position, chunk_text in enumerate(texts):
            append(
                Chunk(
                    id=f"{doc.id}#{position}",
                    doc_id=doc.id,
                    text=chunk_text,
                    position=position,
                    title=doc.title,
                    metadata=doc.metadata,
                )
            )
    return chunks
