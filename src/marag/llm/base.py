"""The LLM port: chat messages in, text (+ a validated pydantic object) out."""

from __future__ import annotations

from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, Field

from marag.trace import TokenLogprob

M = TypeVar("M", bound=BaseModel)


class Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0


class LLMResponse(BaseModel):
    text: str
    parsed: Any = None  # an instance of the requested output model, when one was given
    usage: Usage = Field(default_factory=Usage)
    model: str = ""
    cached: bool = False
    # the reply's tokens and their log-probabilities, when asked for (`logprobs=True`)
    # and the backend gives them (`supports_logprobs`); None otherwise
    logprobs: list[TokenLogprob] | None = None


@runtime_checkable
class LLM(Protocol):
    """One required coroutine. `output`, when given, is a pydantic model class: the
    backend constrains decoding to its JSON schema and returns the validated object in
    `LLMResponse.parsed` (or raises `StructuredOutputError`).

    A backend that can report the log-probability of each token it writes says so with
    `supports_logprobs = True` and accepts `logprobs=True` (callers check the flag
    before passing it, so a backend without it needs neither)."""

    model: str

    async def generate(
        self,
        messages: list[Message],
        output: type[BaseModel] | None = None,
        temperature: float = 0.0,
        max_tokens: int = 512,
        seed: int | None = None,
    ) -> LLMResponse: ...
