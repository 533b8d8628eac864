"""Knowledge-aware iterative retrieval (KAIR; Song, "Knowledge-Aware Iterative Retrieval
for Multi-Agent Systems", 2025): retrieval first, its product a refined context, which a
separate generator then answers from. This module is the paper's loop; our small-model
aids act where it calls `self.aids` (`marag.strategies.kair.aids`: none with `paper=true`).

Each agent keeps a state: What is Known K (verified facts, each with its passage), What
is Required R (open gaps; at first the question itself), the query history, and the
refined context C (passages, verbatim). One cycle (`_cycle`):
1. query planning: the model proposes candidate queries, each for an open gap; the
   strategy scores them by relevance to an open gap minus `diversity_weight` times
   their similarity to earlier queries (content-word overlap, `marag.agents.search.memory`),
   rejects those above `redundancy_threshold`, and runs the best;
2. retrieval of the top `k` (the paper: BM25, top 10; ours: the run's retriever, top 5;
   `retrieval`, `k`);
3. knowledge update: facts the new passages state, each checked against what is known
   (new / known / conflict: conflicts are discarded and recorded); the gaps the update
   names close only when it added at least one new fact; new gaps open (not the title of
   a passage just read): `knowledge.merge`;
4. contextual filtering: the passages to keep, verbatim; when K changed, the passages
   already in C are filtered again with the new ones (C follows the knowledge):
   `context.contextual_filter`.
It repeats until Required is empty, the optional `moderator` scores C at or above
`moderator_threshold`, a cycle cannot find a non-redundant query, or `max_steps` cycles
ran. The generator reads C packed into `context_chars` characters, passages that
support a known fact first; with nothing to read it answers closed-book, which the
trace's generator step and the answer's details record (`closed_book`).

Several agents (`agents > 1`): in `competition` (the paper's Eq. 6) every agent runs a
cycle on its own state each round (agents after the first sample at
`agent_temperature`, so they differ); then the moderator scores each agent's C, and the
best-scored C, when it reaches `moderator_threshold`, becomes every agent's C. K and R
stay each agent's own. The run stops when any agent has no open gap. In
`collaboration` the agents share one blackboard: each round a goal manager assigns the
open gaps to the agents, which plan at once, then choose a query and search one after
another in their order (they share the query history and the search memory), then
extract in parallel; their updates are merged into the blackboard one after another,
then C is refined once.

Needed in every mode, not aids: `doc_chars` and `context_chars` (prompts must fit the
model's context), bounded strings in every output schema, each role's fallback, and new
gaps that are words (`is_gap`) and not the title of a passage just read (a search for a
page the agent has). Usage adds `cycles` (steps to converge) and `cost_units` (see
`Trace.totals`).
"""

from __future__ import annotations

import asyncio
from functools import partial

from marag.agents.answerer import Answerer, AnswerInput, Passage
from marag.agents.kair import (Candidates, ContextFilter, KnowledgeState, KnowledgeUpdater, Moderator, ModeratorInput,
                               PlanInput, QueryPlanner, Update, UpdateInput)  # fmt: skip
from marag.agents.queries import clean_query
from marag.agents.search.memory import SearchMemory, overlap, query_terms
from marag.index.base import Hit
from marag.llm.base import LLM
from marag.llm.budget import budget_spent, grace
from marag.llm.factory import LLMConfig, make_llm
from marag.strategies.base import STRATEGIES, Strategy, register_variant
from marag.strategies.kair.aids import Aids
from marag.strategies.kair.config import KAIRConfig
from marag.strategies.kair.context import contextual_filter, packed, ranked, sampling
from marag.strategies.kair.knowledge import merge
from marag.trace import record_read, step


@STRATEGIES.register("kair")
class KAIR(Strategy):
    name = "kair"
    paper = "Knowledge-Aware Iterative Retrieval for Multi-Agent Systems (2025)"
    calls = (5, 8)
    description = "Knowledge-aware iterative retrieval: known/required state, gap-driven queries, refined context, then a generator."
    Config = KAIRConfig
    agents = (QueryPlanner, ContextFilter, KnowledgeUpdater, Moderator, Answerer)
    ranked = staticmethod(ranked)

    def __init__(self, llm: LLM, retriever=None, config=None):
        super().__init__(llm, retriever, config)
        self.aids = Aids.of(self.config)
        self.generator = make_llm(LLMConfig.model_validate(self.config.generator)) if self.config.generator else llm
        index = getattr(retriever, "index", None)
        self.retrieval = "given"
        if self.config.retrieval == "bm25" and index is not None and index.has("bm25"):
            self.retriever, self.retrieval = index.retriever("bm25"), "bm25"

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        """Retrieval until nothing is required, then the generator on what was found."""
        cfg = self.config
        if cfg.agents > 1 and cfg.mode == "collaboration":
            final = await self._collaborate(question)
        else:
            final = await self._compete(question)
        return await self._generate(question, final)

    # -- one agent, or several competing --------------------------------------------------
    async def _compete(self, question: str) -> KnowledgeState:
        cfg = self.config
        states = [KnowledgeState(required=[question]) for _ in range(cfg.agents)]
        memories = [self.aids.memory(self.search) for _ in states]
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
        memory = self.aids.memory(self.search)
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

    # -- one cycle: plan, retrieve, update K and R, refine C ---------------------------------
    async def _cycle(self, question: str, st: KnowledgeState, memory: SearchMemory, i: int) -> bool:
        query = self.aids.first_query(question, st, i)
        if query is None:  # the paper: the planner proposes, the strategy chooses
            query = self._choose(await self._candidates(question, st, i, ""), st, "")
        query, hits = await self._retrieve(question, query, st, memory, i)
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

    async def _candidates(self, question: str, st: KnowledgeState, i: int, focus: str) -> Candidates:
        """Step 1: the planner's candidate queries, each for an open gap (`focus`: the one
        gap a collaborating agent was given)."""
        temperature, seed = sampling(self.config, i)
        plan_in = PlanInput(
            question=question, known=st.known_lines(), required=st.required, history=st.history, focus=focus, member=i,
            members=self.aids.members(),
        )  # fmt: skip
        return await QueryPlanner()(self.llm, plan_in, temperature, seed)

    def _choose(self, cands: Candidates, st: KnowledgeState, focus: str) -> str | None:
        """Step 1's choice: the candidate with the best relevance - diversity_weight x
        redundancy, those at `redundancy_threshold` rejected; when every one is, an aid may
        offer one more (`last_resort`); None: no query left."""
        gaps = [focus] if focus else st.required
        judge = partial(self._judge, st, gaps, self.aids.relevance(st))
        scored, rejected = judge([(clean_query(c.query), c.gap) for c in cands.candidates])
        if not scored:
            scored, more = judge(self.aids.last_resort(gaps))
            rejected += more
        chosen = max(scored)[2] if scored else None
        with step("query_choice") as s:
            s.outputs = {"rejected": rejected, "chosen": chosen}
            if rejected:
                s.status = "refused" if not scored else "ok"
        return chosen

    def _judge(self, st: KnowledgeState, gaps: list[str], relevant, options: list[tuple[str, int]]) -> tuple[list, list]:
        """The (score, -order, query) of each option that is not redundant, and the
        redundant ones; an option names its gap by number (another number: any gap)."""
        cfg = self.config
        scored, rejected = [], []
        for n, (q, gap) in enumerate(options):
            if not q:
                continue
            terms = query_terms(q)
            redundancy = max((overlap(terms, query_terms(h)) for h in st.history), default=0.0)
            if redundancy >= cfg.redundancy_threshold:
                rejected.append({"query": q, "redundancy": round(redundancy, 3)})
                continue
            named = gaps[gap - 1] if 1 <= gap <= len(gaps) else None
            relevance = max((relevant(terms, query_terms(g)) for g in ([named] if named else gaps)), default=0.0)
            scored.append((relevance - cfg.diversity_weight * redundancy, -n, q))
        return scored, rejected

    async def _retrieve(
        self, question: str, query: str | None, st: KnowledgeState, memory: SearchMemory, i: int
    ) -> tuple[str | None, list[Hit]]:
        """Step 2: the chosen query (None: no search) joins the history and is searched;
        an aid may join documents to what it found (`linked`)."""
        if query is None:
            return None, []
        st.history.append(query)
        with step("search", by_agent=i, query=query) as s:
            hits = (await memory.page(query, self.config.k)).hits
            s.outputs = {"chunk_ids": [h.chunk_id for h in hits]}
        hits += await self.aids.linked(self.retriever, question, st, memory, hits, query)
        return query, hits

    async def _extract(self, question: str, st: KnowledgeState, query: str, hits: list[Hit], i: int) -> Update:
        """Step 3: the knowledge update reads the new passages (as `update_view` shows them)."""
        temperature, seed = sampling(self.config, i)
        docs = self.aids.update_view(hits, query, st, question)
        record_read(hits)
        return await KnowledgeUpdater()(
            self.llm, UpdateInput(question=question, known=st.known_lines(), required=st.required, passages=docs), temperature, seed
        )

    def _apply(self, question: str, st: KnowledgeState, gaps_then: list[str], hits: list[Hit], update: Update) -> bool:
        """Step 3's merge into K and R (`knowledge.merge`); True if anything changed."""
        return merge(self.aids, question, st, gaps_then, hits, update)

    async def _refine(self, question: str, st: KnowledgeState, hits: list[Hit], i: int, known_before: int) -> bool:
        """Step 4: the filter role refines C (re-filtering it when K changed), unless an aid
        keeps C without that call (`context=cited`)."""
        if self.aids.keep_context:
            return self.aids.keep_context(st, hits, i, known_before)
        return await contextual_filter(self.llm, self.config, question, st, hits, i, len(st.known) > known_before, self.aids.filter_view)

    async def _score(self, question: str, st: KnowledgeState) -> int:
        """The moderator's 0-10 score of an agent's C (0 without a call when C is empty)."""
        docs = [d for _, d in packed(ranked(st), self.config.context_chars)]
        if not docs:
            return 0
        return (await Moderator()(self.llm, ModeratorInput(question=question, passages=docs), self.config.temperature, self.config.seed)).score

    async def _sufficient(self, question: str, st: KnowledgeState) -> bool:
        return await self._score(question, st) >= self.config.moderator_threshold

    # -- the generator ---------------------------------------------------------------------
    async def _generate(self, question: str, final: KnowledgeState) -> tuple[str, list[Hit]]:
        """The generator answers from C (most relevant first, packed into `context_chars`);
        aids choose which known facts and passages it reads and how a clipped one shows."""
        cfg = self.config
        known = [f.text for f in final.known]
        claims = self.aids.claims(question, known, final)
        known = [k for k in known if k not in claims]
        asked = " ".join([question, *known])  # what the passages read should be nearest
        context, by_name = await self.aids.to_read(self.retriever, ranked(final), question, asked)
        pairs = packed(context, cfg.context_chars, self.aids.excerpts_about(asked))
        shown, docs = [h for h, _ in pairs], [d for _, d in pairs]
        passages = [*self.aids.known(known), *(Passage(title=d.title, text=d.text) for d in docs)]
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


register_variant(KAIR, "kair_2", "KAIR with 2 competing agents.", agents=2, calls=(10, 16))
register_variant(KAIR, "kair_3", "KAIR with 3 competing agents.", agents=3, calls=(15, 24))
register_variant(KAIR, "kair_collab", "KAIR with 3 collaborating agents on one blackboard.", agents=3, mode="collaboration")
register_variant(KAIR, "kair_paper", "KAIR with only the paper's behaviour (paper=true: no support or leap check, answer type check, closing of answered gaps, known facts for the generator, claims left out, search memory, gap query, agent angles, C kept without the filter call, shortened reading, the generator's five best passages or excerpts, or linked documents; BM25 top 10).", paper=True)
