"""RopMura (Wu et al., "Talk to Right Specialists: Routing and Planning in Multi-agent
System for Question Answering", 2025): knowledge agents that each own one collection of
the index, a router that invites the right ones by their knowledge boundaries, and a
planner for multi-hop questions.

Knowledge agents: one per collection (the index's `collection_field`, or topics made by
`marag index --split kmeans:N`). Each publishes only its knowledge boundary: its chunks'
vectors clustered by complete linkage into floor(sqrt(m)) clusters, as unit centroids
(`marag.index.cluster.boundary`; large collections through a sample). Asked a question,
an agent retrieves `pieces` chunks from its own collection (the index's default
retriever, BM25 + dense fused), re-ranks them by embedding similarity to the top
`rerank_to` (the paper: 20, 50 or 100 pieces re-ranked to 5, 10 or 20), and answers
with an analysis quoting them (up to about ten sentences) and a one-sentence answer, or
"I don't know". Nothing else leaves it.

Router: embeds the (sub)question, takes the `top_centroids` most similar centroids over
all agents and invites their owners (at most `max_agents`, best first); then, in one
model call with the conversation so far (the planner's earlier rounds), grades every
response (reliable / conjecture / unhelpful) and answers from the reliable ones, or
from its own knowledge when none is. The analyses are packed into `responses_chars`.

Planner (`planning="adaptive"`): rounds of splitter -> selector -> router -> judger, up
to `max_rounds`, then the defender answers from the (sub-question, answer) records (the
paper) or, by default, from the pieces the agents it did not grade unhelpful read
(`answer_from`, ours: "sources", or "both" with the records).
Variants, registered as strategies: `ropmura_route` and `ropmura_one_shot` (no planner:
the original question routed once, the paper's single-hop row and its one-shot
planning baseline), `ropmura_all_agents` (every agent invited) and
`ropmura_raw_knowledge` (agents send their passages and the router answers from them),
both single-hop rows without the planner; the planning baselines `ropmura_presplit` (one
split, answered in order, each sub-question polished with the answers so far) and
`ropmura_greedy` (one new sub-question per round, no selection, no judger); and the
single-agent rows `ropmura_single_one_shot`, `ropmura_single_presplit`,
`ropmura_single_greedy` (`routing="single"`: one knowledge agent holding the whole
corpus; no collections needed).

Our additions (each off with `paper=true`, `ropmura_paper`): `max_agents` (a cap on the
invited owners; the paper invites every owner of the top centroids) and `repeat_check`
(a sub-question that repeats an earlier one, by content words, is replaced by the first
new candidate, and planning stops when the splitter has nothing new) and `answer_from`
(the defender reads passages, not only the router's answers). Needed in
every mode, not additions: `doc_chars` and `responses_chars` (prompts must fit the
model's context), the sampled linkage above `boundary_max_exact` chunks, each role's
fallback.

Sources are the re-ranked pieces of the agents whose reply was not graded unhelpful
(all agents' pieces with raw knowledge). The answer's details name the invited
collections and the ones graded reliable; the `agent_answerable` and `agent_useful`
metrics compare the invited collections with those holding the gold documents.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from marag.agents.answerer import Passage
from marag.agents.documents import doc_from_hit, pack_texts
from marag.agents.layout import clip
from marag.agents.ropmura import (
    DefendInput,
    Defender,
    JudgeInput,
    Judger,
    KnowledgeAgent,
    KnowledgeInput,
    Record,
    Response,
    Router,
    RouterInput,
    SelectInput,
    Selector,
    SplitInput,
    Splitter,
)
from marag.agents.search.memory import repeated
from marag.errors import MaragError
from marag.index.base import Hit
from marag.index.cluster import boundary
from marag.index.embed import similarity_to
from marag.index.rerank import EmbeddingReranker
from marag.llm.budget import budget_spent, grace
from marag.strategies.base import ANSWER_PAPER_SETTINGS, STRATEGIES, AnsweringConfig, PaperSwitch, Strategy, register_variant
from marag.trace import record_read, step

Planning = Literal["adaptive", "none", "presplit", "greedy"]
WHOLE_CORPUS = "(whole corpus)"  # the one knowledge agent of routing="single"

# What `paper=True` sets: every addition of ours off (module docstring).
PAPER_SETTINGS: dict[str, Any] = {**ANSWER_PAPER_SETTINGS, "max_agents": None, "repeat_check": False, "answer_from": "records"}
GRADE_ORDER = {"reliable": 0, "conjecture": 1}  # whose pieces the defender reads first (unhelpful: none)


class RopMuraConfig(PaperSwitch, AnsweringConfig):
    paper_settings: ClassVar[dict[str, Any]] = PAPER_SETTINGS
    planning: Planning = "adaptive"
    # centroids: the paper's router; all: every agent invited; single: one agent holding the whole corpus
    routing: Literal["centroids", "all", "single"] = "centroids"
    raw_knowledge: bool = False
    top_centroids: int = Field(default=10, ge=1, le=200)  # ours (the paper: the top-k centroids)
    pieces: int = Field(default=20, ge=1, le=100)  # the paper: 20, 50 or 100
    rerank_to: int = Field(default=5, ge=1, le=20)  # the paper: 5, 10 or 20
    max_rounds: int = Field(default=3, ge=1, le=8)  # ours
    # -- needed in every mode: prompts must fit the model's context --
    doc_chars: int | None = Field(default=600, ge=100)  # each piece as its agent reads it
    responses_chars: int | None = Field(default=6000, ge=200)  # the agents' analyses, packed, as the router reads them
    boundary_max_exact: int = Field(default=2000, ge=10)  # complete linkage on at most this many chunks
    paper: bool = False  # only the paper's behaviour: PAPER_SETTINGS
    # -- our additions (module docstring) --
    max_agents: int | None = Field(default=5, ge=1, le=50)
    repeat_check: bool = True
    # what the defender reads: the records (the paper), the pieces the agents graded
    # reliable or conjecture read (`answer_passages` of them: each piece's rank within its
    # agent first, then reliable before conjecture, then round and agent order), or both
    answer_from: Literal["records", "sources", "both"] = "sources"
    answer_passages: int = Field(default=4, ge=1, le=20)
    temperature: float = 0.0
    seed: int | None = None


class _Round:
    def __init__(self) -> None:
        self.invited: list[str] = []
        self.reliable: list[str] = []
        self.sources: dict[str, Hit] = {}
        self.ranked: list[tuple[tuple[int, int, int, int], Hit]] = []  # (rank, grade, round, agent), the piece

    def keep(self, hits: list[Hit], grade: int, round_no: int, agent: int) -> None:
        """An agent's re-ranked pieces become sources, and candidates for the defender."""
        self.sources.update((h.chunk_id, h) for h in hits)
        self.ranked += [((rank, grade, round_no, agent), h) for rank, h in enumerate(hits)]

    def passages(self, n: int) -> list[Hit]:
        """The `n` pieces the defender reads (`answer_from`), each chunk once."""
        seen: dict[str, Hit] = {}
        for _, h in sorted(self.ranked, key=lambda x: x[0]):
            seen.setdefault(h.chunk_id, h)
        return list(seen.values())[:n]


@STRATEGIES.register("ropmura")
class RopMura(Strategy):
    name = "ropmura"
    paper = "Wu et al. (RopMura, Talk to Right Specialists)"
    calls = (5, 11)
    description = "Knowledge agents over separate collections, centroid routing, graded answers, multi-hop planner (Wu et al.)."
    Config = RopMuraConfig
    agents = (Splitter, Selector, Judger, KnowledgeAgent, Router, Defender)

    def __init__(self, llm, retriever=None, config=None):
        super().__init__(llm, retriever, config)
        self.index = getattr(retriever, "index", None)
        single = self.config.routing == "single"
        names = self.index.collections() if self.index is not None else []
        if self.index is None:
            raise MaragError(
                "ropmura needs marag's own index (a directory or a milvus URI), not a bare retriever: it routes by the index's collections and embeddings",
                hint="build one with `marag index DOCS --out IDX` (add --split kmeans:8 for several knowledge agents)",
            )
        if not names and not single:
            raise MaragError(
                "ropmura needs an index split into collections (one knowledge agent each)",
                hint="build it with `marag index DOCS --out IDX --split kmeans:8` (or --collection-field FIELD); "
                "in `marag eval` pass --split kmeans:8",
            )
        if not self.index.has("dense"):
            raise MaragError("ropmura routes by embeddings: the index needs its dense part", hint="rebuild with --retrievers bm25,dense")
        self.collections = [WHOLE_CORPUS] if single else names
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

    async def _invite(self, question: str) -> list[tuple[str, float]]:
        cfg = self.config
        if cfg.routing != "centroids":
            return [(name, 1.0) for name in self.collections]
        owners, centroids = await self.boundaries()
        sims = similarity_to(self.index.retriever("dense").embedder, question, centroids)
        top = np.argsort(-sims, kind="stable")[: cfg.top_centroids]
        invited: dict[str, float] = {}
        for c in top.tolist():  # owners of the best centroids, best first
            name = self.collections[int(owners[c])]
            if name not in invited and (cfg.max_agents is None or len(invited) < cfg.max_agents):
                invited[name] = round(float(sims[c]), 4)
        return list(invited.items())

    # -- one routed question -------------------------------------------------------------------
    async def route(self, question: str, rnd: _Round, records: list[Record] | None = None) -> str:
        """Invite agents, then one router call: every reply graded, the answer written,
        with the conversation so far (`records`) in view."""
        cfg = self.config
        with step("router", question=question) as s:
            invited = await self._invite(question)
            s.outputs = {"invited": [n for n, _ in invited], "similarity": [x for _, x in invited]}
        rnd.invited += [n for n, _ in invited if n not in rnd.invited]
        replies = await asyncio.gather(*(self._ask(name, question) for name, _ in invited))
        history = list(records or [])
        if cfg.raw_knowledge:
            passages = [f"{h.title}\n{doc_from_hit(h, cfg.doc_chars).text}" for _, hits in replies for h in hits]
            for agent, (_, hits) in enumerate(replies):
                rnd.keep(hits, 0, len(history), agent)
            out = await self._call(Router(cfg.style()), RouterInput(question=question, passages=passages, records=history))
            return out.answer
        responses = self._packed([r for r, _ in replies])
        out = await self._call(Router(cfg.style(), len(responses)), RouterInput(question=question, responses=responses, records=history))
        with step("router.grades") as s:
            s.outputs = {r.agent: g for r, g in zip(responses, out.grades)}
        rnd.reliable += [r.agent for r, g in zip(responses, out.grades) if g == "reliable" and r.agent not in rnd.reliable]
        for agent, ((_, hits), g) in enumerate(zip(replies, out.grades)):
            if g != "unhelpful":
                rnd.keep(hits, GRADE_ORDER[g], len(history), agent)
        return out.answer

    def _packed(self, responses: list[Response]) -> list[Response]:
        """The analyses packed into `responses_chars`, most similar agent first (every
        reply keeps its answer, so every reply is graded)."""
        allowance = pack_texts([len(r.analysis) for r in responses], self.config.responses_chars)
        return [r.model_copy(update={"analysis": clip(r.analysis, n) if n else ""}) for r, n in zip(responses, allowance)]

    async def _ask(self, name: str, question: str) -> tuple[Response, list[Hit]]:
        cfg = self.config
        with step("knowledge_agent", collection=name, question=question) as s:
            retriever = self.index.retriever(None, collection=None if name == WHOLE_CORPUS else name)
            found = await asyncio.to_thread(retriever.search, question, cfg.pieces)
            hits = await asyncio.to_thread(self._rerank, question, found)
            s.outputs = {"chunk_ids": [h.chunk_id for h in hits]}
            record_read(hits)  # shown to the agent's model, or as raw passages to the router's
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
                answer = (await self._call(Defender(cfg.style()), self._defend_input(question, records, rnd))).answer
        with step("budget") as s:
            s.outputs = {"rounds": len(records) or 1, "agents_invited": len(rnd.invited), "agents_reliable": len(rnd.reliable)}
            if cfg.routing != "single":  # one agent over the whole corpus owns no collection
                s.outputs |= {"invited_collections": rnd.invited, "reliable_collections": rnd.reliable}
        return answer, list(rnd.sources.values())

    def _defend_input(self, question: str, records: list[Record], rnd: _Round) -> DefendInput:
        cfg = self.config
        if cfg.answer_from == "records" or not rnd.ranked:
            return DefendInput(question=question, records=records)
        # the router's answers lose what the agents read: held out on HotpotQA (1.5B, split
        # pool) half the answers missed a gold answer the sources held
        passages = [Passage(title=h.title, text=doc_from_hit(h, cfg.doc_chars).text) for h in rnd.passages(cfg.answer_passages)]
        return DefendInput(question=question, records=records if cfg.answer_from == "both" else [], passages=passages)

    async def _plan_adaptive(self, question: str, records: list[Record], rnd: _Round) -> None:
        for _ in range(self.config.max_rounds):
            if budget_spent():
                return
            split = await self._call(Splitter(), SplitInput(question=question, records=records))
            sub = await self._select(question, split.questions, records)
            if not self._new(sub, records):
                # nothing new to ask: the same question to the same agents would only cost
                # another round (the 1.5B's splitter offered one sub-question three rounds running)
                with step("planner_stop") as s:
                    s.outputs = {"repeated": sub}
                return
            records.append(Record(question=sub, answer=await self.route(sub, rnd, records)))
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
            records.append(Record(question=new[0], answer=await self.route(new[0], rnd, records)))

    async def _plan_presplit(self, question: str, records: list[Record], rnd: _Round) -> None:
        split = await self._call(Splitter(), SplitInput(question=question))
        for q in split.questions[: self.config.max_rounds]:
            if budget_spent():
                return
            sub = (await self._call(Selector(), SelectInput(question=question, candidates=[q], records=records))).question if records else q
            records.append(Record(question=sub or q, answer=await self.route(sub or q, rnd, records)))

    async def _select(self, question: str, candidates: list[str], records: list[Record]) -> str:
        """The selector's choice; with `repeat_check`, if it repeats an earlier
        sub-question, the first new candidate instead (else the choice)."""
        sel = await self._call(Selector(), SelectInput(question=question, candidates=candidates, records=records))
        chosen = sel.question.strip() or candidates[min(sel.choice, len(candidates)) - 1]
        if self._new(chosen, records):
            return chosen
        return next((c for c in candidates if self._new(c, records)), chosen)

    def _new(self, sub: str, records: list[Record]) -> bool:
        return not self.config.repeat_check or repeated(sub, [r.question for r in records]) is None

    async def _call(self, agent, inp) -> Any:
        return await agent(self.llm, inp, self.config.temperature, self.config.seed)


register_variant(RopMura, "ropmura_route", "RopMura without the planner: the question routed once (the paper's single-hop row).", planning="none")
register_variant(RopMura, "ropmura_all_agents", "RopMura without routing: every knowledge agent invited, no planner (single-hop row).", routing="all", planning="none")
register_variant(RopMura, "ropmura_raw_knowledge", "RopMura ablation: agents send raw passages, the router answers; no planner (single-hop row).", raw_knowledge=True, planning="none")
register_variant(RopMura, "ropmura_one_shot", "RopMura planning baseline: the original question routed once, no decomposition (the same run as ropmura_route, under the name of the paper's multi-hop table).", planning="none")
register_variant(RopMura, "ropmura_presplit", "RopMura planning baseline: one split, answered in order.", planning="presplit")
register_variant(RopMura, "ropmura_greedy", "RopMura planning baseline: one new sub-question per round, no judger.", planning="greedy")
register_variant(RopMura, "ropmura_single_one_shot", "RopMura's single-agent row: one agent holding the whole corpus, the question asked once.", routing="single", planning="none")
register_variant(RopMura, "ropmura_single_presplit", "RopMura's single-agent row: one agent holding the whole corpus, one split answered in order.", routing="single", planning="presplit")
register_variant(RopMura, "ropmura_single_greedy", "RopMura's single-agent row: one agent holding the whole corpus, one new sub-question per round.", routing="single", planning="greedy")
register_variant(RopMura, "ropmura_paper", "RopMura with only the paper's behaviour (paper=true: no agent cap, no repeat check, the defender reads the records).", paper=True)
