"""The no-planning ablation's query step: every search query written up front, from the
question alone (one per piece of information needed), before any search runs.

Fallback: the question itself as the only query.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from marag.agents.base import Agent
from marag.agents.layout import clip, laid_out
from marag.agents.queries import QUERY_MAX_CHARS
from marag.agents.unirag._shared import PREAMBLE
from marag.errors import StructuredOutputError
from marag.llm.base import Message

QueryText = Annotated[str, StringConstraints(max_length=QUERY_MAX_CHARS)]


class QueriesInput(BaseModel):
    question: str
    max_queries: int = 3


class Queries(BaseModel):
    queries: list[QueryText] = Field(min_length=1, max_length=4)


class QueryPlanner(Agent[QueriesInput, Queries]):
    name = "queries"
    max_tokens = 120

    def messages(self, inp: QueriesInput) -> list[Message]:
        task = (
            f"Your task: write the search queries needed to answer the question, 1 to {inp.max_queries}, "
            "each a few keywords for a single piece of information."
        )
        return laid_out(task, inp.question, [], "Queries as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: QueriesInput, error: StructuredOutputError) -> Queries:
        return Queries(queries=[clip(inp.question, QUERY_MAX_CHARS)])
