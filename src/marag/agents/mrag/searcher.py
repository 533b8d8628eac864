"""The searcher's roles (mRAG, Algorithm 2): the model calls of the search loop
(`marag.strategies.mrag.search`), each a small agent with its own fallback:
- `QueryWriter` ("searcher.query"): the first query, from the question, what is still
  missing, the facts found so far and the queries already used. What the agent knows
  goes into this prompt, never into the query: the loop cleans the reply of any
  bookkeeping it copied (`marag.agents.queries.clean_query`). Fallback: the
  coordinator's aspects, else the question.
- `Judge` ("searcher.judge"): one call per document (run concurrently), as in the paper.
  It says what the document contributes, names the entity or fact it gives (which
  seeds later queries: the bridge to a second hop), and whether it is relevant.
  Fallback: not relevant; with `heuristic_fallbacks` (ours) relevant if and only if it
  was on the query's first page. `judge_pages=True` (ours, fewer calls) judges a whole
  page in one `PageJudge` call.
- `HopWriter` ("searcher.hop", ours): with `next_move="hop"`, after the first page, the
  entity its documents give that the question depends on, and a query for it.
  Fallback: no hop.
- `NextMove` ("searcher.next"): continue / change / end, offered in that order every
  time and with no recommendation, so the model decides (it sees the page's judgements
  and everything found so far). Fallback: end; with `heuristic_fallbacks` continue when
  the page added something new and the query has pages left.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from marag.agents.base import Agent, narrowed
from marag.agents.queries import QUERY_MAX_CHARS
from marag.agents.layout import numbered_passages
from marag.agents.mrag._shared import Doc, clip, laid_out, render_lines
from marag.errors import StructuredOutputError
from marag.llm.base import Message


# -- the query ---------------------------------------------------------------------------
class QueryInput(BaseModel):
    question: str
    aspects: str = ""
    known: list[str] = Field(default_factory=list)  # facts found so far: "title: fact"
    searched: list[str] = Field(default_factory=list)  # queries already used


class Query(BaseModel):
    query: str = Field(max_length=QUERY_MAX_CHARS)


# "Not a guess": the default 1.5B model wrote the answer it expected into the query
# ("... an NFL team based in Texas"), and the search then looked for its guess.
_QUERY_SYSTEM = (
    "You write a short keyword query for a search engine: the names and words of what is still "
    "missing. Use only names from the question and the facts found; never put a guessed answer "
    "in the query. Reply as JSON."
)


class QueryWriter(Agent[QueryInput, Query]):
    name = "searcher.query"
    max_tokens = 60

    def messages(self, inp: QueryInput) -> list[Message]:
        state = [
            f"Still missing: {inp.aspects}" if inp.aspects else "",
            f"Facts found so far:\n{render_lines(inp.known)}" if inp.known else "",
            f"Queries already used (write a different one):\n{render_lines(inp.searched)}" if inp.searched else "",
        ]
        return laid_out(_QUERY_SYSTEM, inp.question, state, "Query as JSON.")

    def fallback(self, inp: QueryInput, error: StructuredOutputError) -> Query:
        return Query(query=clip(inp.aspects or inp.question, QUERY_MAX_CHARS))


# -- the next hop (ours, `next_move="hop"`) ---------------------------------------------
class HopInput(BaseModel):
    question: str
    documents: list[Doc]  # what the first page found, as the judge read it


class Hop(BaseModel):
    entity: str = Field(default="", max_length=80)
    query: str = Field(default="", max_length=QUERY_MAX_CHARS)


# Why a role of its own: the 1.5B judge calls nearly every document relevant, so reading
# on with the first query filled S with its neighbours (six waterfalls for "Bubye River
# waterfall") and the page naming the country was never searched for. Asked for "the next
# query" with the documents in view (the query writer's prompt plus them), the 1.5B
# copied the query it had already run in 8 of 12 HotpotQA questions; naming the entity
# first gives the loop something to check (`Searcher._hop`). Without the example the
# 1.5B wrote a query with no word beyond the question and the entity in 12 of 12 MuSiQue
# questions (the loop now runs the entity alone then).
_HOP_SYSTEM = (
    "Documents were found for a question. Name the one entity (a person, place, work or group) "
    "that they give and the question depends on but does not name; then write a short keyword "
    "query: that name and what the question still asks about it. If the documents name no such "
    "entity, leave both empty. Never put a guessed answer in the query. Example: for \"Which river "
    "runs through the city where Jean Dupont was born?\" and a document saying he was born in "
    "Lyon, the entity is Lyon and the query \"Lyon river\". Reply as JSON."
)


class HopWriter(Agent[HopInput, Hop]):
    name = "searcher.hop"
    max_tokens = 60

    def messages(self, inp: HopInput) -> list[Message]:
        return laid_out(_HOP_SYSTEM, inp.question, [f"Documents found:\n{numbered_passages(inp.documents)}"], "Entity and query as JSON.")

    def fallback(self, inp: HopInput, error: StructuredOutputError) -> Hop:
        return Hop()  # no hop: the rule's move stands


# -- relevance -------------------------------------------------------------------------
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
    explanation: str = Field(max_length=100)
    fact: str = Field(default="", max_length=60)
    relevant: bool


_JUDGE_SYSTEM = (
    "You decide whether a document helps answer a question. Explain in one short sentence, "
    "name the entity or fact it gives toward the answer (empty if none), then say relevant "
    "true or false. Reply as JSON."
)


def _judge_fallback(first_page: bool, first_page_rule: bool) -> Judgement:
    if not first_page_rule:
        return Judgement(explanation="fallback: no usable judgment, counted as not relevant", relevant=False)
    why = "on the first page" if first_page else "not on the first page"
    return Judgement(explanation=f"fallback: ranked {why} of its query", relevant=first_page)


class Judge(Agent[JudgeInput, Judgement]):
    name = "searcher.judge"
    max_tokens = 90

    def messages(self, inp: JudgeInput) -> list[Message]:
        d = inp.document
        state = [f"Looking for: {inp.aspects}" if inp.aspects else "", f"Document: {d.title}\n{d.text}"]
        return laid_out(_JUDGE_SYSTEM, inp.question, state, "Judgement as JSON.")

    def fallback(self, inp: JudgeInput, error: StructuredOutputError) -> Judgement:
        return _judge_fallback(inp.first_page, inp.first_page_rule)


class PageJudgeInput(BaseModel):
    question: str
    aspects: str = ""
    documents: list[Doc]
    first_page: bool = True
    first_page_rule: bool = True


class PageJudgement(BaseModel):
    judgements: list[Judgement]


class PageJudge(Agent[PageJudgeInput, PageJudgement]):
    """All documents of a page in one call (`judge_pages`, ours): one prompt prefix and
    one reply instead of one per document."""

    name = "searcher.judge"

    def __init__(self, n: int):
        self.Output = narrowed(PageJudgement, "judgements", min_length=n, max_length=n)
        self.max_tokens = 20 + 80 * n

    def messages(self, inp: PageJudgeInput) -> list[Message]:
        system = _JUDGE_SYSTEM.replace("whether a document helps", "for each numbered document, in order, whether it helps")
        docs = numbered_passages(inp.documents)
        state = [f"Looking for: {inp.aspects}" if inp.aspects else "", f"Documents:\n{docs}"]
        return laid_out(system, inp.question, state, f"{len(inp.documents)} judgements, in order, as JSON.")

    def fallback(self, inp: PageJudgeInput, error: StructuredOutputError) -> PageJudgement:
        return PageJudgement(judgements=[_judge_fallback(inp.first_page, inp.first_page_rule)] * len(inp.documents))


# -- the next move -----------------------------------------------------------------------
Action = Literal["continue", "change", "end"]
# In the paper's order, always: the order must not steer the model (small models pick
# the first option they read).
ACTIONS = {
    "continue": "continue - read the next page of results for the same query (it is still finding useful documents)",
    "change": "change - search with a different query for what is still missing, and say why",
    "end": "end - stop searching (what was found covers the question, or there is nothing more to find)",
}
_NEXT_SYSTEM = (
    "You steer a search for documents that answer a question. After each page of results, choose one move:\n"
    + "\n".join(f"- {text}" for text in ACTIONS.values())
    + "\nReply as JSON."
)


class NextInput(BaseModel):
    question: str
    aspects: str = ""
    query: str
    uses: int  # pages read with this query
    reuse_limit: int
    steps_left: int | None = None  # pages left in this searcher run (None: no cap)
    page: list[str] = Field(default_factory=list)  # this page's judgements, one line each
    found: list[str] = Field(default_factory=list)  # relevant so far: "title: fact"
    new_on_page: int = 0  # relevant documents this page added (the fallback reads it)
    heuristic_fallback: bool = True  # ours: continue after a productive page; paper: end


class Move(BaseModel):
    action: Action
    new_query: str = Field(default="", max_length=QUERY_MAX_CHARS)
    reason: str = Field(default="", max_length=100)


class NextMove(Agent[NextInput, Move]):
    name = "searcher.next"
    max_tokens = 90

    def messages(self, inp: NextInput) -> list[Message]:
        # The current query stands alone on its line and the counters on theirs: a model
        # asked for a new query copies whatever shares the query's line.
        state = [
            f"Looking for: {inp.aspects}" if inp.aspects else "",
            f"Current query: {inp.query}",
            f"This page:\n{render_lines(inp.page, '(no more results)')}",
            f"Relevant documents so far:\n{render_lines(inp.found)}",
            f"Pages read with the current query: {inp.uses} of at most {inp.reuse_limit}.",
            f"Pages left in this search: {inp.steps_left}." if inp.steps_left is not None else "",
        ]
        return laid_out(_NEXT_SYSTEM, inp.question, state, "Next move as JSON.")

    def fallback(self, inp: NextInput, error: StructuredOutputError) -> Move:
        if not inp.heuristic_fallback:
            return Move(action="end", reason="fallback: end (next-move output unusable)")
        move = rule_move(inp.new_on_page, inp.uses, inp.reuse_limit)
        return move.model_copy(update={"reason": f"fallback: {move.action} (next-move output unusable)"})


def rule_move(new_on_page: int, uses: int, reuse_limit: int, then: str = "") -> Move:
    """The move without a model call (ours): read the same query's next page while its
    pages add relevant documents and it has pages left; after a page that added nothing,
    search `then` instead (if given), else end. The next-move fallback (no `then`), and
    `next_move="rule"`'s every move (`then`: the question itself)."""
    if new_on_page > 0 and uses < reuse_limit:
        return Move(action="continue", reason="rule: the page added documents")
    if new_on_page == 0 and then:
        return Move(action="change", new_query=then[:QUERY_MAX_CHARS], reason="rule: the page added nothing; the question itself")
    return Move(action="end", reason="rule: the page added nothing" if new_on_page == 0 else "rule: the query's pages are used up")


__all__ = [
    "ACTIONS",
    "Hop",
    "HopInput",
    "HopWriter",
    "Judge",
    "JudgeInput",
    "Judgement",
    "Move",
    "NextInput",
    "NextMove",
    "PageJudge",
    "PageJudgeInput",
    "PageJudgement",
    "Query",
    "QueryInput",
    "QueryWriter",
    "rule_move",
]
