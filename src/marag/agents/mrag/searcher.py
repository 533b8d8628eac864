"""The searcher (mRAG, Algorithm 2): writes a query for the aspects it was given,
retrieves `docs_per_step` documents at a time, judges each, then decides to read the
next page of the same query, to change the query (saying why), or to stop; it returns
the documents it judged relevant, each with its explanation.

Three model calls make it up, each a small agent with its own fallback:
- `QueryWriter` ("searcher.query"): the first query. Fallback: the coordinator's
  aspects, else the question.
- `Judge` ("searcher.judge"): one call per document (run concurrently, so a batching
  server reads both at once). A call per document keeps each prompt to one document,
  which small models handle better than comparing two. Fallback: relevant if and only
  if the retriever put it on the first page of its query.
- `NextMove` ("searcher.next"): continue / change / end. Fallback: end if something
  relevant was found, else continue.

Limits (from the strategy config) are enforced here, not left to the model: a query is
read at most `query_reuse_limit` times (then the move is forced to a fresh query if the
model offered one, else to end), an empty page ends that query the same way, and the
whole search stops after `max_steps` pages. Every page, judgement and move, forced or
not, is in this step's outputs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Literal

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.mrag._shared import Doc, clip, doc_from_hit, render_lines
from marag.errors import StructuredOutputError
from marag.index.base import Hit
from marag.llm.base import LLM, Message
from marag.trace import step

QUERY_MAX_CHARS = 120
SearchFn = Callable[[str, int, int], Awaitable[list[Hit]]]  # (query, k, offset) -> hits


# -- the three model calls -------------------------------------------------------------
class QueryInput(BaseModel):
    question: str
    aspects: str = ""
    known: list[str] = Field(default_factory=list)


class Query(BaseModel):
    query: str = Field(max_length=QUERY_MAX_CHARS)


class QueryWriter(Agent[QueryInput, Query]):
    name = "searcher.query"
    Input = QueryInput
    Output = Query
    max_tokens = 80

    def messages(self, inp: QueryInput) -> list[Message]:
        user = f"Question: {inp.question}\n"
        if inp.aspects:
            user += f"Look for: {inp.aspects}\n"
        if inp.known:
            user += f"Already known:\n{render_lines(inp.known)}\n"
        system = "You write a short keyword query for a search engine. Reply as JSON."
        return [Message(role="system", content=system), Message(role="user", content=user + "\nQuery as JSON.")]

    def fallback(self, inp: QueryInput, error: StructuredOutputError) -> Query:
        return Query(query=clip(inp.aspects or inp.question, QUERY_MAX_CHARS))


class JudgeInput(BaseModel):
    question: str
    aspects: str = ""
    document: Doc
    first_page: bool = True  # ranked on the first page of its query: only the fallback reads it


class Judgement(BaseModel):
    explanation: str = Field(max_length=150)
    relevant: bool


class Judge(Agent[JudgeInput, Judgement]):
    name = "searcher.judge"
    Input = JudgeInput
    Output = Judgement
    max_tokens = 100

    def messages(self, inp: JudgeInput) -> list[Message]:
        d = inp.document
        system = (
            "You decide whether a document helps answer a question. Explain in one short "
            "sentence, then say relevant true or false. Reply as JSON."
        )
        user = f"Document: {d.title}\n{d.text}\n\nQuestion: {inp.question}\n"
        if inp.aspects:
            user += f"Looking for: {inp.aspects}\n"
        return [Message(role="system", content=system), Message(role="user", content=user + "Judgement as JSON.")]

    def fallback(self, inp: JudgeInput, error: StructuredOutputError) -> Judgement:
        why = "on the first page" if inp.first_page else "not on the first page"
        return Judgement(explanation=f"fallback: ranked {why} of its query", relevant=inp.first_page)


class NextInput(BaseModel):
    question: str
    query: str
    uses: int  # pages read with this query
    reuse_limit: int
    steps_left: int
    page: list[str] = Field(default_factory=list)  # this page's judgements, one line each
    relevant_so_far: int = 0


class Move(BaseModel):
    action: Literal["continue", "change", "end"]
    new_query: str = Field(default="", max_length=QUERY_MAX_CHARS)
    reason: str = Field(default="", max_length=150)


class NextMove(Agent[NextInput, Move]):
    name = "searcher.next"
    Input = NextInput
    Output = Move
    max_tokens = 120

    def messages(self, inp: NextInput) -> list[Message]:
        system = (
            "You steer a search. After each page of results choose: continue (next page, "
            "same query), change (a new query, with the reason) or end (enough found, or "
            "nothing more to find). Reply as JSON."
        )
        user = (
            f"Question: {inp.question}\nQuery: {inp.query} (pages read: {inp.uses} of {inp.reuse_limit})\n"
            f"This page:\n{render_lines(inp.page)}\n"
            f"Relevant documents so far: {inp.relevant_so_far}. Pages left: {inp.steps_left}.\n\nNext move as JSON."
        )
        return [Message(role="system", content=system), Message(role="user", content=user)]

    def fallback(self, inp: NextInput, error: StructuredOutputError) -> Move:
        action = "end" if inp.relevant_so_far else "continue"
        return Move(action=action, reason=f"fallback: {action} (next-move output unusable)")


# -- the search loop --------------------------------------------------------------------
class SearcherInput(BaseModel):
    question: str
    aspects: str = ""  # the coordinator's input
    known: list[str] = Field(default_factory=list)  # what the team has so far


class SearchLimits(BaseModel):
    docs_per_step: int = 2
    query_reuse_limit: int = 5
    max_steps: int = 6
    doc_chars: int = 600


class Judged(BaseModel):
    chunk_id: str
    doc_id: str
    title: str = ""
    rank: int  # 0-based rank under its query
    relevant: bool
    explanation: str
    fallback: bool = False


class SearchStep(BaseModel):
    query: str
    offset: int
    docs: list[Judged]
    action: str  # continue | change | end
    reason: str = ""
    forced: str | None = None  # which limit overrode the model's move, if any


class SearcherOutput(BaseModel):
    queries: list[str]
    steps: list[SearchStep]
    relevant: list[Judged]

    @property
    def query_reuses(self) -> int:
        return len(self.steps) - len(set(s.query for s in self.steps))


class Searcher:
    name = "searcher"

    async def __call__(
        self, llm: LLM, search: SearchFn, inp: SearcherInput, limits: SearchLimits,
        temperature: float = 0.0, seed: int | None = None,
    ) -> tuple[SearcherOutput, list[Hit]]:
        with step(self.name, **inp.model_dump(mode="json")) as s:
            q = await QueryWriter()(llm, QueryInput(**inp.model_dump()), temperature, seed)
            query = clip(q.query, QUERY_MAX_CHARS) or clip(inp.aspects or inp.question, QUERY_MAX_CHARS)
            uses: dict[str, int] = {}  # pages read per query; the next offset follows from it
            steps: list[SearchStep] = []
            found: dict[str, tuple[Hit, Judged]] = {}
            for n in range(limits.max_steps):
                offset = uses.get(query, 0) * limits.docs_per_step
                hits = await search(query, limits.docs_per_step, offset)
                uses[query] = uses.get(query, 0) + 1
                judged = list(await asyncio.gather(*(self._judge(llm, inp, h, offset + i, limits, temperature, seed) for i, h in enumerate(hits))))
                for h, j in zip(hits, judged):
                    if j.relevant and h.chunk_id not in found:
                        found[h.chunk_id] = (h, j)
                if n == limits.max_steps - 1:
                    steps.append(SearchStep(query=query, offset=offset, docs=judged, action="end", forced="max_steps"))
                    break
                move = await NextMove()(llm, NextInput(
                    question=inp.question, query=query, uses=uses[query], reuse_limit=limits.query_reuse_limit,
                    steps_left=limits.max_steps - n - 1, relevant_so_far=len(found),
                    page=[f"{j.title or j.chunk_id}: {'relevant' if j.relevant else 'not relevant'} ({j.explanation})" for j in judged] or ["(no more results)"],
                ), temperature, seed)
                action, new_query, forced = self._enforce(move, query, uses, bool(hits), limits)
                steps.append(SearchStep(query=query, offset=offset, docs=judged, action=action, reason=move.reason, forced=forced))
                if action == "end":
                    break
                query = new_query
            out = SearcherOutput(
                queries=list(uses), steps=steps, relevant=[j for _, j in found.values()]
            )
            s.outputs = out.model_dump(mode="json")
        return out, [h for h, _ in found.values()]

    async def _judge(self, llm, inp, hit: Hit, rank: int, limits: SearchLimits, temperature, seed) -> Judged:
        j_in = JudgeInput(question=inp.question, aspects=inp.aspects, document=doc_from_hit(hit, limits.doc_chars),
                          first_page=rank < limits.docs_per_step)
        j = await Judge()(llm, j_in, temperature, seed)
        return Judged(chunk_id=hit.chunk_id, doc_id=hit.doc_id, title=hit.title, rank=rank, relevant=j.relevant,
                      explanation=j.explanation, fallback=j.explanation.startswith("fallback:"))

    @staticmethod
    def _enforce(move: Move, query: str, uses: dict[str, int], had_hits: bool, limits: SearchLimits) -> tuple[str, str, str | None]:
        """The move actually made: (action, next query, name of the limit that forced it)."""
        new = clip(move.new_query, QUERY_MAX_CHARS)
        fresh = bool(new) and new != query and uses.get(new, 0) < limits.query_reuse_limit
        if move.action == "end":
            return "end", query, None
        if move.action == "change" and fresh:
            return "change", new, None
        # continue (or a change without a usable new query, which reads the same query again)
        blocked = None if had_hits else "no_more_results"
        if had_hits and uses[query] >= limits.query_reuse_limit:
            blocked = "query_reuse_limit"
        if blocked is None:
            return "continue", query, None if move.action == "continue" else "no_new_query"
        return ("change", new, blocked) if fresh else ("end", query, blocked)
