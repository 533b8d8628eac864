"""The RopMura router's two model calls: grading the invited agents' responses
(reliable / conjecture / unhelpful), and the answer written from the reliable ones (or
from its own knowledge when none is). It sees the agents' analyses and answers only,
never their documents (except in the raw-knowledge ablation, where the agents send
passages).

Fallbacks: a response that says it does not know is unhelpful, any other a conjecture;
the answer falls back to the first reliable response's answer, else "I don't know".
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from marag.agents.answerer import AnswerOutput, AnswerStyle, StyledAnswer
from marag.agents.base import Agent, narrowed
from marag.agents.layout import laid_out, numbered_passages
from marag.agents.ropmura._shared import DONT_KNOW, PREAMBLE, Response, render_responses
from marag.errors import StructuredOutputError
from marag.llm.base import Message

Grade = Literal["reliable", "conjecture", "unhelpful"]


class GradeInput(BaseModel):
    question: str
    responses: list[Response]


class Grades(BaseModel):
    grades: list[Grade]


_GRADE_TASK = (
    "You grade the specialists' responses to the question, in order: reliable (a good answer its "
    "quoted documents support), conjecture (an answer the quotes do not really support) or "
    "unhelpful (no answer, or off the question)."
)


class Grader(Agent[GradeInput, Grades]):
    name = "router.grade"
    Input = GradeInput
    Output = Grades

    def __init__(self, n: int):
        self.Output = narrowed(Grades, "grades", min_length=n, max_length=n)
        self.max_tokens = 16 + 8 * n

    def messages(self, inp: GradeInput) -> list[Message]:
        return laid_out(_GRADE_TASK + " Reply as JSON.", inp.question, [f"Responses:\n{render_responses(inp.responses)}"], f"{len(inp.responses)} grades as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: GradeInput, error: StructuredOutputError) -> Grades:
        return Grades(grades=["unhelpful" if DONT_KNOW.lower() in r.answer.lower() else "conjecture" for r in inp.responses])


class RouterInput(BaseModel):
    question: str
    responses: list[Response] = Field(default_factory=list)  # the reliable ones
    passages: list[str] = Field(default_factory=list)  # raw-knowledge ablation: the agents' passages


class RouterAnswer(StyledAnswer, Agent[RouterInput, AnswerOutput]):
    name = "router.answer"
    Input = RouterInput
    Output = AnswerOutput

    def __init__(self, style: AnswerStyle | None = None):
        self._set_style(style)

    def messages(self, inp: RouterInput) -> list[Message]:
        if inp.passages:
            task = f"You answer the question from the passages the specialists sent. {self.style.instruction}"
            state = [f"Passages:\n{numbered_passages(inp.passages)}"]
        elif inp.responses:
            task = f"You answer the question from the specialists' reliable responses. {self.style.instruction}"
            state = [f"Responses:\n{render_responses(inp.responses)}"]
        else:
            task = f"No specialist could answer: answer the question from your own knowledge. {self.style.instruction}"
            state = []
        return laid_out(task + " Reply as JSON.", inp.question, state, f"Question: {inp.question}\nAnswer as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: RouterInput, error: StructuredOutputError) -> AnswerOutput:
        first = next((r.answer for r in inp.responses), DONT_KNOW)
        return self.Output(answer=first[: self.style.max_chars])
