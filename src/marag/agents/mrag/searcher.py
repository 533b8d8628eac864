"""The searcher (mRAG, Algorithm 2): writes a query for the aspects it was given,
retrieves `docs_per_step` documents at a time, judges each, then decides to read the
next page of the same query, to change the query (saying why), or to stop; it returns
the documents it judged relevant, each with its explanation.

Three model calls make it up, each a small agent with its own fallback:
- `QueryWriter` ("searcher.query"): the first query. Fallback: the coordinator's
  aspects, else the question.
- `Judge` ("searcher.judge"): one call per document (run concurrently, so a batching
  server reads both at once). A call per document keeps each prompt to one document,
  which small models handle better than comparing two. Fallback: not relevant; with
  `heuristic_fallbacks` (ours) relevant if and only if it was on the query's first page.
- `NextMove` ("searcher.next"): continue / change / end, offered in that order every
  time and with no recommendation, so the model decides (it sees the page's judgements
  and everything found so far). Fallback: end; with `heuristic_fallbacks` continue when
  the page added something new and the query has pages left.

Limits (from the strategy config) are enforced here, not left to the model: a query is
read at most `query_reuse_limit` times (then the move is forced to a fresh query if the
model offered one, else to end), an empty page ends that query the same way, and with
`max_steps` the whole search stops after that many pages. Our guards, each off in the
paper's mode: `stop_dry_paging` (a page that added nothing ends paging of that query),
`on_topic_queries` and the rank floor `keep_top_ranked` (a run that judged nothing
relevant keeps its first query's top hits, marked `by_rank`). Every page, judgement
and move, forced or not, is in this step's outputs.
"""

from __future__ import annotations

import asyncio
import re
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
    # The fallback's rule (only the fallback reads these): with `first_page_rule` an
    # unusable judgment counts a first-page document as relevant (ours, for small
    # models); without it (the paper's mode) as not relevant.
    first_page: bool = True
    first_page_rule: bool = True


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
        if not inp.first_page_rule:
            return Judgement(explanation="fallback: no usable judgment, counted as not relevant", relevant=False)
        why = "on the first page" if inp.first_page else "not on the first page"
        return Judgement(explanation=f"fallback: ranked {why} of its query", relevant=inp.first_page)


Action = Literal["continue", "change", "end"]
# In the paper's order, always: the order must not steer the model (small models pick
# the first option they read).
_ACTIONS = {
    "continue": "continue - read the next page of results for the same query (it is still finding useful documents)",
    "change": "change - search with a different query for what is still missing, and say why",
    "end": "end - stop searching (what was found covers the question, or there is nothing more to find)",
}


class NextInput(BaseModel):
    question: str
    aspects: str = ""
    query: str
    uses: int  # pages read with this query
    reuse_limit: int
    steps_left: int | None = None  # pages left in this searcher run (None: no cap)
    page: list[str] = Field(default_factory=list)  # this page's judgements, one line each
    found: list[str] = Field(default_factory=list)  # relevant so far: "title: explanation"
    new_on_page: int = 0  # relevant documents this page added (the fallback reads it)
    heuristic_fallback: bool = True  # ours: continue after a productive page; paper: end


class Move(BaseModel):
    action: Action
    new_query: str = Field(default="", max_length=QUERY_MAX_CHARS)
    reason: str = Field(default="", max_length=150)


class NextMove(Agent[NextInput, Move]):
    name = "searcher.next"
    Input = NextInput
    Output = Move
    max_tokens = 120

    def messages(self, inp: NextInput) -> list[Message]:
        system = (
            "You steer a search for documents that answer a question. After each page of results, "
            "choose one move:\n" + "\n".join(f"- {text}" for text in _ACTIONS.values()) + "\nReply as JSON."
        )
        user = f"Question: {inp.question}\n"
        if inp.aspects:
            user += f"Looking for: {inp.aspects}\n"
        user += (
            f"Query: {inp.query} (pages read: {inp.uses} of {inp.reuse_limit})\n"
            f"This page:\n{render_lines(inp.page, '(no more results)')}\n"
            f"Relevant documents so far:\n{render_lines(inp.found)}\n"
            + (f"Pages left: {inp.steps_left}.\n" if inp.steps_left is not None else "")
            + "\nNext move as JSON."
        )
        return [Message(role="system", content=system), Message(role="user", content=user)]

    def fallback(self, inp: NextInput, error: StructuredOutputError) -> Move:
        more = inp.heuristic_fallback and inp.new_on_page > 0 and inp.uses < inp.reuse_limit
        action: Action = "continue" if more else "end"
        return Move(action=action, reason=f"fallback: {action} (next-move output unusable)")


# -- the search loop --------------------------------------------------------------------
class SearcherInput(BaseModel):
    question: str
    aspects: str = ""  # the coordinator's input
    known: list[str] = Field(default_factory=list)  # what the team has so far


SAFETY_PAGES = 50  # with no page cap (the paper's mode), a searcher run still ends here


class SearchLimits(BaseModel):
    docs_per_step: int = 2
    query_reuse_limit: int = 5
    max_steps: int | None = 6  # pages per searcher run (ours; None = the paper: no cap)
    doc_chars: int | None = 1000  # document text the judge reads (None = whole)
    keep_top_ranked: int = 0  # rank floor: a run that found nothing keeps its first query's top-N
    on_topic_queries: bool = False  # a query must share a content word with question/aspects
    stop_dry_paging: bool = False  # "continue" after a page that added nothing becomes change/end
    heuristic_fallbacks: bool = False  # judge: first page relevant; next move: continue if productive


class Judged(BaseModel):
    chunk_id: str
    doc_id: str
    title: str = ""
    query: str = ""  # the query it was retrieved for
    rank: int  # 0-based rank under its query
    relevant: bool  # the verdict used (the judge's, unless `by_rank`)
    explanation: str
    fallback: bool = False  # the judge's output was unusable: its fallback decided
    by_rank: bool = False  # kept by the rank floor (`keep_top_ranked`), not by the judge

    @property
    def line(self) -> str:
        return f"{self.title or self.chunk_id}: {self.explanation}"


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
    rejected_queries: list[str] = Field(default_factory=list)  # off-topic queries not run

    @property
    def query_reuses(self) -> int:
        return len(self.steps) - len({s.query for s in self.steps})


_STOP = frozenset(
    "the and for with from that this who whom what which when where why how did does was were are "  # noqa: SIM905
    "has have had its his her their into about than then there".split()
)


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) >= 3 and w not in _STOP}


class Searcher:
    name = "searcher"

    async def __call__(
        self,
        llm: LLM,
        search: SearchFn,
        inp: SearcherInput,
        limits: SearchLimits,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> tuple[SearcherOutput, list[Hit]]:
        with step(self.name, **inp.model_dump(mode="json")) as s:
            topic = content_words(f"{inp.question} {inp.aspects} {' '.join(inp.known)}")
            rejected: list[str] = []

            def usable(q: str) -> bool:  # has words, is not a move's name, is about the question
                ok = sum(c.isalpha() for c in q) >= 3 and q.lower().strip(" .") not in _ACTIONS
                ok = ok and (not limits.on_topic_queries or bool(content_words(q) & topic))
                if q and not ok:
                    rejected.append(q)
                return ok

            q = clip(
                (await QueryWriter()(llm, QueryInput(**inp.model_dump()), temperature, seed)).query, QUERY_MAX_CHARS
            )
            query = q if usable(q) else clip(inp.aspects or inp.question, QUERY_MAX_CHARS)
            uses: dict[str, int] = {}  # pages read per query; the next offset follows from it
            steps: list[SearchStep] = []
            found: dict[str, tuple[Hit, Judged]] = {}
            first_page: list[tuple[Hit, Judged]] = []  # the first query's first page (rank floor)
            page_cap = limits.max_steps or SAFETY_PAGES
            for n in range(page_cap):
                offset = uses.get(query, 0) * limits.docs_per_step
                hits = await search(query, limits.docs_per_step, offset)
                uses[query] = uses.get(query, 0) + 1
                judged = list(
                    await asyncio.gather(
                        *(self._judge(llm, inp, h, query, offset + i, limits, temperature, seed) for i, h in enumerate(hits))
                    )
                )
                if n == 0:
                    first_page = list(zip(hits, judged))
                new = [(h, j) for h, j in zip(hits, judged) if j.relevant and h.chunk_id not in found]
                found.update((h.chunk_id, (h, j)) for h, j in new)
                if n == page_cap - 1:
                    forced = "max_steps" if limits.max_steps else "safety_pages"
                    steps.append(SearchStep(query=query, offset=offset, docs=judged, action="end", forced=forced))
                    break
                move = await NextMove()(
                    llm,
                    NextInput(
                        question=inp.question,
                        aspects=inp.aspects,
                        query=query,
                        uses=uses[query],
                        reuse_limit=limits.query_reuse_limit,
                        steps_left=page_cap - n - 1 if limits.max_steps else None,
                        page=[f"{j.title or j.chunk_id}: {'relevant' if j.relevant else 'not relevant'} ({j.explanation})" for j in judged],
                        found=[j.line for _, j in found.values()],
                        new_on_page=len(new),
                        heuristic_fallback=limits.heuristic_fallbacks,
                    ),
                    temperature,
                    seed,
                )
                new_query = clip(move.new_query, QUERY_MAX_CHARS)
                fresh = new_query != query and uses.get(new_query, 0) < limits.query_reuse_limit and usable(new_query)
                action, forced = self._enforce(
                    move.action,
                    fresh,
                    had_hits=bool(hits),
                    used_up=uses[query] >= limits.query_reuse_limit,
                    dry=limits.stop_dry_paging and not new,
                )
                steps.append(
                    SearchStep(query=query, offset=offset, docs=judged, action=action, reason=move.reason, forced=forced)
                )
                if action == "end":
                    break
                query = new_query if action == "change" else query
            if not found and limits.keep_top_ranked:  # rank floor (ours): never come back empty-handed
                for h, j in first_page[: limits.keep_top_ranked]:
                    found[h.chunk_id] = (h, j.model_copy(update={"relevant": True, "by_rank": True}))
            out = SearcherOutput(
                queries=list(uses), steps=steps, relevant=[j for _, j in found.values()], rejected_queries=rejected
            )
            s.outputs = out.model_dump(mode="json")
        return out, [h for h, _ in found.values()]

    async def _judge(self, llm, inp, hit: Hit, query: str, rank: int, limits: SearchLimits, temperature, seed) -> Judged:
        j_in = JudgeInput(
            question=inp.question,
            aspects=inp.aspects,
            document=doc_from_hit(hit, limits.doc_chars),
            first_page=rank < limits.docs_per_step,
            first_page_rule=limits.heuristic_fallbacks,
        )
        j = await Judge()(llm, j_in, temperature, seed)
        return Judged(
            chunk_id=hit.chunk_id,
            doc_id=hit.doc_id,
            title=hit.title,
            query=query,
            rank=rank,
            relevant=j.relevant,
            explanation=j.explanation,
            fallback=j.explanation.startswith("fallback:"),
        )

    @staticmethod
    def _enforce(action: str, fresh: bool, had_hits: bool, used_up: bool, dry: bool = False) -> tuple[str, str | None]:
        """The move actually made, and the name of the limit that forced it (if any).
        `fresh`: the model offered a usable new query; `used_up`: the current query has
        read its `query_reuse_limit` pages; `dry`: the page added nothing new and the
        dry-paging guard is on."""
        if action == "end":
            return "end", None
        if action == "change" and fresh:
            return "change", None
        # continue (or a change without a usable new query, which reads the same query again)
        blocked = (
            "no_more_results" if not had_hits else "query_reuse_limit" if used_up else "page_added_nothing" if dry else None
        )
        if blocked is None:
            return "continue", None if action == "continue" else "no_new_query"
        return ("change" if fresh else "end"), blocked
