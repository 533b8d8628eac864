"""The validator: derives what a good response to this question must satisfy, then
judges the current response on three counts, each with short feedback:
valid (it answers what was asked, as asked), grounded (the documents support it) and
correct (it is right as far as the documents tell).

Fallback: no verdict at all (`Validation.checked` is False): the strategy reports that
nothing was checked, neither passing the response nor sending it back for revision.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, PrivateAttr, StringConstraints

from marag.agents.base import Agent
from marag.agents.mrag._shared import Doc, render_docs, laid_out
from marag.errors import StructuredOutputError
from marag.llm.base import Message

Criterion = Annotated[str, StringConstraints(max_length=100)]


class ValidatorInput(BaseModel):
    question: str
    response: str
    documents: list[Doc] = Field(default_factory=list)


class Verdict(BaseModel):
    ok: bool
    feedback: str = Field(max_length=150)


class Validation(BaseModel):
    criteria: list[Criterion] = Field(max_length=3)
    valid: Verdict
    grounded: Verdict
    correct: Verdict

    _checked: bool = PrivateAttr(default=True)  # False: the fallback, no verdict (not in the schema)

    @property
    def checked(self) -> bool:
        return self._checked

    def passed(self) -> bool:
        return self.valid.ok and self.grounded.ok and self.correct.ok


_SYSTEM = (
    "You check a response to a question. First list up to 3 things a good response "
    "must do. Then say whether the response is valid (answers what was asked), "
    "grounded (the documents support it) and correct, each with a short feedback. "
    "Reply as JSON."
)


class Validator(Agent[ValidatorInput, Validation]):
    name = "validator"
    max_tokens = 300

    def messages(self, inp: ValidatorInput) -> list[Message]:
        return laid_out(_SYSTEM, inp.question, [f"Response: {inp.response}"], "Check as JSON.", render_docs(inp.documents))

    def fallback(self, inp: ValidatorInput, error: StructuredOutputError) -> Validation:
        unchecked = Verdict(ok=False, feedback="not checked (the validator's output was unusable)")
        out = Validation(criteria=[], valid=unchecked, grounded=unchecked, correct=unchecked)
        out._checked = False
        return out
