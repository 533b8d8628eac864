"""GINGER's reranking judges: pointwise relevance of one passage (when the LLM scores
pointwise instead of embeddings or a cross-encoder), pairwise preference between two
passages, and pairwise preference between two facets (clusters of nuggets), for the
paper's pairwise cluster ranking. The strategy asks each pair in both orders, so a
judge's leaning towards the first (or second) position cancels out.

Fallbacks: relevance 0; a preference keeps the order it was shown in ("A").
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.ginger._shared import PREAMBLE
from marag.agents.layout import laid_out
from marag.errors import StructuredOutputError
from marag.llm.base import Message


class PointInput(BaseModel):
    question: str
    passage: str


class Relevance(BaseModel):
    score: int = Field(ge=0, le=3)


class PointwiseJudge(Agent[PointInput, Relevance]):
    name = "rerank.pointwise"
    max_tokens = 12

    def messages(self, inp: PointInput) -> list[Message]:
        task = "Rate how well the passage answers the question: 0 not at all, 1 a little, 2 partly, 3 fully."
        return laid_out(task + " Reply as JSON.", inp.question, [f"Passage: {inp.passage}"], "Score as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: PointInput, error: StructuredOutputError) -> Relevance:
        return Relevance(score=0)


class PairInput(BaseModel):
    question: str
    a: str
    b: str


class Preference(BaseModel):
    better: Literal["A", "B"]


class PairwiseJudge(Agent[PairInput, Preference]):
    name = "rerank.pairwise"
    max_tokens = 10

    def messages(self, inp: PairInput) -> list[Message]:
        task = "Say which passage, A or B, is more useful for answering the question."
        return laid_out(task + " Reply as JSON.", inp.question, [f"Passage A: {inp.a}", f"Passage B: {inp.b}"], "Preference as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: PairInput, error: StructuredOutputError) -> Preference:
        return Preference(better="A")


class FacetPairInput(BaseModel):
    question: str
    a: list[str]
    b: list[str]


class FacetPairwiseJudge(Agent[FacetPairInput, Preference]):
    name = "facet_ranker.pairwise"
    max_tokens = 10

    def messages(self, inp: FacetPairInput) -> list[Message]:
        task = "Two groups of facts, A and B, were found for the question. Say which group the answer should lead with: the one that matters more for the question."
        state = ["Group A:\n" + "\n".join(f"- {x}" for x in inp.a), "Group B:\n" + "\n".join(f"- {x}" for x in inp.b)]
        return laid_out(task + " Reply as JSON.", inp.question, state, "Preference as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: FacetPairInput, error: StructuredOutputError) -> Preference:
        return Preference(better="A")
