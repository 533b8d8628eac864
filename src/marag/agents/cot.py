"""Chain-of-thought without retrieval (RopMura's closed-book baseline): the model first
reasons step by step from its own knowledge, then gives its answer in the style asked.
Only the answer is the strategy's answer; the reasoning stays in the trace.

Fallback: the answer text the model produced, if any, else "I could not produce an
answer.".
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from marag.agents.answerer import FALLBACK_ANSWER, AnswerInput, AnswerStyle, StyledAnswer
from marag.agents.base import Agent, narrowed
from marag.agents.layout import laid_out
from marag.errors import StructuredOutputError
from marag.llm.base import Message

REASONING_MAX_CHARS = 1200


class ReasonedAnswer(BaseModel):
    reasoning: str = Field(max_length=REASONING_MAX_CHARS)
    answer: str = Field(max_length=1200)


class ChainOfThought(StyledAnswer, Agent[AnswerInput, ReasonedAnswer]):
    name = "cot"

    def __init__(self, style: AnswerStyle | None = None, reasoning_chars: int = REASONING_MAX_CHARS):
        self._set_style(style)
        out = narrowed(ReasonedAnswer, "reasoning", max_length=reasoning_chars)
        self.Output = narrowed(out, "answer", max_length=self.style.max_chars)
        self.max_tokens = self.style.max_tokens + reasoning_chars // 3

    def messages(self, inp: AnswerInput) -> list[Message]:
        task = (
            "You answer questions from your own knowledge, without any documents. First think it through "
            "step by step in the reasoning (the facts you recall and how they lead to the answer), then give "
            f"the answer. {self.style.instruction}"
        )
        return laid_out(task, inp.question, [], "Reasoning and answer as JSON.")

    def fallback(self, inp: AnswerInput, error: StructuredOutputError) -> ReasonedAnswer:
        m = re.search(r'"answer"\s*:\s*"([^"]+)', error.raw or "")
        answer = m.group(1) if m else FALLBACK_ANSWER
        return self.Output(reasoning="", answer=answer[: self.style.max_chars])
