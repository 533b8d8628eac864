"""Documents as agents read them: a retrieved chunk with its text clipped to what a
prompt can hold, and the packing of many documents into one character budget.

Prompts must fit a llama.cpp slot (8192 tokens for the catalogue's Qwen models, 4096 for
SmolLM2-135M) and every prompt token costs time on a CPU (the default 1.5B model
evaluates ~60 a second on two cores), so collected documents are packed into a
character budget (`pack_texts`): every document is shown, most relevant first, and when
they do not fit whole the longest ones are clipped to an equal share of the budget.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from marag.agents.layout import clip
from marag.agents.search.memory import query_terms
from marag.index.base import Hit
from marag.index.links import title_core


class Doc(BaseModel):
    """A collected document as the agents see it (text already clipped)."""

    id: str  # chunk id: unique in the index, the key of the supporting set S
    title: str = ""
    text: str
    found_for: str = ""  # the search query it was judged relevant for


def doc_from_hit(hit: Hit, chars: int | None, found_for: str = "", about: str = "") -> Doc:
    """`hit` as a role reads it: its first `chars` characters, or with `about` (what the
    reader looks for) its `excerpt` for that within `chars`."""
    text = excerpt(hit.text, about, chars) if about and chars else clip(hit.text, chars)
    return Doc(id=hit.chunk_id, title=hit.title, text=text, found_for=found_for)


SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentences(text: str, min_words: int = 1) -> list[str]:
    """The sentences of `text` (split after ".", "!" or "?" followed by space), stripped,
    in order, keeping those of at least `min_words` words. Every role that shows or
    scores a passage sentence by sentence splits it with this one rule."""
    return [x for x in (part.strip() for part in SENTENCE_END.split(text)) if len(x.split()) >= min_words]


def excerpt(text: str, about: str, chars: int) -> str:
    """At most `chars` characters of `text` for a reader looking for `about` (a query and
    its question): the first sentence, which says what the document is, then the
    sentences that share the most content words with `about` while they fit, printed in
    the document's order with " … " wherever sentences were left out. Among sentences
    sharing as many words, those sharing the document's rarer ones come first (a word
    every sentence repeats, such as the subject's name, tells them apart least); then the
    document's order, also for sentences that share none. A text that fits is returned
    whole. Why: a reader given the first `chars` of a document misses the sentence
    further on that answers its query."""
    flat = " ".join(text.split())
    if len(flat) <= chars:
        return flat
    terms = query_terms(about)
    pieces = [p for s in SENTENCE_END.split(flat) for p in _cut(s, terms, chars)]
    has = [query_terms(x) & terms for x in pieces]
    spread = Counter(t for h in has for t in h)  # in how many pieces each word is
    rarity = [sum(1 / spread[t] for t in h) for h in has]
    chosen, used = {0}, len(pieces[0]) + 2  # (room for a closing " …")
    for i in sorted(range(1, len(pieces)), key=lambda i: (-len(has[i]), -rarity[i], i)):
        if used + 3 + len(pieces[i]) <= chars:
            chosen.add(i)
            used += 3 + len(pieces[i])
    parts, last = [], -1
    for i in sorted(chosen):
        if parts and i != last + 1:
            parts.append("…")
        parts.append(pieces[i])
        last = i
    if last < len(pieces) - 1:
        parts.append("…")
    return clip(" ".join(parts), chars)


def _cut(sentence: str, terms: frozenset[str], chars: int) -> list[str]:
    """`sentence` as the pieces `excerpt` chooses from: whole when it fits in `chars`;
    else (an infobox or a table flattened into one "sentence", which could only be
    shown clipped) runs of words of at most a third of `chars` (40 at least), a run also
    starting where one of `terms` is first mentioned, so that a field's name and the
    value after it ("Population ... Total 2,913,123") stay in one piece."""
    if len(sentence) <= chars:
        return [sentence]
    longest = max(40, chars // 3)
    runs: list[list[str]] = [[]]
    run_chars, seen = 0, set()
    for word in sentence.split(" "):
        new = (query_terms(word) & terms) - seen
        seen |= new
        if runs[-1] and (new or run_chars + 1 + len(word) > longest):
            runs.append([])
            run_chars = -1
        runs[-1].append(word)
        run_chars += 1 + len(word)
    return [" ".join(r) for r in runs]


def pack_texts(lengths: Sequence[int], budget: int | None, floor: int = 200) -> list[int]:
    """How many characters of each text to show so that all fit in `budget`
    (water-filling: texts shorter than an equal share stay whole, what they leave goes
    to the longer ones, which are clipped to one common cap). When even `floor`
    characters each would not fit, the texts at the end of the list (the least
    relevant) are left out: their allowance is 0."""
    if budget is None or sum(lengths) <= budget:
        return list(lengths)
    shown = min(len(lengths), max(1, budget // floor))
    remaining, left, cap = budget, shown, budget
    for n in sorted(lengths[:shown]):
        share = remaining // left
        if n > share:
            cap = share
            break
        remaining, left = remaining - n, left - 1
    return [min(n, cap) for n in lengths[:shown]] + [0] * (len(lengths) - shown)


def named_in(texts: Iterable[str], hits: Iterable[Hit], min_chars: int = 4) -> list[Hit]:
    """The hits whose title one of `texts` names, in the order of `hits`.

    A title is named when its words, without a trailing qualifier in parentheses, appear
    in a text as written (case and word boundaries respected, HTML entities decoded), so
    "Paul Gross (actor)" is named by "...starred Paul Gross..." but "Frozen" is not by
    "frozen lakes". Titles shorter than `min_chars` are never named. Why: in multi-hop
    questions the second document is usually named in the question or in the first
    (Wikipedia's hyperlinks), which small models' evidence extraction misses.
    """
    decoded = [html.unescape(t) for t in texts]
    named = []
    for h in hits:
        core = title_core(h.title)
        if len(core) < min_chars:
            continue
        pattern = re.compile(r"(?<!\w)" + re.escape(core) + r"(?!\w)")
        if any(pattern.search(t) for t in decoded):
            named.append(h)
    return named
