"""Documents of an index that a text names by title: Wikipedia's links, recovered.

In multi-hop questions the next document is usually the article of an entity the
question or an earlier document names ("...was born in West Chicago, Illinois" leads to
the article "West Chicago, Illinois"). A search for the question rarely ranks it high,
because the question describes that entity instead of naming it. `TitleLinks` finds the
documents whose titles a text names, without a search: on MuSiQue questions 21-100 (hybrid
retrieval, the benchmark's distractor pool), the top 2 documents plus the linked document
the question ranks highest held .562 of the gold documents, the top 3 .494.

A title is named as `marag.agents.documents.named_in` decides it: its words without a
trailing qualifier in parentheses, as written (case kept), whole words only, HTML
entities decoded, at least `min_chars` characters. Matching is by word n-grams, so its
cost grows with the text, not with the number of documents in the index.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from typing import Any

_QUALIFIER = re.compile(r"\s*\([^()]*\)\s*$")  # "Paul Gross (actor)" -> "Paul Gross"
_TOKEN = re.compile(r"\w+|[^\w\s]")
_MAX_WORDS = 12  # longer titles are not looked for (rare; they would cost every text a longer scan)


def title_core(title: str) -> str:
    """A title as texts name it: HTML entities decoded, a trailing "(qualifier)" dropped."""
    return _QUALIFIER.sub("", html.unescape(title)).strip()


def _tokens(text: str) -> tuple[str, ...]:
    return tuple(_TOKEN.findall(text))


class TitleLinks:
    """Which documents of `chunks` (an index's chunks, in index order) a text names.

    `named(texts)` returns the position of each named document's first chunk, in the
    order the texts first name them (earlier texts first; two titles named at one place,
    as "West Chicago" and "West Chicago, Illinois", by index order); documents in `skip`
    (doc ids) are left out."""

    def __init__(self, chunks: Sequence[Any], min_chars: int = 4):
        self._by_title: dict[tuple[str, ...], list[tuple[str, int]]] = {}
        seen: set[str] = set()
        for position, chunk in enumerate(chunks):
            if chunk.doc_id in seen:
                continue
            seen.add(chunk.doc_id)
            core = title_core(chunk.title or "")
            words = _tokens(core)
            if len(core) >= min_chars and 0 < len(words) <= _MAX_WORDS:
                self._by_title.setdefault(words, []).append((chunk.doc_id, position))
        self._lengths = sorted({len(w) for w in self._by_title})

    def __len__(self) -> int:
        """How many distinct titles can be named."""
        return len(self._by_title)

    def named(self, texts: Iterable[str], skip: Iterable[str] = ()) -> list[int]:
        skipped = set(skip)
        found: dict[str, tuple[int, int, int]] = {}  # doc id -> (text, word, position)
        for t, text in enumerate(texts):
            words = _tokens(html.unescape(text))
            for n in self._lengths:
                for i in range(len(words) - n + 1):
                    for doc_id, position in self._by_title.get(words[i : i + n], ()):
                        if doc_id not in skipped and (doc_id not in found or (t, i) < found[doc_id][:2]):
                            found[doc_id] = (t, i, position)
        return [position for _, _, position in sorted(found.values())]


def title_links(retriever: object) -> TitleLinks | None:
    """The `TitleLinks` of a retriever over a local index (made once, kept on it), or
    None when the retriever does not expose its chunks and a way to search a subset of
    them (`chunks` and `restrict`, as marag's built-in retrievers do; Milvus does not)."""
    chunks = getattr(retriever, "chunks", None)
    if chunks is None or not hasattr(retriever, "restrict"):
        return None
    links = getattr(retriever, "_title_links", None)
    if links is None:
        links = TitleLinks(chunks)
        try:
            retriever._title_links = links  # type: ignore[attr-defined]
        except AttributeError:  # a retriever with __slots__: made again next time
            pass
    return links
