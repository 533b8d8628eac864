"""Knowledge-aware iterative retrieval (KAIR; Song, "Knowledge-Aware Iterative Retrieval
for Multi-Agent Systems", 2025): retrieval first, its product a refined context, which a
separate generator then answers from.

Each agent keeps a state: What is Known K (verified facts, each with its passage), What
is Required R (open gaps; at first the question itself), the query history, and the
refined context C (passages, verbatim). One cycle:
1. query planning: the model proposes candidate queries, each for an open gap; the
   strategy scores them by relevance to an open gap minus `diversity_weight` times
   their similarity to earlier queries (content-word overlap, `marag.agents.search.memory`),
   rejects those above `redundancy_threshold`, and runs the best;
2. retrieval of the top `k` (the paper: BM25, top 10; ours: the run's retriever, top 5; `retrieval`, `k`);
3. knowledge update: facts the new passages state, each checked against what is known
   (new / known / conflict: conflicts are discarded and recorded); the gaps the update
   names close only when it added at least one new, supported fact; new gaps open (not
   the title of a passage just read);
4. contextual filtering: the passages to keep, verbatim; when K changed, the passages
   already in C are filtered again with the new ones (C follows the knowledge). Ours by
   default, `context=cited`: no call; C gains the passages the new facts cite, the
   search's `keep_top` best new ones and the documents a title link joined.
It repeats until Required is empty, the optional `moderator` scores C at or above
`moderator_threshold`, a cycle cannot find a non-redundant query, or `max_steps` cycles
ran. The generator reads C packed into `context_chars` characters: with
`answer_passages`, the passages of C the question and K rank highest, best first; else
all of C, passages that support a known fact first (with `known_first`, the known facts
come before them, outside that limit); with nothing to read it answers closed-book,
which the trace's generator step and the answer's details record (`closed_book`).

Several agents (`agents > 1`): in `competition` (the paper's Eq. 6) every agent runs a
cycle on its own state each round (agents after the first sample at
`agent_temperature`, so they differ); then the moderator scores each agent's C, and the
best-scored C, when it reaches `moderator_threshold`, becomes every agent's C. K and R
stay each agent's own. The run stops when any agent has no open gap. In
`collaboration` the agents share one blackboard: each round a goal manager assigns the
open gaps to the agents, which plan at once, then choose a query and search one after
another in their order (they share the query history and the search memory), then
extract in parallel; their updates are merged into the blackboard one after another,
then one filter call updates C.

Our additions (each off with `paper=true`, `kair_paper`): `support_check` (at least 75%
of what a fact adds to the question must be in the passage it cites, and a passage's
title alone is not a fact), `title_facts` (off by default: a fact that is only a
passage's title stands for that passage's own words, its first sentence and those
nearest the question and the open gaps; they close no gap by restating it),
`leap_check` (off by default; a fact that restates the question or a gap with an answer
added must be backed as a whole, 60% of its content words, by its passage and the known
facts), `close_answered` (a gap also closes when a new fact restates
it with the answer added, and does not reopen in the same update), `known_first` (the
generator reads K before C), `drop_claims` (but not the facts that restate the question
with an answer added, when C has passages), `memory` (a retrieval returns only passages
no earlier retrieval of the question returned), `gap_as_query`
(when every candidate repeats an earlier query, the open gap itself is tried),
`question_first` (the first agent's first search is the question itself, with no planner
call: the 1.5B planner put guessed answers into first queries, "... by J.K. Rowling";
collaborating agents, each given a gap, still plan every query),
`agent_angles` (competing agents are told their number and asked for their own angle),
`query_relevance=grounded` (off by default, not yet measured: a candidate query's
relevance is the share of its words that its gap or a known fact gives),
`context=cited` (C refined without the filter call: the passages new facts cite, the
search's `keep_top` best new ones and the documents a title link joined),
`filter_chars` (with `context=filter`, the filter reads each passage's first 250 characters),
`update_chars` (the knowledge update reads each new passage's sentences nearest the
query, the open gaps and the question, within 300 characters), `answer_passages` (the
generator reads the 5 passages of C that the question and the known facts rank highest,
the run's retriever searching only C), `named_passages` (among them always the passages
whose title the question names and the next hop each names), `answer_excerpts` (a
passage of C clipped for the generator shows its sentences nearest the question and the
known facts) and `linked_docs` (after a search, the unread document that the question,
the known facts' passages or the search's best two name by title follows the search's
passages, `marag.agents.search.linked`); the paper's roles read each passage as the
generator does.
Needed in every mode, not additions: `doc_chars` and `context_chars` (prompts must fit
the model's context), bounded strings in every output schema, each role's fallback, and
new gaps that are words (`is_gap`) and not the title of a passage just read (a search for
a page the agent has).

Usage adds `cycles` (steps to converge) and `cost_units` (see `Trace.totals`).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, ClassVar, Literal

from pydantic import Field

from marag.agents.answerer import Answerer, AnswerInput, Passage
from marag.agents.documents import Doc, doc_from_hit, excerpt, pack_texts
from marag.agents.kair import (
    Candidates,
    ContextFilter,
    Fact,
    FilterInput,
    KnowledgeState,
    KnowledgeUpdater,
    Moderator,
    ModeratorInput,
    PlanInput,
    QueryPlanner,
    Update,
    UpdateInput,
)
from marag.agents.layout import clip
from marag.agents.queries import clean_query
from marag.agents.search.linked import linked_hits
from marag.agents.search.memory import SearchMemory, flattened, overlap, query_terms, repeated
from marag.agents.search.subset import rank_within, with_named
from marag.index.base import Hit
from marag.llm.base import LLM
from marag.llm.budget import budget_spent, grace
from marag.llm.factory import LLMConfig, make_llm
from marag.strategies.base import ANSWER_PAPER_SETTINGS, OPERATOR_ONLY, STRATEGIES, AnsweringConfig, PaperSwitch, Strategy, register_variant
from marag.trace import record_read, step

# What `paper=True` sets: every addition of ours off (module docstring).
PAPER_SETTINGS: dict[str, Any] = {
    **ANSWER_PAPER_SETTINGS,
    "support_check": False,
    "title_facts": 0,
    "leap_check": False,
    "close_answered": False,
    "known_first": False,
    "drop_claims": False,
    "memory": False,
    "gap_as_query": False,
    "query_relevance": "gap",
    "agent_angles": False,
    "context": "filter",
    "filter_chars": None,
    "update_chars": None,
    "answer_excerpts": False,
    "answer_passages": None,
    "named_passages": False,
    "linked_docs": 0,
    "question_first": False,
}


class KAIRConfig(PaperSwitch, AnsweringConfig):
    paper_settings: ClassVar[dict[str, Any]] = PAPER_SETTINGS
    # the paper's retrieval (BM25), and C as it was read before we measured the default
    # model (not additions: ours are the run's retriever and 3,000 characters of C, which
    # `paper=true` also replaces)
    paper_defaults: ClassVar[dict[str, Any]] = {"retrieval": "bm25", "context_chars": 6000, "k": 10}
    acts_only_with: ClassVar[dict[str, tuple[str, Any]]] = {"filter_chars": ("context", "filter")}  # the filter's reading
    agents: int = Field(default=1, ge=1, le=5)
    mode: Literal["competition", "collaboration"] = "competition"
    # cycles (rounds) per question; ours: the paper reports how many steps runs took (4.9 on
    # average for one agent on its hardest set) and names no cap we could find
    max_steps: int = Field(default=10, ge=1, le=30)
    # passages per retrieval. The paper's top 10 (`paper=true`) fed the knowledge update 8
    # new passages a search, 69% of KAIR's evaluated prompt tokens with the default model;
    # with 5 (ours, the default since 2026-11-29), tuning HotpotQA 51-62 gave the same
    # answers (F1 .467) and MuSiQue 51-62 .125 -> .214 (2 better, 0 worse), at 29% and 26%
    # fewer evaluated tokens a question (gold recall in sources .750 -> .792, .514 -> .597:
    # the linked title and the later searches reach what ranks 6-10)
    k: int = Field(default=5, ge=1, le=20)
    # "given": the retriever the run passes (--retriever; hybrid by default), the one every
    # other strategy searches, so that recall compares like with like (ours: with the
    # reference model KAIR ran one cycle in each of 15 HotpotQA tuning questions read, so
    # its recall was its retriever's recall@10: on musique_train100, BM25 .567, hybrid .693);
    # "bm25": the index's BM25 part, as in the paper (`paper=true` selects it), when the
    # retriever given belongs to an index that has one
    retrieval: Literal["bm25", "given"] = "given"
    diversity_weight: float = Field(default=0.5, ge=0.0, le=2.0)  # ours (the paper: a relevance/diversity trade-off)
    redundancy_threshold: float = Field(default=0.8, gt=0.0, le=1.0)  # ours
    # A candidate's relevance: "gap", its content-word overlap with the open gap it names;
    # "grounded" (ours, not yet the default: unmeasured), the share of its content words
    # that the gap or a known fact gives, 0 when it shares none with the gap. Why: the
    # first gap is the question, which is also the first query, so overlap with the gap
    # and redundancy measure nearly the same thing and a restatement of the question
    # outscores the query that names the bridge entity a known fact gives ("... waterfall
    # in the country where the Limpopo River is found?" chosen over "... waterfall in
    # Zimbabwe?" with "... District, Zimbabwe" known; MuSiQue report run)
    query_relevance: Literal["gap", "grounded"] = "gap"
    # one agent or collaboration: stop once the moderator scores C at or above the threshold
    # (competition always has the moderator score every agent's C)
    moderator: bool = False
    moderator_threshold: int = Field(default=7, ge=0, le=10)  # on the moderator's 0-10 scale (ours)
    agent_temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    # How C is refined: "filter", the paper's contextual-filtering role (a call that reads
    # the new passages again, and C again when K changed); "cited" (ours), no call: C
    # gains the passages the new facts cite plus the search's `keep_top` best new ones
    # and the documents a title link joined (`linked_docs`). Why cited: the 1.5B's filter
    # kept nearly all it was shown (88%), and since the generator reads the
    # `answer_passages` of C the question and K rank highest, the filter's main effect
    # was its cost: 37-38% of KAIR's evaluated prompt tokens. F1, filter -> cited with
    # keep_top 2 / 5 (final reads only; the other calls replayed from the filter runs):
    # tuning HotpotQA 87-98 .650 -> .678 / .650, MuSiQue 75-86 .242 -> .242 / .450 (with
    # 2, C missed the 3rd-5th hits that the filter had kept: "G. Stanley Hall" was in the
    # 4th); held out HotpotQA 1-30 .479 -> .544 / .471, MuSiQue 1-30 .315 -> .227 / .304;
    # evaluated tokens a question 6,698 -> 4,388 and 5,481 -> 3,622 held out (5 chosen on
    # the tuning questions)
    context: Literal["filter", "cited"] = "cited"
    keep_top: int = Field(default=5, ge=0, le=20)
    # -- needed in every mode: prompts must fit the model's context --
    doc_chars: int | None = Field(default=700, ge=100)  # each new passage as the roles read it
    # C as the generator, moderator and filter read it. 3,000 (was 6,000): the default
    # model answered better from 4 passages than from 8 (UniRAG, `answer_passages`), and
    # the generator's prompt was 16% of KAIR's evaluated tokens
    context_chars: int | None = Field(default=3000, ge=200)
    # each passage as the contextual filter reads it (ours; None: as the other roles do).
    # Whether a passage belongs in C shows in its title and opening; the filter read every
    # new passage whole after the knowledge update had, and C again whenever K changed: 41%
    # of KAIR's evaluated prompt tokens with the default model, keeping 88% of what it saw
    filter_chars: int | None = Field(default=250, ge=50)
    # each new passage as the knowledge update reads it (ours; None: `doc_chars`): its first
    # sentence and the sentences nearest the query, the open gaps and the question
    # (`marag.agents.documents.excerpt`). The update read 10 passages of 700 characters a
    # cycle, 40% of KAIR's evaluated prompt tokens with the default model; 6 passages a
    # search instead lost gold pages ranked 7-10 (HotpotQA 51-62)
    update_chars: int | None = Field(default=300, ge=50)
    paper: bool = False  # only the paper's behaviour: PAPER_SETTINGS
    # -- our additions (module docstring) --
    support_check: bool = True
    # a "fact" that is only the title of a passage just read ("Dawn Penn", "Paul Gross") is
    # the update pointing at that passage: with `title_facts` N > 0 it stands for the
    # passage's own words, its first sentence and those nearest the question and the open
    # gaps within `title_fact_chars` (at most N an update; they close no gap by restating
    # it); with 0 (the default) such a fact is dropped, as the support check does. Why
    # tried: with the default model updates often named the bridge page's title instead of
    # a sentence, the title was dropped, K stayed empty, and the planner could only repeat
    # the question. Measured (2026-12-02, N=2): tuning HotpotQA 51-80 .508 -> .541 (2
    # better, 1 worse; "Steely and Clevie" reached through Dawn Penn's page), held out
    # HotpotQA 1-30 paired on the same run's LLM cache −.007 (1 better, 1 worse: two
    # unrelated pages' openings became facts and led the planner astray from Telemann);
    # 9 of 30 tuning questions used it. Neutral, so off
    title_facts: int = Field(default=0, ge=0, le=10)
    title_fact_chars: int = Field(default=250, ge=80)
    # a fact that restates the question or an open gap with an answer added claims that
    # answer, so its passage and the known facts must hold most of ALL its content words
    # (`leap_supported`), not only the ones it adds: the 1.5B wrote the question's words
    # around a name from an unrelated page ("Chloë Leland directed the film that was shot
    # in or around Leland, North Carolina in 1986", from Chloë Leland's page), which
    # passed the support check on its one new word, closed the question in cycle 1, and
    # became the answer. Off by
    # default: on MuSiQue 75-86 (n=12) it fired on 4 questions and changed F1 by +.008
    # [.000, +.025] at 20% more evaluated tokens (more cycles)
    leap_check: bool = False
    # a gap closes when a fact just learned restates it with something added (the answer):
    # with the default model the update stated the answer as a fact and left the question
    # open, so KAIR searched on, its C filled with junk, and the generator answered from
    # that ("1981" with "... formed in 1993" known; HotpotQA report run)
    close_answered: bool = True
    # the generator reads the known facts before C (the paper's generator reads C only)
    known_first: bool = True
    # ... but not the claims among them, when C has passages: a fact that restates the
    # question with an answer added is the knowledge update's guess at the final answer,
    # and the generator repeated it as read ("The country of Izgoy's performer invaded
    # Manchuria in 1941"). Left out, the generator reads the answer from C, where the
    # passage the claim cites comes first. MuSiQue tuning (63-86, n=24, final reads
    # replayed): 9 questions had a claim, none right; F1 .193 -> .243 (3 better, 1 worse);
    # leaving out all of K instead: .201
    drop_claims: bool = True
    # the generator reads the `answer_passages` passages of C that the question and the
    # known facts rank highest (the run's retriever searching only C), not all of C
    # clipped: C held 10-36 passages, each cut short to fit 3,000 characters, and KAIR
    # with recall .92 answered worse than one-shot top 5 (HotpotQA 75-86, n=12: F1 .367 vs
    # k5 .567). Final reads replayed, 5 passages: ranked by the question .733, by the
    # question and K .817 (MuSiQue 63-86, n=24: .193 -> .283, .288). The known facts
    # carry the bridge ("... was born in Young, New South Wales"), which the question
    # does not name. None: all of C, ordered as `ranked` (the paper)
    answer_passages: int | None = Field(default=5, ge=1, le=20)
    # ... among them always the passages of C whose title the question names and, for each,
    # the best-ranked passage below the 5 that its text names by title (`subset.with_named`): in a fresh
    # run on tuning HotpotQA 51-80, 8 of 30 questions had a gold page in C that the ranking
    # left out of the 5 (7 of them wrong): "Hebron Academy", named on the page of the
    # Charles Andrews the question names, ranked below "T.M. Landry College Preparatory";
    # one of a comparison's two pages ("Irwin Shaw", "Guitar World"). Replayed on those
    # questions' caches: F1 .408 -> .580 (+.172 [+.034, +.310], 5 better, 0 worse); held
    # out, HotpotQA 1-30: .532 -> .615 (+.083 [.000, +.183], 3 better, 0 worse)
    named_passages: bool = True
    # C clipped to fit `context_chars` shows the generator each passage's sentences nearest
    # the question and the known facts (`excerpt`), not its opening: C held ~10 passages, so
    # each was cut to ~300 characters and the sentence with the answer was often gone
    answer_excerpts: bool = True
    # after each search, the unread document that the question, the passages of the known
    # facts or the search's best two name by title (the one the question ranks highest)
    # joins that search's passages (`marag.agents.search.linked`, as in UniRAG and mRAG): a
    # multi-hop question's second entity is named in the first hop's page, not in any query
    linked_docs: int = Field(default=1, ge=0, le=10)
    memory: bool = True
    gap_as_query: bool = True
    # the first agent's first search is the whole question (what a retrieve-then-read
    # baseline searches), without a planner call (ours;
    # the paper plans every query). With the default 1.5B model the first planned query was
    # the question verbatim in 11 of 30 held-out MuSiQue questions, and elsewhere often
    # carried a guess ("Alexander and the Terrible, ... Day by J.K. Rowling", "Harris W.
    # Fawell birth city, Texas, Harris County")
    question_first: bool = True
    agent_angles: bool = True
    temperature: float = 0.0
    seed: int | None = None
    generator: dict[str, Any] | None = Field(default=None, json_schema_extra=OPERATOR_ONLY)  # LLMConfig fields of the answering model (default: the strategy's)


def supported(fact: str, passage: str, question: str = "", share: float = 0.75) -> bool:
    """Nearly all of what the fact adds to the question (its content words the question
    does not have) occurs in its passage: a cheap check that the model did not invent it. A
    bridge fact joins the question's words to what one passage says ("... in the era of
    Haymo of Faversham was Latin", from a page that never names Haymo); a fact that only
    restates the question adds nothing and is not supported."""
    words = query_terms(fact) - query_terms(question)
    text = query_terms(passage)
    return bool(words) and len(words & text) / len(words) >= share


# A "fact" that says the answer is not there ("It is unknown where she grew up") restates
# the gap and adds a word, yet answers nothing.
_NO_ANSWER = re.compile(
    r"\b(?:unknown|unclear|no information|not (?:known|clear|mentioned|stated|given|specified|provided)"
    r"|(?:does|do|did) not (?:say|mention|state|specify))\b",
    re.IGNORECASE,
)


def leap_supported(fact: str, passage: str, known: str = "", share: float = 0.6) -> bool:
    """A fact that claims a gap's answer is backed as a whole by its passage and what is
    already known (the bridge a multi-hop answer rests on): most of its content words
    occur there, the gap's words included (60%: a passage words a relation its own way).
    "The last time the Olympics were held in the country that released Han Vodka was
    2018", from a page that never names the vodka and with nothing known, is a leap."""
    return supported(fact, f"{passage} {known}", share=share)


def answers(fact: str, gap: str, share: float = 0.8) -> bool:
    """The fact restates the gap (most of its content words) and adds something: the
    update found what the gap asked for, whether or not it said so. A fact saying the
    answer is not known answers nothing."""
    asked, said = query_terms(gap), query_terms(fact)
    if not asked or _NO_ANSWER.search(fact):
        return False
    return len(asked & said) / len(asked) >= share and bool(said - asked)


def grounded(terms: frozenset[str], gap: frozenset[str], known: frozenset[str]) -> float:
    """The share of a query's content words that its gap or a known fact gives; 0 for a
    query that shares no word with its gap (`query_relevance=grounded`)."""
    if not terms or not terms & gap:
        return 0.0
    return len(terms & (gap | known)) / len(terms)


def is_gap(text: str) -> bool:
    """A gap is something to find, in words: the 1.5B sometimes writes the number of a
    gap, or a scrap of a passage ("/70's", "/104"), where the text belongs; a gap like
    that would then be searched for and never close."""
    return re.search(r"[^\W\d_]{2,}", text) is not None


def _tightest(*limits: int | None) -> int | None:
    """The smallest of the character limits that are set (None: no limit)."""
    return min((n for n in limits if n), default=None)


def packed(hits: list[Hit], chars: int | None, about: str = "") -> list[tuple[Hit, Doc]]:
    """`hits` (most relevant first) as documents that fit `chars` characters together
    (`pack_texts`: all shown while they fit, else clipped to a common share; the least
    relevant left out when even 200 characters each would not fit), each beside its hit:
    a passage left out (or an empty one) must not shift the numbers the model answers
    with onto the wrong hit. With `about`, a clipped passage shows its sentences nearest
    that (`excerpt`) instead of its opening."""
    allowance = pack_texts([len(h.text) for h in hits], chars)
    return [(h, doc_from_hit(h, n, about=about)) for h, n in zip(hits, allowance) if n > 0]


@STRATEGIES.register("kair")
class KAIR(Strategy):
    name = "kair"
    paper = "Knowledge-Aware Iterative Retrieval for Multi-Agent Systems (2025)"
    calls = (5, 8)
    description = "Knowledge-aware iterative retrieval: known/required state, gap-driven queries, refined context, then a generator."
    Config = KAIRConfig
    agents = (QueryPlanner, ContextFilter, KnowledgeUpdater, Moderator, Answerer)

    def __init__(self, llm: LLM, retriever=None, config=None):
        super().__init__(llm, retriever, config)
        self.generator = make_llm(LLMConfig.model_validate(self.config.generator)) if self.config.generator else llm
        index = getattr(retriever, "index", None)
        self.retrieval = "given"
        if self.config.retrieval == "bm25" and index is not None and index.has("bm25"):
            self.retriever, self.retrieval = index.retriever("bm25"), "bm25"

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        cfg = self.config
        if cfg.agents > 1 and cfg.mode == "collaboration":
            final = await self._collaborate(question)
        else:
            final = await self._compete(question)
        known = [f.text for f in final.known]
        claims = [k for k in known if answers(k, question)] if cfg.drop_claims and final.context else []
        known = [k for k in known if k not in claims]
        asked = " ".join([question, *known])  # what the passages read should be nearest
        about = asked if cfg.answer_excerpts else ""
        context, by_name = await self._to_read(self.ranked(final), question, asked)
        pairs = packed(context, cfg.context_chars, about)
        shown, docs = [h for h, _ in pairs], [d for _, d in pairs]
        passages = [Passage(title=d.title, text=d.text) for d in docs]
        if cfg.known_first and known:  # also when C is empty: K is what was found
            passages.insert(0, Passage(title="What is known", text="\n".join(known)))
        closed_book = not passages  # nothing read: the answerer's own-knowledge prompt
        with grace():
            with step("generator", closed_book=closed_book) as s:
                out = await Answerer(cfg.style())(self.generator, AnswerInput(question=question, passages=passages), cfg.temperature, cfg.seed)
                s.outputs = {"answer": out.answer, "passages": [h.chunk_id for h in shown], "closed_book": closed_book, "claims_dropped": claims, "kept_by_name": by_name}
        with step("budget") as s:
            s.outputs = {
                "cycles": final.cycles, "known": len(final.known), "open_gaps": len(final.required),
                "context": len(final.context), "context_shown": len(shown), "closed_book": closed_book,
                "retriever": self.retrieval,
            }  # fmt: skip
        return out.answer, shown

    async def _to_read(self, context: list[Hit], question: str, asked: str) -> tuple[list[Hit], list[str]]:
        """The passages of C the generator reads: with `answer_passages`, those `asked`
        (the question and K) ranks highest (a remote engine keeps C's first), with
        `named_passages` also those the question names and their next hop; and the chunk
        ids kept only by name."""
        n = self.config.answer_passages
        if not n or len(context) <= n:
            return context, []
        if not self.config.named_passages:
            return await rank_within(self.retriever, context, asked, n, label="answer_passages"), []
        ranked = await rank_within(self.retriever, context, asked, None, label="answer_passages")
        chosen = with_named(ranked, question, n)
        top = {h.chunk_id for h in ranked[:n]}
        return chosen, [h.chunk_id for h in chosen if h.chunk_id not in top]

    @staticmethod
    def ranked(st: KnowledgeState) -> list[Hit]:
        """C most relevant first: the passages that support a known fact (in the order
        the facts were learned), then the others in the order kept."""
        sources = list(dict.fromkeys(f.source for f in st.known if f.source in st.context))
        return [st.context[c] for c in sources] + [h for c, h in st.context.items() if c not in sources]

    # -- one agent, or several competing --------------------------------------------------
    async def _compete(self, question: str) -> KnowledgeState:
        cfg = self.config
        states = [KnowledgeState(required=[question]) for _ in range(cfg.agents)]
        memories = [SearchMemory(self.search, unseen_only=cfg.memory) for _ in states]
        scores = [0] * len(states)
        for _ in range(cfg.max_steps):
            if budget_spent() or any(not s.required for s in states):
                break
            progress = await asyncio.gather(*(self._cycle(question, s, m, i) for i, (s, m) in enumerate(zip(states, memories))))
            if cfg.agents > 1:
                scores = await self._share_best_context(question, states)
            elif cfg.moderator and await self._sufficient(question, states[0]):
                break
            if not any(progress):
                break
        # the agent with the fewest open gaps; among equals, the one whose C scored best
        best = min(range(len(states)), key=lambda i: (len(states[i].required), -scores[i], -len(states[i].known), i))
        return states[best]

    async def _share_best_context(self, question: str, states: list[KnowledgeState]) -> list[int]:
        """The paper's competition (Eq. 6): the moderator scores each agent's refined
        context; the best one, if it reaches the threshold, becomes every agent's C.
        Known facts and open gaps stay each agent's own."""
        cfg = self.config
        scores = list(await asyncio.gather(*(self._score(question, s) for s in states)))
        best = max(range(len(states)), key=lambda i: (scores[i], -i))
        shared = scores[best] >= cfg.moderator_threshold
        if shared:
            for i, s in enumerate(states):
                if i != best:
                    s.context = dict(states[best].context)
        with step("round", winner=best) as r:
            r.outputs = {"scores": scores, "winner": best, "shared": shared, "open_gaps": [len(s.required) for s in states]}
        return scores

    # -- several agents on one blackboard -----------------------------------------------------
    async def _collaborate(self, question: str) -> KnowledgeState:
        cfg = self.config
        board = KnowledgeState(required=[question])
        memory = SearchMemory(self.search, unseen_only=cfg.memory)
        for _ in range(cfg.max_steps):
            if budget_spent() or not board.required:
                break
            gaps = board.required[: cfg.agents]  # the goal manager: one open gap per agent
            with step("goal_manager") as g:
                g.outputs = {"assignments": {str(i): gap for i, gap in enumerate(gaps)}}
            # the agents plan at once, then choose and search one after another in their
            # order: they share the query history and the search memory (which hands each
            # passage to the first search that finds it), so the order is fixed, not the
            # order in which their calls happen to finish
            plans = await asyncio.gather(*(self._candidates(question, board, i, gap) for i, gap in enumerate(gaps)))
            found = [await self._retrieve(question, self._choose(c, board, gap), board, memory, i) for i, (c, gap) in enumerate(zip(plans, gaps))]
            snapshot = board.model_copy(deep=True)
            updates = await asyncio.gather(*(self._extract(question, snapshot, query, hits, i) for i, (query, hits) in enumerate(found) if hits))
            known_before = len(board.known)
            progress = False
            for (query, hits), update in zip([f for f in found if f[1]], updates):
                progress |= self._apply(question, board, snapshot.required, hits, update)
            hits = list({h.chunk_id: h for _, hs in found for h in hs}.values())
            if hits:
                progress |= await self._refine(question, board, hits, 0, known_before)
            board.cycles += 1
            with step("state") as s:
                s.outputs = board.snapshot()
            if cfg.moderator and await self._sufficient(question, board):
                break
            if not progress and not any(q for q, _ in found):
                break
        return board

    # -- the cycle's parts ------------------------------------------------------------------
    async def _cycle(self, question: str, st: KnowledgeState, memory: SearchMemory, i: int) -> bool:
        query, hits = await self._plan_and_retrieve(question, st, memory, i, "")
        if query is None:
            return False
        update = await self._extract(question, st, query, hits, i)
        known_before = len(st.known)
        progress = self._apply(question, st, list(st.required), hits, update)
        progress |= await self._refine(question, st, hits, i, known_before)
        st.cycles += 1
        with step("state", by_agent=i) as s:
            s.outputs = st.snapshot()
        return progress or bool(hits)

    def _sampling(self, i: int) -> tuple[float, int | None]:
        cfg = self.config
        if i == 0:
            return cfg.temperature, cfg.seed
        return cfg.agent_temperature, (cfg.seed or 0) + i

    async def _plan_and_retrieve(self, question: str, st: KnowledgeState, memory: SearchMemory, i: int, focus: str):
        if self.config.question_first and i == 0 and not st.history:  # the question itself, no planner call
            query = " ".join(question.split())
            with step("query_choice") as s:
                s.outputs = {"rejected": [], "chosen": query, "rule": "question_first"}
            return await self._retrieve(question, query, st, memory, i)
        cands = await self._candidates(question, st, i, focus)
        return await self._retrieve(question, self._choose(cands, st, focus), st, memory, i)

    async def _candidates(self, question: str, st: KnowledgeState, i: int, focus: str) -> Candidates:
        cfg = self.config
        temperature, seed = self._sampling(i)
        members = cfg.agents if cfg.agent_angles else 1
        plan_in = PlanInput(
            question=question, known=st.known_lines(), required=st.required, history=st.history, focus=focus, member=i, members=members
        )
        return await QueryPlanner()(self.llm, plan_in, temperature, seed)

    async def _retrieve(
        self, question: str, query: str | None, st: KnowledgeState, memory: SearchMemory, i: int
    ) -> tuple[str | None, list[Hit]]:
        """The chosen query (None: no search) joins the history and is searched; with
        `linked_docs`, the document the question, the known facts' passages or the
        search's best two name (not read yet) follows the search's passages."""
        if query is None:
            return None, []
        st.history.append(query)
        with step("search", by_agent=i, query=query) as s:
            hits = (await memory.page(query, self.config.k)).hits
            s.outputs = {"chunk_ids": [h.chunk_id for h in hits]}
        if self.config.linked_docs and hits:
            sources = [memory.read[c].text for c in dict.fromkeys(f.source for f in st.known) if c in memory.read]
            texts = [question, *sources, *(h.text for h in hits[:2])]
            more = await linked_hits(self.retriever, question, texts, memory, self.config.linked_docs, query)
            st.linked += [h.chunk_id for h in more]
            hits += more
        return query, hits

    def _choose(self, cands: Candidates, st: KnowledgeState, focus: str) -> str | None:
        """The candidate with the best relevance - diversity_weight x redundancy. When
        every candidate repeats an earlier query, the open gap itself is tried as the
        query (`gap_as_query`); None when that repeats one too."""
        cfg = self.config
        scored, rejected = [], []
        gaps = [focus] if focus else st.required
        if cfg.query_relevance == "grounded":
            known_terms = frozenset().union(*(query_terms(f.text) for f in st.known))
            relevant = lambda terms, gap: grounded(terms, gap, known_terms)  # noqa: E731
        else:
            relevant = overlap
        options = [(clean_query(c.query), c.gap) for c in cands.candidates]
        if cfg.gap_as_query:
            options.append((clean_query(gaps[0]) if gaps else "", 1))
        for n, (q, gap) in enumerate(options):
            if not q or (n == len(cands.candidates) and scored):  # the gap itself only when nothing else is left
                continue
            terms = query_terms(q)
            redundancy = max((overlap(terms, query_terms(h)) for h in st.history), default=0.0)
            named = gaps[gap - 1] if 1 <= gap <= len(gaps) else None
            relevance = max((relevant(terms, query_terms(g)) for g in ([named] if named else gaps)), default=0.0)
            if redundancy >= cfg.redundancy_threshold:
                rejected.append({"query": q, "redundancy": round(redundancy, 3)})
                continue
            scored.append((relevance - cfg.diversity_weight * redundancy, -n, q))
        with step("query_choice") as s:
            s.outputs = {"rejected": rejected, "chosen": max(scored)[2] if scored else None}
            if rejected:
                s.status = "refused" if not scored else "ok"
        return max(scored)[2] if scored else None

    async def _extract(self, question: str, st: KnowledgeState, query: str, hits: list[Hit], i: int) -> Update:
        temperature, seed = self._sampling(i)
        cfg = self.config
        # with update_chars: the sentences nearest the query, the open gaps and the question
        about = " ".join([query, *st.required, question]) if cfg.update_chars else ""
        docs = [doc_from_hit(h, _tightest(cfg.update_chars, cfg.doc_chars), about=about) for h in hits]
        record_read(hits)
        return await KnowledgeUpdater()(
            self.llm, UpdateInput(question=question, known=st.known_lines(), required=st.required, passages=docs), temperature, seed
        )

    def _apply(self, question: str, st: KnowledgeState, gaps_then: list[str], hits: list[Hit], update: Update) -> bool:
        """Merge one knowledge update into a state; True if anything changed. `gaps_then`:
        the open gaps the update's numbers refer to. The gaps it names (and, with
        `close_answered`, those a new fact answers) close only when it added a new,
        supported fact: an update whose every fact was rejected (or already known) closes
        nothing."""
        known = {flattened(f.text) for f in st.known}
        # the passages by their titles' content words ("The Amri language" is the title
        # "Amri language"); the first passage of a title when two share it
        titles: dict[frozenset[str], Hit] = {}
        for h in hits:
            if t := query_terms(h.title):
                titles.setdefault(t, h)
        added, conflicts, unsupported, leaps, pointed = [], [], [], [], []
        claims = [question, *gaps_then] if self.config.leap_check else []
        for f in update.facts:
            if not 1 <= f.passage <= len(hits) or not f.text.strip():
                continue
            hit, text = hits[f.passage - 1], f.text
            if f.status != "conflict" and len(pointed) < self.config.title_facts and (titled := titles.get(query_terms(text))):
                # a title: the passage's own words stand for it
                hit = titled
                text = excerpt(hit.text, " ".join([question, *gaps_then]), self.config.title_fact_chars)
                pointed.append(text)
            page = f"{hit.title} {hit.text}"
            if f.status == "conflict":
                conflicts.append(text)
            elif flattened(text) in known:
                continue
            elif self.config.support_check and text not in pointed and (query_terms(text) in titles or not supported(text, page, question)):
                unsupported.append(text)  # invented, a restated question, or only a passage's title
            elif any(answers(text, g) for g in claims) and not leap_supported(text, page, " ".join(k.text for k in st.known)):
                leaps.append(text)  # an answer put in the question's words, from a page that does not say it
            else:
                st.known.append(Fact(text=text.strip(), source=hit.chunk_id))
                known.add(flattened(text))
                added.append(text)
        named = {gaps_then[n - 1] for n in update.closed if 1 <= n <= len(gaps_then)}
        # `close_answered`: also the gaps a new fact restates with the answer added
        # (not by a passage's words standing for its title: they restate the question because
        # the search found the page by them, and answer nothing by themselves)
        answered = {g for g in gaps_then if any(answers(f, g) for f in added if f not in pointed)} if self.config.close_answered else set()
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

    async def _refine(self, question: str, st: KnowledgeState, hits: list[Hit], i: int, known_before: int) -> bool:
        """Update C after a knowledge update: the filter role (the paper's contextual
        filtering), or with `context="cited"` without a call."""
        if self.config.context == "cited":
            return self._keep_cited(st, hits, i, known_before)
        return await self._filter(question, st, hits, i, refilter=len(st.known) > known_before)

    def _keep_cited(self, st: KnowledgeState, hits: list[Hit], i: int, known_before: int) -> bool:
        """C gains the passages the facts just learned cite, the `keep_top` best new
        passages of the search (a bridge page may state nothing the update picked up) and
        the documents joined by title link (`linked_docs`: the next hop, whether or not
        the update stated anything from it yet). Nothing leaves C, and no model reads the
        passages a second time."""
        cited = {f.source for f in st.known[known_before:]}
        new = [h for h in hits if h.chunk_id not in st.context]
        top = {h.chunk_id for h in new[: self.config.keep_top]} | set(st.linked)
        chosen = [h for h in new if h.chunk_id in cited] + [h for h in new if h.chunk_id in top and h.chunk_id not in cited]
        st.context.update((h.chunk_id, h) for h in chosen)
        with step("context_applied", by_agent=i) as s:
            s.outputs = {"refiltered": False, "kept": [h.chunk_id for h in chosen], "dropped": [], "context": list(st.context)}
        return bool(chosen)

    async def _filter(self, question: str, st: KnowledgeState, hits: list[Hit], i: int, refilter: bool) -> bool:
        """Update C from `hits`. `refilter` (K changed): C's passages are judged again
        beside the new ones, and C becomes what is kept (a passage that no longer fits
        `context_chars` beside the others leaves C); otherwise kept new passages are
        added to C."""
        temperature, seed = self._sampling(i)
        old = list(st.context.values()) if refilter else []
        new = [h for h in hits if h.chunk_id not in st.context]
        # most relevant first: passages that support a known fact (old or new), then the
        # rest of C, then the other new passages
        by_id = {h.chunk_id: h for h in old + new}
        sources = [c for c in dict.fromkeys(f.source for f in st.known) if c in by_id]
        shown = [by_id[c] for c in sources] + [h for h in old + new if h.chunk_id not in sources]
        if not shown:
            return False
        cfg = self.config
        # C keeps a new passage as every role reads it (`doc_chars`); the filter reads each
        # one clipped to `filter_chars`, all packed to fit the prompt
        fresh = {h.chunk_id for h in new}
        keeps = {h.chunk_id: h.model_copy(update={"text": clip(h.text, cfg.doc_chars)}) if h.chunk_id in fresh else h for h in shown}
        view = [h.model_copy(update={"text": clip(h.text, _tightest(cfg.filter_chars, cfg.doc_chars if h.chunk_id in fresh else None))}) for h in shown]
        pairs = packed(view, cfg.context_chars)
        shown, docs = [keeps[h.chunk_id] for h, _ in pairs], [d for _, d in pairs]
        f_in = FilterInput(
            question=question,
            known=st.known_lines(),
            passages=docs,
            supporting=[n for n, d in enumerate(docs, 1) if d.id in sources],
        )
        kept = await ContextFilter()(self.llm, f_in, temperature, seed)
        chosen = [shown[n - 1] for n in dict.fromkeys(kept.keep) if 1 <= n <= len(docs)]
        before = list(st.context)
        if refilter:
            st.context = {h.chunk_id: h for h in chosen}
        else:
            st.context.update((h.chunk_id, h) for h in chosen)
        with step("context_applied", by_agent=i) as s:
            s.outputs = {"refiltered": refilter, "kept": [h.chunk_id for h in chosen],
                         "dropped": [c for c in before if c not in st.context], "context": list(st.context)}  # fmt: skip
        return list(st.context) != before

    async def _score(self, question: str, st: KnowledgeState) -> int:
        """The moderator's 0-10 score of an agent's C (0 without a call when C is empty)."""
        docs = [d for _, d in packed(self.ranked(st), self.config.context_chars)]
        if not docs:
            return 0
        return (await Moderator()(self.llm, ModeratorInput(question=question, passages=docs), self.config.temperature, self.config.seed)).score

    async def _sufficient(self, question: str, st: KnowledgeState) -> bool:
        return await self._score(question, st) >= self.config.moderator_threshold


register_variant(KAIR, "kair_2", "KAIR with 2 competing agents.", agents=2, calls=(10, 16))
register_variant(KAIR, "kair_3", "KAIR with 3 competing agents.", agents=3, calls=(15, 24))
register_variant(KAIR, "kair_collab", "KAIR with 3 collaborating agents on one blackboard.", agents=3, mode="collaboration")
register_variant(KAIR, "kair_paper", "KAIR with only the paper's behaviour (paper=true: no support or leap check, answer type check, closing of answered gaps, known facts for the generator, claims left out, search memory, gap query, agent angles, C kept without the filter call, shortened reading, the generator's five best passages or excerpts, or linked documents; BM25 top 10).", paper=True)
