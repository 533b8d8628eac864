"""The span of a short answer that stayed a sentence: one small, separate call that
sees only the question and the sentence and copies out the words that answer.

Why a separate call: the answering roles send a sentence back once, in the same
conversation (`StyledAnswer.recheck`), and the default model (Qwen2.5-Coder-1.5B) mostly
obliges, but some sentences came back unchanged ("It is a 5-star luxury hotel located in
Ortigas Center, ..." for "What is the Edsa Shangri-La an instance of?"): in front of
its passages the model keeps its reading. Shown the sentence alone it picks the span:
offline over the 23 distinct sentence answers of the default model's runs of
2026-11-28/29 (20 with a gold answer), their F1 summed 1.50 as written and 5.49 as the
spans this prompt gave ("hotel", "Barnaby Joyce", "South Pacific", "lead vocalist and
primary songwriter"); one fell (.12 -> 0: "1932" for a tornado outbreak's whole name).

The caller keeps the span only if it is copied from the sentence (`copied_from`: a
small model also "shortens" to a name the sentence does not hold), does not just repeat
the question and is not of a wrong kind where the sentence was not
(`StyledAnswer.settle`); otherwise the sentence stands.

Fallback: the sentence itself.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.layout import laid_out
from marag.errors import StructuredOutputError
from marag.llm.base import Message

_TASK = (
    "You shorten answers. You are given a question and an answer written as a full sentence. "
    "Reply with the shortest part of that sentence that still answers the question: a name, a date, "
    "a number or a noun phrase, copied as written. Leave out the words that repeat the question and "
    "any description. Reply with JSON only."
)
_WORD = re.compile(r"\w+")


class SpanInput(BaseModel):
    question: str
    sentence: str


class Span(BaseModel):
    answer: str = Field(max_length=200)


class SpanReader(Agent[SpanInput, Span]):
    name = "span"
    max_tokens = 80

    def messages(self, inp: SpanInput) -> list[Message]:
        return laid_out(_TASK, inp.question, [f"Sentence: {inp.sentence}"], "\nShort answer as JSON.", gap="\n")

    def fallback(self, inp: SpanInput, error: StructuredOutputError) -> Span:
        return Span(answer=inp.sentence)


def copied_from(span: str, sentence: str) -> bool:
    """Whether `span` is a shorter run of the sentence's own words (case and punctuation
    aside): every word of it occurs in the sentence, and it has fewer words."""
    mine, theirs = _WORD.findall(span.lower()), _WORD.findall(sentence.lower())
    return bool(mine) and len(mine) < len(theirs) and set(mine) <= set(theirs)
