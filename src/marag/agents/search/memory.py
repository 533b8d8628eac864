"""What one question's searches have already done, so that agentic search makes progress.

Every strategy that searches more than once (mRAG's searcher, UniRAG, KAIR, RopMura's
knowledge agents) searches through a `SearchMemory`, one per question. It remembers
each query issued and each chunk already returned, and:
- `page(query, k)` returns the next `k` chunks of that query's ranking that nobody has
  read yet (paging past the ones already read, under this query or any other), with
  how many of them are new; asking for the same query again continues where it stopped
  instead of reading the same documents twice;
- `near_duplicate(query)` names an earlier query that this one merely repeats (same
  content words up to `threshold` overlap, or an optional similarity function such as
  an embedding's cosine), so the caller can ask its query writer for another.

With `unseen_only=False` (the mRAG paper's searcher) pages are plain offsets into the
ranking and re-reading is allowed; the memory still counts what was read.

Queries are compared by content words: words of any script (`words`), case-folded,
punctuation and common function words dropped, a final "s" stripped ("magazines" =
"magazine").
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from marag.index.base import Hit
from marag.trace import normalize_query

SearchFn = Callable[[str, int, int], Awaitable[list[Hit]]]  # (query, k, offset) -> hits

_STOP = frozenset(
    "a an the and or of to in on at by for with from as is are was were be been being it its "  # noqa: SIM905
    "this that these those who whom whose what which when where why how did does do has have had "
    "his her their into about than then there also not".split()
)


_WORD = re.compile(r"[^\W_]+")  # letters and digits of any script: "Zoë", "Москва", "東京"


def words(text: str) -> list[str]:
    """The case-folded words of a text, in order. Not ASCII-only: a question in Russian
    or with an accented name must not come out empty, or every two of them would look
    alike (two empty term sets overlap fully)."""
    return _WORD.findall(text.casefold())


def flattened(text: str) -> str:
    """A text reduced to its case-folded words joined by single spaces, for asking
    whether two texts say the same words (a fact already known) or one contains the
    other (a query copied out of the evidence), whatever their case and punctuation."""
    return " ".join(words(text))


def query_terms(text: str) -> frozenset[str]:
    """Content words of a query, for telling repeats apart."""
    return frozenset(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in words(text) if w not in _STOP)


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard overlap of two term sets (1.0 for two empty sets)."""
    return len(a & b) / len(a | b) if a or b else 1.0


REPEAT_THRESHOLD = 0.8  # content-word overlap at which one query (gap, sub-question) repeats another


def repeated(
    text: str,
    earlier: Iterable[str],
    threshold: float = REPEAT_THRESHOLD,
    similarity: Callable[[str, str], float] | None = None,
) -> tuple[str, float] | None:
    """The item of `earlier` that `text` repeats most closely (content-word overlap, or
    the optional `similarity` if higher, of at least `threshold`), with that score; None
    when it repeats none. Every strategy asks "is this query / gap / sub-question one we
    already have?" with this one test."""
    terms = query_terms(text)
    best: tuple[str, float] | None = None
    for e in earlier:
        score = overlap(terms, query_terms(e))
        if similarity is not None:
            score = max(score, similarity(text, e))
        if score >= threshold and (best is None or score > best[1]):
            best = (e, score)
    return best


@dataclass
class Page:
    query: str
    hits: list[Hit]
    ranks: list[int]  # each hit's 0-based position in the query's ranking
    offset: int  # where in the query's ranking this page started
    new: int  # hits no search of this question had returned before
    skipped: int = 0  # already-read hits paged past
    exhausted: bool = False  # the ranking has nothing further


@dataclass
class SearchMemory:
    search: SearchFn
    threshold: float = REPEAT_THRESHOLD  # term overlap at which a query repeats an earlier one
    unseen_only: bool = True  # pages skip chunks already read (False: plain offsets)
    similarity: Callable[[str, str], float] | None = None  # e.g. embedding cosine, compared to threshold
    max_skip: int = 200  # at most this many read chunks paged past per page (a bound on work)
    queries: dict[str, int] = field(default_factory=dict)  # normalized query -> next offset in its ranking
    pages: dict[str, int] = field(default_factory=dict)  # normalized query -> pages read with it, over the question
    read: dict[str, Hit] = field(default_factory=dict)  # chunk id -> hit, in the order first read

    def near_duplicate(self, query: str) -> tuple[str, float] | None:
        """The earlier query that `query` repeats, with the similarity, or None."""
        return repeated(query, self.queries, self.threshold, self.similarity)

    def issued(self, query: str) -> bool:
        return normalize_query(query) in self.queries

    def pages_read(self, query: str) -> int:
        """Pages read with `query` so far in this question (by any agent, any run)."""
        return self.pages.get(normalize_query(query), 0)

    async def page(self, query: str, k: int, commit: bool = True) -> Page:
        """The next page of `query`: up to `k` hits, unseen ones only (`unseen_only`).
        `commit=False` only looks: nothing is marked read and the query does not move on
        (a reranker's candidates, of which the caller shows a few and `mark_read`s them)."""
        key = normalize_query(query)
        start = offset = self.queries.get(key, 0)
        hits: list[Hit] = []
        ranks: list[int] = []
        skipped, exhausted = 0, False
        while len(hits) < k:
            want = k - len(hits)  # fetch no more than can be kept: every unseen hit fetched is returned
            batch = await self.search(query, want, offset)
            for i, h in enumerate(batch):
                if self.unseen_only and h.chunk_id in self.read:
                    skipped += 1
                else:
                    hits.append(h)
                    ranks.append(offset + i)
            offset += len(batch)
            if len(batch) < want:
                exhausted = True
                break
            if not self.unseen_only or skipped >= self.max_skip:
                break
        new = sum(h.chunk_id not in self.read for h in hits)
        if commit:
            self.queries[key] = offset
            self.pages[key] = self.pages.get(key, 0) + 1
            self.mark_read(hits)
        else:
            self.queries.setdefault(key, start)  # issued, still at the same place in its ranking
        return Page(query=query, hits=hits, ranks=ranks, offset=start, new=new, skipped=skipped, exhausted=exhausted)

    def advance(self, query: str, n: int) -> None:
        """Record a page of `n` hits of `query` read elsewhere (a first pass taken over):
        the query counts as issued, and asking it again continues after them."""
        key = normalize_query(query)
        self.queries[key] = self.queries.get(key, 0) + n
        self.pages[key] = self.pages.get(key, 0) + 1

    def forget(self, hits: list[Hit]) -> None:
        """Unmark hits as read (a later page of any query may return them again)."""
        for h in hits:
            self.read.pop(h.chunk_id, None)

    def mark_read(self, hits: list[Hit]) -> None:
        for h in hits:
            self.read.setdefault(h.chunk_id, h)

    def stats(self) -> dict[str, int]:
        return {"distinct_queries": len(self.queries), "docs_read": len(self.read)}
