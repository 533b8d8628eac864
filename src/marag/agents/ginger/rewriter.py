"""GINGER's query rewriting: the model first answers without documents (a provisional
answer), then writes `l` rewrites of the query, each about a different aspect of that
answer. The paper sends one search string, the original query with the rewrites
appended (`concatenated_query`); ours (`separate_searches`) sends the original query and
each rewrite followed by it as separate searches, fused (`search_strings`). Rewrites
are for retrieval only (reranking and generation use the original query).

Fallbacks: no provisional answer (""), and no rewrites (the original query alone).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from marag.agents.base import Agent, narrowed
from marag.agents.ginger._shared import PREAMBLE
from marag.agents.layout import laid_out
from marag.agents.queries import QUERY_MAX_CHARS
from marag.errors import StructuredOutputError
from marag.llm.base import Message


class DraftInput(BaseModel):
    question: str


class Draft(BaseModel):
    answer: str = Field(max_length=400)


class ProvisionalAnswer(Agent[DraftInput, Draft]):
    name = "rewriter.draft"
    max_tokens = 130

    def messages(self, inp: DraftInput) -> list[Message]:
        return laid_out("Answer the question from what you know, in two or three sentences. Reply as JSON.", inp.question, [], "Answer as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: DraftInput, error: StructuredOutputError) -> Draft:
        return Draft(answer="")


class RewriteInput(BaseModel):
    question: str
    draft: str
    n: int


Rewrite = Annotated[str, StringConstraints(max_length=QUERY_MAX_CHARS)]


class Rewrites(BaseModel):
    rewrites: list[Rewrite]


class Rewriter(Agent[RewriteInput, Rewrites]):
    name = "rewriter"

    def __init__(self, n: int):
        self.Output = narrowed(Rewrites, "rewrites", min_length=1, max_length=n)
        self.max_tokens = 20 + 40 * n

    def messages(self, inp: RewriteInput) -> list[Message]:
        task = f"Rewrite the question as {inp.n} search queries, each about a different aspect of the draft answer below."
        return laid_out(task + " Reply as JSON.", inp.question, [f"Draft answer: {inp.draft or '(none)'}"], "Queries as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: RewriteInput, error: StructuredOutputError) -> Rewrites:
        return Rewrites(rewrites=[])


def search_strings(question: str, rewrites: list[str]) -> list[str]:
    """What is sent to the retrievers: the original query, then each rewrite combined
    with it (so no search drifts away from the question)."""
    out = [question]
    for r in rewrites:
        r = " ".join(r.split())
        if r and r.lower() != question.lower():
            out.append(f"{r} {question}")
    return list(dict.fromkeys(out))


def concatenated_query(question: str, rewrites: list[str]) -> str:
    """The paper's search string: the original query followed by its rewrites, as one
    query (rewrites that repeat the query or an earlier rewrite are left out)."""
    parts = [" ".join(question.split())]
    for r in rewrites:
        r = " ".join(r.split())
        if r and r.lower() not in {p.lower() for p in parts}:
            parts.append(r)
    return " ".join(parts)
