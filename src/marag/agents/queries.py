"""Search queries as agents write them: cleaned of the bookkeeping a small model copies
from its prompt, and compared by content words. Shared by every strategy whose agents
write queries (mRAG's searcher, UniRAG's planner, ...)."""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

from marag.agents.layout import clip
from marag.agents.search.memory import query_terms, words

QUERY_MAX_CHARS = 120

# Labels of our prompts: a small model copies them, and what follows them, into its
# query ("... Already known: VIVA Media"), which pulls the search back to what was found.
_LABELS = (
    r"already ?known|known so far|facts? found(?: so far)?|still ?missing|look(?:ing)? for|"
    r"queries already used|already searched|relevant documents so far|this page|documents found|"
    r"working memory|evidence|thought|question|current query|pages? (?:read|left)(?: with (?:it|this query))?|"
    r"searches left|calls left"
)
_BOOKKEEPING = re.compile(rf"\b(?:{_LABELS})\s*:", re.IGNORECASE)
# The reference model also glues a label to the end of its query without the colon:
# "... in Honolulu County? Stillmissing".
# Only labels that are never the end of a real query ("question", "evidence" can be).
_TRAILING_LABEL = re.compile(
    r"[\s?.,;]*\b(?:already ?known|known so far|facts? found(?: so far)?|still ?missing|queries already used|"
    r"already searched|relevant documents so far|documents found|working memory|current query|"
    r"pages? (?:read|left)|searches left|calls left)\s*$",
    re.IGNORECASE,
)
# A search-engine URL written as the query ("https://www.google.com/search?q=Grace+..."):
# its q= parameter is the query.
_SEARCH_URL = re.compile(r"https?://\S*?[?&]q=([^&\s]+)\S*", re.IGNORECASE)
# A parenthetical of counters or labels copied from a prompt: "(pages read: 1 of 5)",
# "(2 of 5)", "(found for: ...)", "(no more results)".
_COPIED_PAREN = re.compile(
    r"\((?:[^()]*\b\d+\s+of\s+\d+\b[^()]*|[^()]*\b(?:pages?|found for|results|relevant|left|read)\b[^()]*)\)",
    re.IGNORECASE,
)


def clean_query(text: str, limit: int = QUERY_MAX_CHARS) -> str:
    """The query without bookkeeping copied from the prompt (parenthesised counters such
    as "(pages read: 1 of 5)", everything from the first label on, a label glued to its
    end, a leading "Query:"), a search-engine URL's q= text instead of the URL, without
    quotes and extra space; clipped."""
    text = _SEARCH_URL.sub(lambda m: unquote_plus(m.group(1)), str(text))
    flat = " ".join(_COPIED_PAREN.sub(" ", text).split())
    flat = re.sub(r"^\s*(?:search\s+)?query\s*:\s*", "", flat, flags=re.IGNORECASE)
    if m := _BOOKKEEPING.search(flat):
        head = flat[: m.start()].strip(" .;,-")
        flat = head if sum(c.isalpha() for c in head) >= 3 else _BOOKKEEPING.sub(" ", flat)
    if content_words(bare := _TRAILING_LABEL.sub("", flat)):
        flat = bare
    return clip(flat.strip(" \"'`"), limit)


_STOP = frozenset(
    "the and for with from that this who whom what which when where why how did does was were are "  # noqa: SIM905
    "has have had its his her their into about than then there".split()
)
# Words so common in questions and encyclopedic text that sharing one says nothing about
# whether a document is on a question's topic ("most known", "born", "first").
_GENERIC = frozenset(
    "most more many much also known first last one two three name named called born other same "  # noqa: SIM905
    "such only well been being made make used use new old year years time people part number both each "
    "after before during over under between into than same several some any all not but can could would "
    "will may might".split()
)


def content_words(text: str) -> set[str]:
    return {w for w in words(text) if len(w) >= 3 and w not in _STOP}


def topic_words(text: str) -> set[str]:
    """Words that can tie a text to a topic: a query's terms (`query_terms`: function
    words dropped, a final "s" stripped) of at least three letters, without the generic
    ones (`_GENERIC`)."""
    return {w for w in query_terms(text) if len(w) >= 3 and w not in _GENERIC}
