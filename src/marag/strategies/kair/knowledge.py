"""Step 3 of a KAIR cycle, as the paper has it: a knowledge update's facts join What is
Known (each with its passage; conflicts discarded and recorded), the gaps it names close
once it added a new fact, and new gaps open. The aids (`aids.knowledge`) act at the marked
places: which facts are taken, and which further gaps close."""

from __future__ import annotations

import re

from marag.agents.kair import Fact, KnowledgeState, Update
from marag.agents.search.memory import flattened, query_terms, repeated
from marag.index.base import Hit
from marag.strategies.kair.aids import Aids
from marag.trace import step


def is_gap(text: str) -> bool:
    """A gap is something to find, in words: the 1.5B sometimes writes the number of a
    gap, or a scrap of a passage ("/70's", "/104"), where the text belongs; a gap like
    that would then be searched for and never close."""
    return re.search(r"[^\W\d_]{2,}", text) is not None


def by_title(hits: list[Hit]) -> dict[frozenset[str], Hit]:
    """The passages by their titles' content words ("The Amri language" is the title
    "Amri language"); the first passage of a title when two share it."""
    titles: dict[frozenset[str], Hit] = {}
    for h in hits:
        if t := query_terms(h.title):
            titles.setdefault(t, h)
    return titles


def merge(aids: Aids, question: str, st: KnowledgeState, gaps_then: list[str], hits: list[Hit], update: Update) -> bool:
    """Merge one knowledge update into a state; True if anything changed. `gaps_then`:
    the open gaps the update's numbers refer to. The gaps it names (and those an aid finds
    answered) close only when it added a new, supported fact: an update whose every fact
    was rejected (or already known) closes nothing."""
    known = {flattened(f.text) for f in st.known}
    titles = by_title(hits)
    added, conflicts, unsupported, leaps, pointed = [], [], [], [], []
    for f in update.facts:
        if not 1 <= f.passage <= len(hits) or not f.text.strip():
            continue
        hit, text = hits[f.passage - 1], f.text
        if f.status != "conflict" and (stand_in := aids.title_fact(text, titles, question, gaps_then, len(pointed))):
            hit, text = stand_in  # aid: a title stands for its passage's own words
            pointed.append(text)
        page = f"{hit.title} {hit.text}"
        if f.status == "conflict":
            conflicts.append(text)
        elif flattened(text) in known:
            continue
        elif aids.unsupported(text, page, question, titles, text in pointed):
            unsupported.append(text)  # aid: invented, a restated question, or only a passage's title
        elif aids.leap(text, page, [question, *gaps_then], st.known):
            leaps.append(text)  # aid: an answer put in the question's words, from a page that does not say it
        else:
            st.known.append(Fact(text=text.strip(), source=hit.chunk_id))
            known.add(flattened(text))
            added.append(text)
    named = {gaps_then[n - 1] for n in update.closed if 1 <= n <= len(gaps_then)}
    # aid: also the gaps a new fact restates with the answer added (not by a passage's words
    # standing for its title: they restate the question because the search found the page
    # by them, and answer nothing by themselves)
    answered = aids.answered(gaps_then, [f for f in added if f not in pointed])
    closed = named | answered if added else set()
    before = list(st.required)
    st.required = [g for g in st.required if g not in closed]
    for gap in update.new_gaps:
        gap = " ".join(gap.split())
        # not a passage just read (a title as a gap would search for a page we have), nor
        # a gap this update closed (the model that left it open tends to list it again)
        if (is_gap(gap) and flattened(gap) not in known and query_terms(gap) not in titles
                and repeated(gap, [*st.required, *closed]) is None):  # fmt: skip
            st.required.append(gap)
    with step("knowledge_applied") as s:
        s.outputs = {"added": added, "from_titles": [t for t in pointed if t in added], "discarded_conflicts": conflicts, "discarded_unsupported": unsupported, "discarded_leaps": leaps,
                     "closed": sorted(closed), "answered": sorted(answered - named), "kept_open": sorted(named - closed),
                     "required": list(st.required)}  # fmt: skip
    return bool(added) or st.required != before
