"""Roles are declarations: an agent's input and output models come from `Agent[I, O]`."""

from __future__ import annotations

from typing import TypeVar

import pytest
from pydantic import BaseModel

from marag.agents.answerer import AnswerInput, Answerer, AnswerOutput, StyledAnswer
from marag.agents.base import Agent


class A(BaseModel):
    x: str = ""


class B(BaseModel):
    y: str = ""


class C(A):
    z: str = ""


def test_input_and_output_come_from_the_type_arguments():
    class New(Agent[A, B]):
        name = "new"

    assert New.Input is A and New.Output is B
    assert New().Output is B


def test_through_mixins_subclasses_and_generic_intermediates():
    class Styled(StyledAnswer, Agent[A, AnswerOutput]):
        name = "styled"

    class Sub(Styled):  # no type arguments of its own: inherits
        name = "sub"

    class Wider(Sub):
        Input = C  # a deliberate difference stands

    class Deeper(Wider):
        pass

    X = TypeVar("X", bound=BaseModel)

    class Half(Agent[X, B]):  # still generic: allowed, its subclasses say the rest
        pass

    class Full(Half[A]):
        name = "full"

    assert (Styled.Input, Styled.Output) == (A, AnswerOutput)
    assert (Sub.Input, Sub.Output) == (A, AnswerOutput)
    assert (Wider.Input, Wider.Output) == (C, AnswerOutput) and Deeper.Input is C
    assert (Full.Input, Full.Output) == (A, B)
    assert (Answerer.Input, Answerer.Output) == (AnswerInput, AnswerOutput)


def test_an_agent_without_type_arguments_or_models_fails_when_defined():
    with pytest.raises(TypeError, match=r"Bare has no Input and no Output: subclass Agent\[InputModel, OutputModel\]"):

        class Bare(Agent):
            name = "bare"

    class Declared(Agent):  # setting them on the class still works
        name = "declared"
        Input = A
        Output = B

    assert (Declared.Input, Declared.Output) == (A, B)
