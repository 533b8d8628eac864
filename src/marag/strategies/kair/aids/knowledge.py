"""KAIR's aids to step 3, the knowledge update (ours; `paper=true` turns each off): how
the update reads the new passages, which of its facts are taken, and which gaps they
close. Each takes the config first and fills one place of the loop (`aids.Aids`); the
tests they rest on (`supported`, `leap_supported`, `answers`) are beside them."""

from __future__ import annotations

import re

from marag.agents.documents import Doc, doc_from_hit, excerpt
from marag.agents.kair import Fact, KnowledgeState
from marag.agents.search.memory import query_terms
from marag.index.base import Hit
from marag.strategies.kair.config import KAIRConfig
from marag.strategies.kair.context import tightest


def update_excerpts(cfg: KAIRConfig, hits: list[Hit], query: str, st: KnowledgeState, question: str) -> list[Doc]:
    """`update_chars`: the update reads each new passage's first sentence and the
    sentences nearest the query, the open gaps and the question, within that many
    characters (`marag.agents.documents.excerpt`; the paper's: `doc_chars` of each). Why:
    the update read 10 passages of 700 characters a cycle, 40% of KAIR's evaluated prompt
    tokens with the default model; 6 passages a search instead lost gold pages ranked 7-10.
    Measured: benchmarks/RESULTS.md, "Fewer prompt tokens for KAIR, mRAG and UniRAG"."""
    about = " ".join([query, *st.required, question])
    return [doc_from_hit(h, tightest(cfg.update_chars, cfg.doc_chars), about=about) for h in hits]


def supported(fact: str, passage: str, question: str = "", share: float = 0.75) -> bool:
    """Nearly all of what the fact adds to the question (its content words the question
    does not have) occurs in its passage: a cheap check that the model did not invent it. A
    bridge fact joins the question's words to what one passage says ("... in the era of
    Haymo of Faversham was Latin", from a page that never names Haymo); a fact that only
    restates the question adds nothing and is not supported."""
    words = query_terms(fact) - query_terms(question)
    text = query_terms(passage)
    return bool(words) and len(words & text) / len(words) >= share


def support_check(cfg: KAIRConfig, text: str, page: str, question: str, titles: dict, pointer: bool) -> bool:
    """`support_check`: True (rejected) for a fact that is not `supported` by its passage,
    or that is only a passage's title (compared by content words); a title's own words
    standing for it (`title_facts`) pass. Why: the 1.5B's update invents facts, restates
    the question and lists titles as facts ("Dawn Penn"). Measured with `close_answered`
    (the title rule, 2026-11-27): docs/strategies/kair.md, "Closing answered gaps, known
    facts first, no titles as facts or gaps"; benchmarks/RESULTS.md, "KAIR: answered gaps
    close, known facts first, no titles as facts or gaps (11b1956)"."""
    return not pointer and (query_terms(text) in titles or not supported(text, page, question))


def title_facts(cfg: KAIRConfig, text: str, titles: dict[frozenset[str], Hit], question: str, gaps: list[str],
                taken: int) -> tuple[Hit, str] | None:  # fmt: skip
    """`title_facts` N (off, 0, by default): a fact that is only the title of a passage
    just read stands for that passage and its own words, its first sentence and those
    nearest the question and the open gaps within `title_fact_chars` (at most N an update,
    `taken` so far; they close no gap by restating it). Why tried: the update often named
    the bridge page's title instead of a sentence, the support check dropped it, K stayed
    empty and the planner could only repeat the question. Measured neutral, so off
    (tuning HotpotQA 51-80 .508 -> .541, held out HotpotQA 1-30 −.007): docs/strategies/
    kair.md and benchmarks/RESULTS.md, "A passage's title as a pointer"."""
    titled = titles.get(query_terms(text)) if taken < cfg.title_facts else None
    return (titled, excerpt(titled.text, " ".join([question, *gaps]), cfg.title_fact_chars)) if titled else None


# A "fact" that says the answer is not there ("It is unknown where she grew up") restates
# the gap and adds a word, yet answers nothing.
_NO_ANSWER = re.compile(
    r"\b(?:unknown|unclear|no information|not (?:known|clear|mentioned|stated|given|specified|provided)"
    r"|(?:does|do|did) not (?:say|mention|state|specify))\b",
    re.IGNORECASE,
)


def answers(fact: str, gap: str, share: float = 0.8) -> bool:
    """The fact restates the gap (most of its content words) and adds something: the
    update found what the gap asked for, whether or not it said so. A fact saying the
    answer is not known answers nothing."""
    asked, said = query_terms(gap), query_terms(fact)
    if not asked or _NO_ANSWER.search(fact):
        return False
    return len(asked & said) / len(asked) >= share and bool(said - asked)


def leap_supported(fact: str, passage: str, known: str = "", share: float = 0.6) -> bool:
    """A fact that claims a gap's answer is backed as a whole by its passage and what is
    already known (the bridge a multi-hop answer rests on): most of its content words
    occur there, the gap's words included (60%: a passage words a relation its own way).
    "The last time the Olympics were held in the country that released Han Vodka was
    2018", from a page that never names the vodka and with nothing known, is a leap."""
    return supported(fact, f"{passage} {known}", share=share)


def leap_check(cfg: KAIRConfig, text: str, page: str, claims: list[str], known: list[Fact]) -> bool:
    """`leap_check` (off by default): True (rejected) for a fact that `answers` the
    question or a gap (`claims`) but is not `leap_supported` by its passage and the known
    facts. Why: the 1.5B wrote the question's words around a name from an unrelated page
    ("Chloë Leland directed the film that was shot in or around Leland, North Carolina in
    1986", from Chloë Leland's page), which passed the support check on its one new word,
    closed the question in cycle 1 and became the answer. Off: on MuSiQue 75-86 it changed
    F1 by +.008 at 20% more evaluated tokens (benchmarks/RESULTS.md, "KAIR's leap check")."""
    return any(answers(text, g) for g in claims) and not leap_supported(text, page, " ".join(k.text for k in known))


def close_answered(cfg: KAIRConfig, gaps: list[str], facts: list[str]) -> set[str]:
    """`close_answered`: the open gaps that a fact just learned restates with the answer
    added also close (the paper's: only those the update names). Why: the update stated the
    answer as a fact and left the question open, so KAIR searched on, C filled with
    unrelated passages, and the generator answered from them ("1981" with "... formed in
    1993" known). Measured with the support check's title rule: docs/strategies/kair.md,
    "Closing answered gaps, known facts first, no titles as facts or gaps" (calls 8.8 ->
    7.7, the same F1), and benchmarks/RESULTS.md's paragraph of that name (11b1956)."""
    return {g for g in gaps if any(answers(f, g) for f in facts)}
