"""Agent-UniRAG (Pham et al. 2025): one ReAct agent with a planning module, a search
tool, an evidence reflector, a working memory and a search budget. This module is the
paper's loop; our small-model aids act where it calls `self.aids`
(`marag.strategies.unirag.aids`: none with `paper=true`).

Loop (`_react`): the planner writes a Thought and chooses `search` (one detailed query) or
`final_answer`; a search retrieves the top `k` documents (optionally BM25 candidates
re-ranked by embedding similarity, `rerank`); the reflector condenses them into short
evidence with source ids, or "No information found"; the (thought, action, evidence)
step joins the working memory. When the planner says it has the answer, the search
budget (`max_searches`; None: only the question's hard budget) is spent, or the
question's budget runs out, a separate final-answer step writes the answer from the
working memory only. The sources returned are the documents the evidence came from;
every document shown to the reflector counts as read (`Answer.read`). With `rerank`,
only the `k` documents shown count as read: the other candidates stay available to
later searches.

Ablations (registered as strategies): `unirag_no_reflector` (the raw documents, clipped
to `raw_doc_chars`, are the evidence), `unirag_no_planning` (all queries written first
from the question, searched and reflected, then one answer) and `unirag_1search`
(`max_searches=1`).
"""

from __future__ import annotations

from marag.agents.documents import doc_from_hit
from marag.agents.layout import clip
from marag.agents.queries import QUERY_MAX_CHARS
from marag.agents.unirag import (Evidence, FinalAnswer, MemoryStep, PlanInput, Planner, PlanStep, QueriesInput, QueryPlanner,
                                 ReflectInput, Reflector, SourcesAnswer, render_memory)  # fmt: skip
from marag.index.base import Hit
from marag.index.rerank import EmbeddingReranker
from marag.llm.budget import budget_spent, grace
from marag.strategies.base import STRATEGIES, FirstPass, Strategy, register_variant
from marag.strategies.unirag.aids import Aids
from marag.strategies.unirag.config import UniRAGConfig
from marag.strategies.unirag.state import Run
from marag.trace import record_read, step


@STRATEGIES.register("unirag")
class UniRAG(Strategy):
    name = "unirag"
    paper = "Pham et al. 2025 (Agent-UniRAG)"
    calls = (4, 8)
    description = "One ReAct agent: thought, search, evidence reflector, working memory, search budget (Pham et al. 2025)."
    Config = UniRAGConfig
    agents = (Planner, QueryPlanner, Reflector, FinalAnswer, SourcesAnswer)
    trains = (Planner, Reflector)  # the paper's trained roles

    def __init__(self, llm, retriever=None, config=None):
        super().__init__(llm, retriever, config)
        self.aids = Aids.of(self.config)

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        return await self._solve(question, None)

    async def solve_from(self, first: FirstPass) -> tuple[str, list[Hit]]:
        """Continue from a first pass (`auto`): its passages are the question's first
        search, taken into the working memory as the evidence floor, named and linked
        documents take them (no reflector call: they were read once already), and the
        planner goes on from there."""
        return await self._solve(first.question, first)

    async def _solve(self, question: str, first: FirstPass | None) -> tuple[str, list[Hit]]:
        cfg = self.config
        run = Run(question, self.aids.memory(self.search), cfg.raw_doc_chars)
        if first is not None and first.hits:
            run.steps.append(await self._from_first(run, first))
        if cfg.planning:
            await self._react(run)
        else:  # ablation
            await self._queries_up_front(run)
        with grace():  # the answer is written even when the question's budget is spent
            agent, inp = self.aids.final_answer(run)  # the paper's: from the working memory
            out = await self._call(agent, inp)
        with step("working_memory") as s:
            s.outputs = {"chain": render_memory(run.steps), "searches": sum(x.action == "search" for x in run.steps)}
        return out.answer, list(run.cited.values())

    async def _react(self, run: Run) -> None:
        """Thought -> search -> evidence, until the planner answers or the budget is spent."""
        cfg = self.config
        searches = len(run.steps)  # a first pass taken over is the first search
        if (query := self.aids.first_query(run)) and not budget_spent():
            run.steps.append(await self._search_step(run, PlanStep(thought="", action="search", query=query)))
            searches += 1
        while (cfg.max_searches is None or searches < cfg.max_searches) and not budget_spent():
            left = None if cfg.max_searches is None else cfg.max_searches - searches
            plan, query = await self._vetted(run, PlanInput(question=run.question, memory=run.steps, searches_left=left))
            if plan is None:  # a refused query ended the search
                return
            if plan.action == "final_answer":
                if not self.aids.search_first(run, searches):
                    run.steps.append(MemoryStep(thought=plan.thought, action="final_answer"))
                    return
                query = ""  # an answer before any search: the question is searched instead
            if not query:  # no usable query: search for the question itself
                query = clip(run.question, QUERY_MAX_CHARS)
            run.steps.append(await self._search_step(run, PlanStep(thought=plan.thought, action="search", query=query)))
            searches += 1

    async def _vetted(self, run: Run, plan_in: PlanInput) -> tuple[PlanStep | None, str]:
        """The planner's next step and its query; (None, "") when the aids refuse the query
        (`_refusal`) and the search ends, recorded as a guard step before the final answer."""
        plan = await self._plan(plan_in)
        query = self.aids.query(plan.query)
        why = self._refusal(run, plan, query)
        if why and self.aids.ask_again:
            plan = await self.aids.ask_again(self._plan, run, plan_in, why, query)
            query = self.aids.query(plan.query)
            why = (again := self._refusal(run, plan, query)) and f"{again} after asking again"
        if not why:
            return plan, query
        # nothing new is left to search for: the final answer follows
        with step("guard", rule=f"{why}: answer now", query=query) as g:
            g.status = "refused"
        run.steps.append(MemoryStep(thought=plan.thought, action="final_answer"))
        return None, ""

    def _refusal(self, run: Run, plan: PlanStep, query: str) -> str | None:
        """Why a search for `query` is not run (a repeat, or unrelated), or None."""
        if plan.action != "search" or not query:
            return None
        return self.aids.repeated(run, query) or self.aids.unrelated(run, query)

    async def _queries_up_front(self, run: Run) -> None:
        """The no-planning ablation: all queries written first, each searched and reflected."""
        cfg = self.config
        queries = await self._call(QueryPlanner(), QueriesInput(question=run.question, max_queries=cfg.max_queries))
        planned = [self.aids.query(q) for q in queries.queries][: cfg.max_searches]
        for i, q in enumerate(planned, 1):
            if budget_spent():
                break
            plan = PlanStep(thought=f"query {i} of {len(planned)}, written up front", action="search", query=q or clip(run.question, QUERY_MAX_CHARS))
            run.steps.append(await self._search_step(run, plan))

    async def _search_step(self, run: Run, plan: PlanStep) -> MemoryStep:
        cfg = self.config
        with step("search", query=plan.query) as s:
            if cfg.rerank:
                # look at `rerank_depth` candidates, show the best `k`: only those count as
                # read, so a later search can still return the others
                page = await run.memory.page(plan.query, cfg.rerank_depth, commit=False)
                hits = self._reranker().rerank(plan.query, page.hits, cfg.k)
                run.memory.mark_read(hits)
            else:
                hits = (await run.memory.page(plan.query, cfg.k)).hits
            s.outputs = {"chunk_ids": [h.chunk_id for h in hits]}
        record_read(hits)
        return await self._take(run, plan, hits)

    async def _from_first(self, run: Run, first: FirstPass) -> MemoryStep:
        """The first pass as the working memory's first search (for the question itself):
        its passages count as read and as that query's first page."""
        hits = list(first.hits)
        query = clip(first.question, QUERY_MAX_CHARS)
        with step("first_pass", query=query) as s:
            s.outputs = {"chunk_ids": [h.chunk_id for h in hits], "answer": first.answer}
        run.memory.mark_read(hits)  # (so that named documents are found among them)
        run.memory.advance(query, len(hits))
        taken = await self._take(run, PlanStep(thought="", action="search", query=query), hits, reflect=False)
        # the passages that did not enter the memory may still come back to a later
        # search: no reflector read them, so the agent has not seen them
        run.memory.forget([h for h in hits if h.chunk_id not in run.cited])
        return taken

    async def _take(self, run: Run, plan: PlanStep, hits: list[Hit], reflect: bool = True) -> MemoryStep:
        """A search's documents into the working memory: the reflector's evidence (none
        without `reflect`: a first pass taken over, whose passages were read by its own
        reader), else the evidence floor, then named and linked documents."""
        if not self.config.reflector:  # ablation: the raw documents are the evidence
            evidence = run.whole(hits)
        else:
            evidence = await self._reflect(run, plan.query, hits) if reflect else []
            floor = self.aids.floor if reflect else self.aids.unread_floor
            evidence = evidence or run.whole(floor(plan.query, hits))
            evidence += run.whole(self.aids.named(run, plan.query))
            evidence += run.whole(await self.aids.linked(self.retriever, run, plan.query))
        return MemoryStep(thought=plan.thought, action="search", query=plan.query, evidence=evidence)

    async def _reflect(self, run: Run, query: str, hits: list[Hit]) -> list[Evidence]:
        """The reflector's evidence from a search's documents, each with the document it
        came from, which joins the sources."""
        if not hits:
            return []
        about = self.aids.about(query, run.question)
        docs = [doc_from_hit(h, self.aids.doc_chars(i), about=about) for i, h in enumerate(hits)]
        r = await self._call(Reflector(), ReflectInput(question=run.question, query=query, documents=docs))
        evidence = []
        for f in r.evidence if r.found else []:
            if 1 <= f.doc <= len(hits) and f.text.strip():
                h = hits[f.doc - 1]
                evidence.append(Evidence(source=h.chunk_id, text=f.text.strip()))
                run.cited.setdefault(h.chunk_id, h)
        return evidence

    async def _plan(self, plan_in: PlanInput) -> PlanStep:
        return await self._call(Planner(self.config.terse), plan_in)

    def _reranker(self) -> EmbeddingReranker:
        if not hasattr(self, "_rr"):
            self._rr = EmbeddingReranker()
        return self._rr

    async def _call(self, agent, inp):
        temperature = self.role_setting(self.config.role_temperatures, agent.name, self.config.temperature)
        return await agent(self.llm, inp, temperature, self.config.seed)


# (its final answer reads the working memory, as the reflector's absence is measured by)
register_variant(UniRAG, "unirag_no_reflector", "UniRAG ablation: raw documents as evidence (no reflector).", reflector=False, answer_from="memory")
register_variant(UniRAG, "unirag_no_planning", "UniRAG ablation: all queries first, then one answer (no planning).", planning=False)
register_variant(UniRAG, "unirag_1search", "UniRAG ablation: at most one search.", max_searches=1)
register_variant(UniRAG, "unirag_paper", "UniRAG with only the paper's behaviour (paper=true: no search memory, query cleaning or search-first; k=12 re-ranked).", paper=True)
