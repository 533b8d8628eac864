"""GINGER's response writing: one sentence per facet (a cluster of nuggets), grounded
only in that cluster's nuggets; then a fluency rewrite of the sentences that may not add
information. The rewrite returns one sentence per input sentence, in order, so each
final sentence keeps the passage ids of the facet it came from.

For a short answer style (a name, a date, a phrase: HotpotQA, MuSiQue, NQ) our
`ConciseAnswerer` reads the facet sentences and gives the answer in the style's words
and length; it sees nothing but those grounded sentences.

Fallbacks: a facet's sentence is its first nugget; the fluency step keeps the sentences;
the concise answer keeps whatever answer text the model produced, else the first
sentence (clipped to the style's length).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from marag.agents.answerer import AnswerOutput, AnswerStyle, StyledAnswer
from marag.agents.base import Agent, narrowed
from marag.agents.ginger._shared import PREAMBLE
from marag.agents.layout import clip, laid_out, numbered_lines
from marag.errors import StructuredOutputError
from marag.llm.base import Message

Sentence = Annotated[str, StringConstraints(max_length=300)]


class FacetInput(BaseModel):
    question: str
    nuggets: list[str]
    words: int = 35


class FacetSentence(BaseModel):
    sentence: str = Field(max_length=300)


class FacetSummarizer(Agent[FacetInput, FacetSentence]):
    name = "summarizer"
    max_tokens = 90

    def messages(self, inp: FacetInput) -> list[Message]:
        task = f"Write one sentence (about {inp.words} words) that answers the question using only these facts."
        facts = "\n".join(f"- {n}" for n in inp.nuggets)
        return laid_out(task + " Reply as JSON.", inp.question, [f"Facts:\n{facts}"], "Sentence as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: FacetInput, error: StructuredOutputError) -> FacetSentence:
        return FacetSentence(sentence=inp.nuggets[0][:300] if inp.nuggets else "")


class FluencyInput(BaseModel):
    question: str
    sentences: list[str]


class Fluent(BaseModel):
    sentences: list[Sentence]


class FluencyRewriter(Agent[FluencyInput, Fluent]):
    name = "fluency"

    def __init__(self, n: int):
        self.Output = narrowed(Fluent, "sentences", min_length=n, max_length=n)
        self.max_tokens = 30 + 80 * n

    def messages(self, inp: FluencyInput) -> list[Message]:
        task = (
            "Rewrite these sentences so they read as one fluent answer to the question. Keep one sentence for each, "
            "in the same order, and add no information."
        )
        listed = numbered_lines(inp.sentences)
        return laid_out(task + " Reply as JSON.", inp.question, [f"Sentences:\n{listed}"], f"{len(inp.sentences)} sentences as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: FluencyInput, error: StructuredOutputError) -> Fluent:
        return Fluent(sentences=list(inp.sentences))


class ConciseInput(BaseModel):
    question: str
    sentences: list[str]


class ConciseAnswerer(StyledAnswer, Agent[ConciseInput, AnswerOutput]):
    name = "concise_answer"

    def __init__(self, style: AnswerStyle):
        self._set_style(style)

    def messages(self, inp: ConciseInput) -> list[Message]:
        task = f"Answer the question from these statements alone. {self.style.instruction}"
        listed = numbered_lines(inp.sentences)
        return laid_out(task + " Reply as JSON.", inp.question, [f"Statements:\n{listed}"], "Answer as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: ConciseInput, error: StructuredOutputError) -> AnswerOutput:
        first = clip(inp.sentences[0], self.style.max_chars) if inp.sentences else ""
        return self.salvage(error, default=first) if error.raw.strip() else self.Output(answer=first)
