"""An agent is one role: a prompt, a typed input, a typed output and a fallback.

Agents do not log and do not retry: the LLM port validates, repairs once and records the
call; the agent only opens a trace step, and when the port gives up
(`StructuredOutputError`) it returns its documented fallback instead of failing the
whole question.
"""

from __future__ import annotations

from typing import ClassVar, Generic, TypeVar

from pydantic import BaseModel

from marag.errors import StructuredOutputError
from marag.llm.base import LLM, Message
from marag.trace import step

I = TypeVar("I", bound=BaseModel)
O = TypeVar("O", bound=BaseModel)


class Agent(Generic[I, O]):
    name: ClassVar[str]
    Input: ClassVar[type[BaseModel]]
    Output: ClassVar[type[BaseModel]]
    max_tokens: ClassVar[int] = 256

    def messages(self, inp: I) -> list[Message]:
        """The conversation sent to the model for this input."""
        raise NotImplementedError

    def fallback(self, inp: I, error: StructuredOutputError) -> O:
        """What the agent returns when the model's output is unusable."""
        raise error

    async def __call__(self, llm: LLM, inp: I, temperature: float = 0.0, seed: int | None = None) -> O:
        with step(self.name, **inp.model_dump(mode="json")) as s:
            try:
                response = await llm.generate(
                    self.messages(inp),
                    output=self.Output,
                    temperature=temperature,
                    max_tokens=self.max_tokens,
                    seed=seed,
                )
                out = response.parsed
            except StructuredOutputError as exc:
                out = self.fallback(inp, exc)
                s.status, s.error = "fallback", str(exc).splitlines()[0]
            s.outputs = out.model_dump(mode="json")
            return out
