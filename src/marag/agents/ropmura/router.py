"""The RopMura router's one model call per routed question: it grades every invited
agent's response (reliable / conjecture / unhelpful) and answers the question from the
reliable ones, or from its own knowledge when none is, with the conversation so far
(the planner's earlier sub-questions and answers) in view. It sees the agents' analyses
and answers only, never their documents (except in the raw-knowledge ablation, where
the agents send passages and there is nothing to grade).

Fallback: a response that says it does not know is unhelpful, any other a conjecture;
the answer is the first response that is not unhelpful, else what the model wrote,
else "I don't know".
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from marag.agents.answerer import AnswerStyle, StyledAnswer
from marag.agents.base import Agent, narrowed
from marag.agents.layout import laid_out, numbered_passages
from marag.agents.ropmura._shared import DONT_KNOW, PREAMBLE, Record, Response, render_records, render_responses
from marag.errors import StructuredOutputError
from marag.llm.base import Message

Grade = Literal["reliable", "conjecture", "unhelpful"]


class RouterInput(BaseModel):
    question: str
    responses: list[Response] = Field(default_factory=list)  # every invited agent's reply, graded in order
    passages: list[str] = Field(default_factory=list)  # raw-knowledge ablation: the agents' passages
    records: list[Record] = Field(default_factory=list)  # the conversation so far (the planner's rounds)


class RouterReply(BaseModel):
    grades: list[Grade] = Field(default_factory=list)
    answer: str = Field(max_length=1200)


_GRADES = (
    "Grade each response, in order: reliable (a good answer its quoted documents support), conjecture "
    "(an answer the quotes do not really support) or unhelpful (no answer, or off the question). Then "
)


class Router(StyledAnswer, Agent[RouterInput, RouterReply]):
    name = "router.answer"

    def __init__(self, style: AnswerStyle | None = None, n: int = 0):
        self._set_style(style)
        self.n = n
        out = narrowed(RouterReply, "answer", max_length=self.style.max_chars)
        self.Output = narrowed(out, "grades", min_length=n, max_length=n)
        self.max_tokens = self.style.max_tokens + 16 + 8 * n

    def messages(self, inp: RouterInput) -> list[Message]:
        history = f"Conversation so far:\n{render_records(inp.records)}" if inp.records else ""
        if inp.passages:
            task = f"You answer the question from the passages the specialists sent. {self.style.instruction}"
            state = [history, f"Passages:\n{numbered_passages(inp.passages)}"]
        elif inp.responses:
            task = (
                "You are the router: specialists answered the question from their own collections. "
                f"{_GRADES}answer the question from the reliable responses; if none is reliable, from your own "
                f"knowledge. {self.style.instruction}"
            )
            state = [history, f"Responses:\n{render_responses(inp.responses)}"]
        else:
            task = f"No specialist was asked: answer the question from your own knowledge. {self.style.instruction}"
            state = [history]
        ask = f"{len(inp.responses)} grades and the answer as JSON." if inp.responses and not inp.passages else "Answer as JSON."
        return laid_out(task + " Reply as JSON.", inp.question, state, f"Question: {inp.question}\n{ask}", preamble=PREAMBLE)

    def fallback(self, inp: RouterInput, error: StructuredOutputError) -> RouterReply:
        grades = ["unhelpful" if DONT_KNOW.lower() in r.answer.lower() else "conjecture" for r in inp.responses][: self.n]
        grades += ["unhelpful"] * (self.n - len(grades))
        first = next((r.answer for r, g in zip(inp.responses, grades) if g != "unhelpful"), "")
        if not first:
            m = re.search(r'"answer"\s*:\s*"([^"]+)', error.raw or "")
            first = m.group(1) if m else DONT_KNOW
        return self.Output(grades=grades, answer=first[: self.style.max_chars])
