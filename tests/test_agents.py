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


def test_roles_are_qualified_by_the_strategy_and_come_from_its_agents():
    from marag.strategies import STRATEGIES

    mrag, unirag = STRATEGIES.get("mrag"), STRATEGIES.get("unirag")
    assert STRATEGIES.get("mrag_paper").roles() == mrag.roles() and STRATEGIES.get("mrag_paper").family() == "mrag"
    assert {"mrag.planner", "mrag.searcher", "mrag.searcher.query", "mrag.answerer"} <= set(mrag.roles())
    assert "mrag.searcher.query" not in mrag.roles(nested=False)  # held by the searcher, not called by mRAG
    assert "unirag.planner" in unirag.roles() and "mrag.planner" not in unirag.roles()
    assert unirag.trainable_roles() == ("unirag.planner", "unirag.reflector")
    assert "mrag.answerer" not in mrag.trainable_roles() and "mrag.searcher.judge" in mrag.trainable_roles()


def test_role_settings_take_qualified_names_and_bare_ones_with_a_warning():
    from marag.llm import ScriptedLLM
    from marag.strategies import make_strategy
    from marag.strategies.base import RoleNameWarning

    s = make_strategy("unirag_paper", ScriptedLLM(), object(), {"role_temperatures": {"unirag.planner": 0.7}})
    assert s.role_setting(s.config.role_temperatures, "planner", 0.0) == 0.7
    with pytest.warns(RoleNameWarning, match="'reflector': bare role names are deprecated, write 'unirag.reflector'"):
        s = make_strategy("unirag", ScriptedLLM(), object(), {"role_temperatures": {"reflector": 0.3}})
    assert s.config.role_temperatures == {"reflector": 0.3}  # kept as written: a run's settings (and id) are unchanged
    assert s.role_setting(s.config.role_temperatures, "reflector", 0.0) == 0.3
    with pytest.warns(RoleNameWarning, match="write 'mrag.searcher'"):
        m = make_strategy("mrag", ScriptedLLM(), object(), {"role_temperatures": {"searcher": 0.5, "mrag.answerer": 0.1}})
    assert (m._temperature("searcher"), m._temperature("answerer"), m._temperature("planner")) == (0.5, 0.1, 0.0)
    from marag.errors import MaragError

    with pytest.raises(MaragError, match="unknown role 'mrag.searcher.query': choose among mrag.coordinator"):
        make_strategy("mrag", ScriptedLLM(), object(), {"role_temperatures": {"mrag.searcher.query": 0.5}})
    with pytest.raises(MaragError, match="unknown role 'mrag.planner'"):
        make_strategy("unirag", ScriptedLLM(), object(), {"role_temperatures": {"mrag.planner": 0.5}})
