"""RopMura (Wu et al., "Talk to Right Specialists"): knowledge agents that each own one
collection of the index, a router that invites the right ones by their knowledge
boundaries, and a planner for multi-hop questions.

Knowledge agents: one per collection (the index's `collection_field`, or topics made by
`marag index --split kmeans:N`). Each publishes only its knowledge boundary: its chunks'
vectors clustered by complete linkage into floor(sqrt(m)) clusters, as unit centroids
(`marag.index.cluster.boundary`; large collections through a sample). Asked a question,
an agent retrieves `pieces` chunks from its own collection (the index's default
retriever, BM25 + dense fused), re-ranks them by embedding similarity to the top
`rerank_to`, and answers with an analysis quoting them and a one-sentence answer, or
"I don't know". Nothing else leaves it.

Router: embeds the (sub)question, takes the `top_centroids` most similar centroids over
all agents and invites their owners (at most `max_agents`, best first); grades each
response (reliable / conjecture / unhelpful; a "don't know" is unhelpful without asking
the model) and answers from the reliable ones, or from its own knowledge when none is.

Planner (`planning="adaptive"`): rounds of splitter -> selector -> router -> judger, up
to `max_rounds`, then the defender answers from the (sub-question, answer) records.
Variants, registered as strategies: `ropmura_route` (no planner: the question routed
once), `ropmura_all_agents` (every agent invited), `ropmura_raw_knowledge` (agents send
their passages and the router answers from them), and the planning baselines
`ropmura_one_shot` (one split, every sub-question answered independently),
`ropmura_presplit` (one split, answered in order, each polished with the answers so
far) and `ropmura_greedy` (one new sub-question per round, no selection, no judger).

Sources are the re-ranked pieces of the agents that gave an answer. The answer's
details name the invited collections and the useful agents (graded reliable), read by
the `agent_answerable` and `agent_useful` metrics.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import numpy as np
from pydantic import Field

from marag.agents.documents import doc_from_hit
from marag.agents.ropmura import (
    DONT_KNOW,
    DefendInput,
    Defender,
    GradeInput,
    Grader,
    JudgeInput,
    Judger,
    KnowledgeAgent,
    KnowledgeInput,
    Record,
    Response,
    RouterAnswer,
    RouterInput,
    SelectInput,
    Selector,
    SplitInput,
    Splitter,
)
from marag.errors import MaragError
from marag.index.base import Hit
from marag.index.cluster import boundary
from marag.index.embed import similarity_to
from marag.index.memory import repeated
from marag.index.rerank import EmbeddingReranker
from marag.llm.budget import budget_spent, grace
from marag.strategies.base import STRATEGIES, AnsweringConfig, Strategy, register_variant
from marag.trace import step

Planning = Literal["adaptive", "none", "one_shot", "presplit", "greedy"]


class RopMuraConfig(AnsweringConfig):
    planning: Planning = "adaptive"
    routing: Literal["centroids", "all"] = "centroids"
    raw_knowledge: bool = False
    top_centroids: int = Field(default=10, ge=1, le=200)
    max_agents: int = Field(default=5, ge=1, le=50)
    pieces: int = Field(default=20, ge=1, le=100)
    rerank_to: int = Field(default=5, ge=1, le=20)
    max_rounds: int = Field(default=3, ge=1, le=8)
    doc_chars: int | None = Field(default=600, ge=100)
    boundary_max_exact: int = Field(default=2000, ge=10)  # complete linkage on at most this many chunks
    temperature: float = 0.0
    seed: int | None = None


class _Round:
    def __init__(self) -> None:
        self.invited: list[str] = []
        self.useful: list[str] = []
        self.sources: dict[str, Hit] = {}


@STRATEGIES.register("ropmura")
class RopMura(Strategy):
    name = "ropmura"
    description = "Knowledge agents over separate collections, centroid routing, graded answers, multi-hop planner (Wu et al.)."
    Config = RopMuraConfig

    def __init__(self, llm, retriever=None, config=None):
        super().__init__(llm, retriever, config)
        self.index = getattr(retriever, "index", None)
        names = self.index.collections() if self.index is not None else []
        if not names:
            raise MaragError(
                "ropmura needs an index split into collections (one knowledge agent each)",
                hint="build it with `marag index DOCS --out IDX --split kmeans:8` (or --collection-field FIELD); "
                "in `marag eval` pass --split kmeans:8",
            )
        if not self.index.has("dense"):
            raise MaragError("ropmura routes by embeddings: the index needs its dense part", hint="rebuild with --retrievers bm25,dense")
        self.collections = names
        self._boundaries: tuple[np.ndarray, np.ndarray] | None = None  # (owner of each centroid, centroids)
        self._lock = asyncio.Lock()
        self._reranker: EmbeddingReranker | None = None

    # -- knowledge boundaries ------------------------------------------------------------------
    async def boundaries(self) -> tuple[np.ndarray, np.ndarray]:
        async with self._lock:
            if self._boundaries is None:
                self._boundaries = await asyncio.to_thread(self._compute_boundaries)
        return self._boundaries

    def _compute_boundaries(self) -> tuple[np.ndarray, np.ndarray]:
        owners, parts = [], []
        for i, name in enumerate(self.collections):
            vectors = self.index.retriever("dense", collection=name).chunk_vectors()
            centroids, _ = boundary(vectors, max_exact=self.config.boundary_max_exact, seed=0)
            owners += [i] * len(centroids)
            parts.append(centroids)
        return np.array(owners, dtype=np.int64), np.concatenate(parts).astype(np.float32)

    def _invite(self, question: str, owners: np.ndarray, centroids: np.ndarray) -> list[tuple[str, float]]:
        cfg = self.config
        if cfg.routing == "all":
            return [(name, 1.0) for name in self.collections]
        sims = similarity_to(self.index.retriever("dense").embedder, question, centroids)
        top = np.argsort(-sims, kind="stable")[: cfg.top_centroids]
        invited: dict[str, float] = {}
        for c in top.tolist():  # owners of the best centroids, best first
            name = self.collections[int(owners[c])]
            if name not in invited and len(invited) < cfg.max_agents:
                invited[name] = round(float(sims[c]), 4)
        return list(invited.items())

    # -- one routed question -------------------------------------------------------------------
    async def route(self, question: str, rnd: _Round) -> str:
        cfg = self.config
        owners, centroids = await self.boundaries()
        with step("router", question=question) as s:
            invited = self._invite(question, owners, centroids)
            s.outputs = {"invited": [n for n, _ in invited], "similarity": [x for _, x in invited]}
        rnd.invited += [n for n, _ in invited if n not in rnd.invited]
        replies = await asyncio.gather(*(self._ask(name, question) for name, _ in invited))
        if cfg.raw_knowledge:
            passages = [f"{h.title}\n{doc_from_hit(h, cfg.doc_chars).text}" for _, hits in replies for h in hits]
            for _, hits in replies:
                rnd.sources.update((h.chunk_id, h) for h in hits)
            out = await self._call(RouterAnswer(cfg.style()), RouterInput(question=question, passages=passages))
            return out.answer
        responses = [r for r, _ in replies]
        answered = [i for i, r in enumerate(responses) if DONT_KNOW.lower() not in r.answer.lower()]
        grades = ["unhelpful"] * len(responses)
        if answered:
            graded = await self._call(Grader(len(answered)), GradeInput(question=question, responses=[responses[i] for i in answered]))
            for i, g in zip(answered, graded.grades):
                grades[i] = g
        with step("router.grades") as s:
            s.outputs = {r.agent: g for r, g in zip(responses, grades)}
        reliable = [r for r, g in zip(responses, grades) if g == "reliable"]
        rnd.useful += [r.agent for r in reliable if r.agent not in rnd.useful]
        for i in answered:
            rnd.sources.update((h.chunk_id, h) for h in replies[i][1])
        out = await self._call(RouterAnswer(cfg.style()), RouterInput(question=question, responses=reliable))
        return out.answer

    async def _ask(self, name: str, question: str) -> tuple[Response, list[Hit]]:
        cfg = self.config
        with step("knowledge_agent", collection=name, question=question) as s:
            retriever = self.index.retriever(None, collection=name)
            found = await asyncio.to_thread(retriever.search, question, cfg.pieces)
            hits = await asyncio.to_thread(self._rerank, question, found)
            s.outputs = {"chunk_ids": [h.chunk_id for h in hits]}
            if cfg.raw_knowledge:
                return Response(agent=name, analysis="", answer=""), hits
            docs = [doc_from_hit(h, cfg.doc_chars) for h in hits]
            reply = await self._call(KnowledgeAgent(), KnowledgeInput(question=question, collection=name, documents=docs))
            s.outputs |= {"answer": reply.answer}
        return Response(agent=name, analysis=reply.analysis, answer=reply.answer), hits

    def _rerank(self, question: str, hits: list[Hit]) -> list[Hit]:
        if self._reranker is None:
            self._reranker = EmbeddingReranker(self.index.retriever("dense").embedder)
        return self._reranker.rerank(question, hits, self.config.rerank_to)

    # -- the planner -----------------------------------------------------------------------------
    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        cfg = self.config
        rnd = _Round()
        records: list[Record] = []
        if cfg.planning == "none":
            answer = await self.route(question, rnd)
        else:
            await getattr(self, f"_plan_{cfg.planning}")(question, records, rnd)
            with grace():
                answer = (await self._call(Defender(cfg.style()), DefendInput(question=question, records=records))).answer
        with step("budget") as s:
            s.outputs = {
                "rounds": len(records) or 1,
                "agents_invited": len(rnd.invited),
                "agents_useful": len(rnd.useful),
                "invited_collections": rnd.invited,
                "useful_collections": rnd.useful,
            }
        return answer, list(rnd.sources.values())

    async def _plan_adaptive(self, question: str, records: list[Record], rnd: _Round) -> None:
        for _ in range(self.config.max_rounds):
            if budget_spent():
                return
            split = await self._call(Splitter(), SplitInput(question=question, records=records))
            sub = await self._select(question, split.questions, records)
            records.append(Record(question=sub, answer=await self.route(sub, rnd)))
            verdict = await self._call(Judger(), JudgeInput(question=question, records=records))
            if verdict.answerable:
                return

    async def _plan_greedy(self, question: str, records: list[Record], rnd: _Round) -> None:
        for _ in range(self.config.max_rounds):
            if budget_spent():
                return
            split = await self._call(Splitter(), SplitInput(question=question, records=records))
            new = [q for q in split.questions if self._new(q, records)]
            if not new:
                return
            records.append(Record(question=new[0], answer=await self.route(new[0], rnd)))

    async def _plan_one_shot(self, question: str, records: list[Record], rnd: _Round) -> None:
        split = await self._call(Splitter(), SplitInput(question=question))
        subs = split.questions[: self.config.max_rounds]
        answers = await asyncio.gather(*(self.route(q, rnd) for q in subs))
        records += [Record(question=q, answer=a) for q, a in zip(subs, answers)]

    async def _plan_presplit(self, question: str, records: list[Record], rnd: _Round) -> None:
        split = await self._call(Splitter(), SplitInput(question=question))
        for q in split.questions[: self.config.max_rounds]:
            if budget_spent():
                return
            sub = (await self._call(Selector(), SelectInput(question=question, candidates=[q], records=records))).question if records else q
            records.append(Record(question=sub or q, answer=await self.route(sub or q, rnd)))

    async def _select(self, question: str, candidates: list[str], records: list[Record]) -> str:
        """The selector's choice, if it is new; else the first new candidate; else the
        selector's polished first candidate."""
        sel = await self._call(Selector(), SelectInput(question=question, candidates=candidates, records=records))
        chosen = sel.question.strip() or candidates[min(sel.choice, len(candidates)) - 1]
        if self._new(chosen, records):
            return chosen
        return next((c for c in candidates if self._new(c, records)), chosen)

    @staticmethod
    def _new(sub: str, records: list[Record]) -> bool:
        return repeated(sub, [r.question for r in records]) is None

    async def _call(self, agent, inp) -> Any:
        return await agent(self.llm, inp, self.config.temperature, self.config.seed)


register_variant(RopMura, "ropmura_route", "RopMura without the planner: the question routed once.", planning="none")
register_variant(RopMura, "ropmura_all_agents", "RopMura without routing: every knowledge agent is invited.", routing="all")
register_variant(RopMura, "ropmura_raw_knowledge", "RopMura ablation: agents send raw passages; the router answers.", raw_knowledge=True)
register_variant(RopMura, "ropmura_one_shot", "RopMura planning baseline: one split, sub-questions answered independently.", planning="one_shot")
register_variant(RopMura, "ropmura_presplit", "RopMura planning baseline: one split, answered in order.", planning="presplit")
register_variant(RopMura, "ropmura_greedy", "RopMura planning baseline: one new sub-question per round, no judger.", planning="greedy")
