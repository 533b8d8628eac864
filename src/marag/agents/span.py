"""The span of a short answer that stayed a sentence: one small, separate call that
sees only the question and the sentence and copies out the words that answer.

Why a separate call: the answering roles send a sentence back once, in the same
conversation (`StyledAnswer.recheck`), and the default model (Qwen2.5-Coder-1.5B) mostly
obliges, but some sentences came back unchanged ("It is a 5-star luxury hotel located in
Ortigas Center, ..." for "What is the Edsa Shangri-La an instance of?"): in front of
its passages the model keeps its reading; shown the sentence alone, it picks the span.
Measured offline and replayed: docs/strategies/index.md, benchmarks/RESULTS.md.

The caller (`StyledAnswer.settle`) keeps the span only if it passes `keeps`; otherwise
the sentence stands. The call runs on the answering role's model, under its own role
name (`<family>.span`, which is also what LoRA routing sees).

Fallback: the sentence itself (which `keeps` then refuses: it is not shorter).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from marag.agents.answer_types import FUNCTION_WORDS, wrong_kind
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
        # not validated: a long style's sentence may exceed the span's own limit
        return Span.model_construct(answer=inp.sentence)


def copied_from(span: str, sentence: str) -> bool:
    """Whether `span` is a shorter run of the sentence's own words (case and punctuation
    aside), with at least one word that is not a function word ("the", "is")."""
    mine, theirs = _WORD.findall(span.lower()), _WORD.findall(sentence.lower())
    if not mine or len(mine) >= len(theirs) or set(mine) <= FUNCTION_WORDS:
        return False
    return f" {' '.join(mine)} " in f" {' '.join(theirs)} "


def keeps(question: str, sentence: str, span: str, echoes: bool) -> bool:
    """Whether the span replaces the sentence: copied from it (a small model also
    "shortens" to a name the sentence does not hold), not only the question's words
    (`echoes`, the caller's `echoes_question`), and of the kind asked wherever the
    sentence was."""
    fits = wrong_kind(question, span) is None or wrong_kind(question, sentence) is not None
    return copied_from(span, sentence) and not echoes and fits
