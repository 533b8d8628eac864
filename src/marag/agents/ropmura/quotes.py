"""Quotes for the router (ours, `quotes`): each knowledge agent's answer paired with the
sentence of its own passages that states it, found without a model call.

With the 1.5B default model the router graded every reply "conjecture" and answered from
whichever came first or read best, while the agents' analyses claimed support that was
not there ("the passage directly states that the composer of Aschenbrodel is Arnold
Schoenberg", from a page on Five Pieces for Orchestra). What tells the right reply apart
is checkable: one of its passages has a sentence that both states the answer and is
about the question's own subject ("Brand is a play by the Norwegian playwright Henrik
Ibsen" for the author of Brand; a sentence on Alexander Graham Bell's citizenship states
its agent's answer, but shares only "citizen" with the question).

A quote is the sentence (with its page title) that holds most of the answer's words.
Its `anchor` says how much it is about the question's subject: the share of the
question's named words (capitalized after its first word: "Brand", "Johnnycake, West
Virginia") that the sentence or its title has, plus a tenth of the share of all the
question's words, each weighted by how rare it is among the passages every invited agent
read. The router is shown the replies best anchored first, each with its quote, or with
a note that none of its passages states the answer.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from marag.agents.documents import Doc, sentences
from marag.agents.search.memory import query_terms

# an answer word matches a passage word that shares its first letters ("Norway",
# "Norwegian"), or that equals it when the word is short
_STEM = 4
_COVERAGE = 0.5  # share of the answer's own words a sentence must hold to quote it
_NAMED = re.compile(r"(?<![.?!]\s)(?<!^)\b[^\W\d_][^\W_]*", re.UNICODE)


@dataclass(frozen=True)
class Quote:
    title: str = ""
    sentence: str = ""
    anchor: float = 0.0  # 0 when nothing states the answer, or nothing of the question is in it

    def render(self) -> str:
        if not self.sentence:
            return "(no sentence of its passages states this answer)"
        return f'"{self.sentence}" ({self.title})' if self.title else f'"{self.sentence}"'


def _folded(text: str) -> str:
    """Without accents: the question says "Aschenbrodel", the page "Aschenbrödel"."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def _terms(text: str) -> frozenset[str]:
    return query_terms(_folded(text))


def _stems(terms: Iterable[str]) -> frozenset[str]:
    return frozenset(t[:_STEM] if len(t) > _STEM else t for t in terms)


def named_terms(question: str) -> frozenset[str]:
    """The question's content words written with a capital after its first word."""
    question = _folded(question).strip()
    return _terms(" ".join(m.group(0) for m in _NAMED.finditer(question) if m.group(0)[0].isupper()))


def rarity(docs: Sequence[Doc]) -> dict[str, float]:
    """Inverse document frequency of every content word over `docs` (title and text)."""
    df = Counter(w for d in docs for w in _terms(f"{d.title} {d.text}"))
    n = len(docs)
    return {w: math.log(1 + n / c) for w, c in df.items()}


def quote_for(answer: str, question: str, docs: Sequence[Doc], weights: dict[str, float]) -> Quote:
    """The sentence of `docs` that states `answer`, the best anchored to `question`; an
    empty Quote when no sentence holds at least half of the answer's own words (those
    the question does not give; all of its words for an answer such as "yes")."""
    asked, named = _terms(question), named_terms(question)
    own = _stems(_terms(answer)) - _stems(asked) or _stems(_terms(answer))
    if not own:
        return Quote()
    total = sum(weights.get(w, 0.0) for w in asked) or 1.0
    best = Quote()
    for d in docs:
        title = _terms(d.title)
        for s in sentences(d.text):
            held = _terms(s) | title
            if len(own & _stems(held)) / len(own) < _COVERAGE:
                continue
            anchor = (len(named & held) / len(named) if named else 0.0) + 0.1 * sum(weights.get(w, 0.0) for w in asked & held) / total
            if anchor > best.anchor or not best.sentence:  # ties: the earlier passage and sentence
                best = Quote(title=d.title, sentence=s.strip(), anchor=round(anchor, 4))
    return best
