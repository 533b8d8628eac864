"""Knowledge-aware iterative retrieval (KAIR): retrieval first, its product a refined
context, which a separate generator then answers from.

Each agent keeps a state: What is Known (verified facts, each with its passage), What is
Required (open gaps; at first the question itself), the query history, and the refined
context (passages, verbatim). One cycle:
1. query planning: the model proposes candidate queries, each for an open gap; the
   strategy scores them by relevance to an open gap minus `diversity_weight` times
   their similarity to earlier queries (content-word overlap, `marag.index.memory`),
   rejects those above `redundancy_threshold`, and runs the best;
2. retrieval of the top `k` (with the search memory: documents not retrieved before);
3. knowledge update: facts the new passages state, each checked against what is known
   (new / known / conflict: conflicts are discarded and recorded) and against its own
   passage (`support_check`: a fact must share most of its content words with the
   passage it cites); the gaps they answer close, new gaps open;
4. contextual filtering: the passages to keep, verbatim.
It repeats until Required is empty, the optional `moderator` judges the known facts
sufficient, a cycle cannot find a non-redundant query, or `max_steps` cycles ran.

Several agents (`agents > 1`): in `competition` every agent runs a cycle on its own
state each round (agents after the first sample at `agent_temperature`, so they
differ); the agent with the fewest open gaps wins the round and its known facts, gaps
and context become every agent's; the run stops when any agent has no open gap. In
`collaboration` the agents share one blackboard: each round a goal manager assigns the
open gaps to the agents, which plan, retrieve and extract in parallel; their updates
are merged into the blackboard one after another.

Usage adds `cycles` (steps to converge) and `cost_units` (see `Trace.totals`).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Literal

from pydantic import Field

from marag.agents.answerer import Answerer, AnswerInput, Passage
from marag.agents.documents import doc_from_hit
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
from marag.agents.queries import clean_query
from marag.index.base import Hit
from marag.index.memory import SearchMemory, overlap, query_terms, repeated
from marag.llm.base import LLM
from marag.llm.budget import budget_spent, grace
from marag.llm.factory import LLMConfig, make_llm
from marag.strategies.base import STRATEGIES, AnsweringConfig, Strategy, register_variant
from marag.trace import record_read, step


class KAIRConfig(AnsweringConfig):
    agents: int = Field(default=1, ge=1, le=5)
    mode: Literal["competition", "collaboration"] = "competition"
    max_steps: int = Field(default=4, ge=1, le=12)  # cycles (rounds) per question
    k: int = Field(default=10, ge=1, le=20)  # passages per retrieval
    diversity_weight: float = Field(default=0.5, ge=0.0, le=2.0)
    redundancy_threshold: float = Field(default=0.8, gt=0.0, le=1.0)
    moderator: bool = False
    support_check: bool = True
    memory: bool = True  # retrieval returns only passages no earlier retrieval returned
    agent_temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    doc_chars: int | None = Field(default=700, ge=100)  # each passage as the roles read it
    temperature: float = 0.0
    seed: int | None = None
    generator: dict[str, Any] | None = None  # LLMConfig fields of the answering model (default: the strategy's)


def supported(fact: str, passage: str, share: float = 0.6) -> bool:
    """Most of the fact's content words occur in its passage (a cheap check that the
    model did not invent it)."""
    words = query_terms(fact)
    text = query_terms(passage)
    return bool(words) and len(words & text) / len(words) >= share


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


@STRATEGIES.register("kair")
class KAIR(Strategy):
    name = "kair"
    description = "Knowledge-aware iterative retrieval: known/required state, gap-driven queries, refined context, then a generator."
    Config = KAIRConfig

    def __init__(self, llm: LLM, retriever=None, config=None):
        super().__init__(llm, retriever, config)
        self.generator = make_llm(LLMConfig.model_validate(self.config.generator)) if self.config.generator else llm

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        cfg = self.config
        if cfg.agents > 1 and cfg.mode == "collaboration":
            final = await self._collaborate(question)
        else:
            final = await self._compete(question)
        passages = [Passage(title=h.title, text=h.text) for h in final.context.values()]
        with grace():
            with step("generator") as s:
                out = await Answerer(cfg.style())(self.generator, AnswerInput(question=question, passages=passages), cfg.temperature, cfg.seed)
                s.outputs = {"answer": out.answer, "passages": list(final.context)}
        with step("budget") as s:
            s.outputs = {"cycles": final.cycles, "known": len(final.known), "open_gaps": len(final.required), "context": len(final.context)}
        return out.answer, list(final.context.values())

    # -- one agent, or several competing --------------------------------------------------
    async def _compete(self, question: str) -> KnowledgeState:
        cfg = self.config
        states = [KnowledgeState(required=[question]) for _ in range(cfg.agents)]
        memories = [SearchMemory(self.search, unseen_only=cfg.memory) for _ in states]
        for _ in range(cfg.max_steps):
            if budget_spent() or any(not s.required for s in states) or await self._sufficient(question, states[0]):
                break
            progress = await asyncio.gather(*(self._cycle(question, s, m, i) for i, (s, m) in enumerate(zip(states, memories))))
            if cfg.agents > 1:
                best = min(range(len(states)), key=lambda i: (len(states[i].required), -len(states[i].known), i))
                with step("round", winner=best) as r:
                    r.outputs = {"open_gaps": [len(s.required) for s in states], "winner": best}
                for i, s in enumerate(states):  # the winner's knowledge becomes every agent's
                    if i != best:
                        w = states[best]
                        s.known, s.required, s.context = list(w.known), list(w.required), dict(w.context)
            if not any(progress):
                break
        return min(states, key=lambda s: (len(s.required), -len(s.known)))

    # -- several agents on one blackboard -----------------------------------------------------
    async def _collaborate(self, question: str) -> KnowledgeState:
        cfg = self.config
        board = KnowledgeState(required=[question])
        memory = SearchMemory(self.search, unseen_only=cfg.memory)
        for _ in range(cfg.max_steps):
            if budget_spent() or not board.required or await self._sufficient(question, board):
                break
            gaps = board.required[: cfg.agents]  # the goal manager: one open gap per agent
            with step("goal_manager") as g:
                g.outputs = {"assignments": {str(i): gap for i, gap in enumerate(gaps)}}
            found = await asyncio.gather(*(self._plan_and_retrieve(question, board, memory, i, gap) for i, gap in enumerate(gaps)))
            snapshot = board.model_copy(deep=True)
            updates = await asyncio.gather(*(self._extract(question, snapshot, hits, i) for i, (_, hits) in enumerate(found) if hits))
            progress = False
            for (query, hits), update in zip([f for f in found if f[1]], updates):
                progress |= self._apply(board, snapshot.required, hits, update)
            for i, (_, hits) in enumerate(found):
                if hits:
                    progress |= await self._filter(question, board, hits, i)
            board.cycles += 1
            with step("state") as s:
                s.outputs = board.snapshot()
            if not progress and not any(q for q, _ in found):
                break
        return board

    # -- the cycle's parts ------------------------------------------------------------------
    async def _cycle(self, question: str, st: KnowledgeState, memory: SearchMemory, i: int) -> bool:
        query, hits = await self._plan_and_retrieve(question, st, memory, i, "")
        if query is None:
            return False
        update = await self._extract(question, st, hits, i)
        progress = self._apply(st, list(st.required), hits, update)
        progress |= await self._filter(question, st, hits, i)
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
        cfg = self.config
        temperature, seed = self._sampling(i)
        plan_in = PlanInput(
            question=question, known=st.known_lines(), required=st.required, history=st.history, focus=focus, member=i, members=cfg.agents
        )
        cands = await QueryPlanner()(self.llm, plan_in, temperature, seed)
        query = self._choose(cands, st, focus)
        if query is None:
            return None, []
        st.history.append(query)
        with step("search", by_agent=i, query=query) as s:
            hits = (await memory.page(query, cfg.k)).hits
            s.outputs = {"chunk_ids": [h.chunk_id for h in hits]}
        return query, hits

    def _choose(self, cands: Candidates, st: KnowledgeState, focus: str) -> str | None:
        """The candidate with the best relevance - diversity_weight x redundancy. When
        every candidate repeats an earlier query, the open gap itself is tried as the
        query; None when that repeats one too."""
        cfg = self.config
        scored, rejected = [], []
        gaps = [focus] if focus else st.required
        options = [(clean_query(c.query), c.gap) for c in cands.candidates]
        fallback = (clean_query(gaps[0]) if gaps else "", 1)
        for n, (q, gap) in enumerate(options + [fallback]):
            if not q or (n == len(options) and scored):  # the gap itself only when nothing else is left
                continue
            terms = query_terms(q)
            redundancy = max((overlap(terms, query_terms(h)) for h in st.history), default=0.0)
            named = gaps[gap - 1] if 1 <= gap <= len(gaps) else None
            relevance = overlap(terms, query_terms(named)) if named else max((overlap(terms, query_terms(g)) for g in gaps), default=0.0)
            if redundancy >= cfg.redundancy_threshold:
                rejected.append({"query": q, "redundancy": round(redundancy, 3)})
                continue
            scored.append((relevance - cfg.diversity_weight * redundancy, -n, q))
        with step("query_choice") as s:
            s.outputs = {"rejected": rejected, "chosen": max(scored)[2] if scored else None}
            if rejected:
                s.status = "refused" if not scored else "ok"
        return max(scored)[2] if scored else None

    async def _extract(self, question: str, st: KnowledgeState, hits: list[Hit], i: int) -> Update:
        temperature, seed = self._sampling(i)
        docs = [doc_from_hit(h, self.config.doc_chars) for h in hits]
        record_read(hits)
        return await KnowledgeUpdater()(
            self.llm, UpdateInput(question=question, known=st.known_lines(), required=st.required, passages=docs), temperature, seed
        )

    def _apply(self, st: KnowledgeState, gaps_then: list[str], hits: list[Hit], update: Update) -> bool:
        """Merge one knowledge update into a state; True if anything changed. `gaps_then`:
        the open gaps the update's numbers refer to."""
        known = {_norm(f.text) for f in st.known}
        added, conflicts, unsupported = [], [], []
        for f in update.facts:
            if not 1 <= f.passage <= len(hits) or not f.text.strip():
                continue
            hit = hits[f.passage - 1]
            if f.status == "conflict":
                conflicts.append(f.text)
            elif _norm(f.text) in known:
                continue
            elif self.config.support_check and not supported(f.text, f"{hit.title} {hit.text}"):
                unsupported.append(f.text)
            else:
                st.known.append(Fact(text=f.text.strip(), source=hit.chunk_id))
                known.add(_norm(f.text))
                added.append(f.text)
        closed = {gaps_then[n - 1] for n in update.closed if 1 <= n <= len(gaps_then)} if added or st.known else set()
        before = list(st.required)
        st.required = [g for g in st.required if g not in closed]
        for gap in update.new_gaps:
            gap = " ".join(gap.split())
            if gap and _norm(gap) not in known and repeated(gap, st.required) is None:
                st.required.append(gap)
        with step("knowledge_applied") as s:
            s.outputs = {"added": added, "discarded_conflicts": conflicts, "discarded_unsupported": unsupported,
                         "closed": sorted(closed), "required": list(st.required)}  # fmt: skip
        return bool(added) or st.required != before

    async def _filter(self, question: str, st: KnowledgeState, hits: list[Hit], i: int) -> bool:
        temperature, seed = self._sampling(i)
        sources = {f.source for f in st.known}
        f_in = FilterInput(
            question=question,
            known=st.known_lines(),
            passages=[doc_from_hit(h, self.config.doc_chars) for h in hits],
            supporting=[n for n, h in enumerate(hits, 1) if h.chunk_id in sources],
        )
        kept = await ContextFilter()(self.llm, f_in, temperature, seed)
        new = [hits[n - 1] for n in kept.keep if 1 <= n <= len(hits) and hits[n - 1].chunk_id not in st.context]
        st.context.update((h.chunk_id, h) for h in new)
        return bool(new)

    async def _sufficient(self, question: str, st: KnowledgeState) -> bool:
        if not self.config.moderator or not st.known:
            return False
        v = await Moderator()(self.llm, ModeratorInput(question=question, known=st.known_lines(), required=st.required), self.config.temperature, self.config.seed)
        return v.sufficient


register_variant(KAIR, "kair_2", "KAIR with 2 competing agents.", agents=2)
register_variant(KAIR, "kair_3", "KAIR with 3 competing agents.", agents=3)
register_variant(KAIR, "kair_collab", "KAIR with 3 collaborating agents on one blackboard.", agents=3, mode="collaboration")
