"""An agent is one role: a prompt, a typed input, a typed output and a fallback.

Agents do not log and do not retry: the LLM port validates, repairs once and records the
call; the agent only opens a trace step (and, when its `recheck` finds a usable reply
wanting, asks once more with a note saying why, and its `settle` may make one
separate call after the step), and when the port gives up
(`StructuredOutputError`) it returns its documented fallback instead of failing the
whole question. When the question's budget is spent the port makes no call at all and
the step is marked `skipped` (the fallback stands in).
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Generic, TypeVar, get_args, get_origin

from pydantic import BaseModel, Field, create_model

from marag.errors import StructuredOutputError
from marag.llm.base import LLM, Message
from marag.llm.budget import BudgetExhausted
from marag.trace import step

I = TypeVar("I", bound=BaseModel)
O = TypeVar("O", bound=BaseModel)


@functools.cache
def _narrowed(model: type[BaseModel], field: str, constraints: tuple[tuple[str, Any], ...]) -> type[BaseModel]:
    info = model.model_fields[field]
    default = {} if info.is_required() else {"default": info.default}
    spec = (info.annotation, Field(**default, **dict(constraints)))
    return create_model(model.__name__, __base__=model, **{field: spec})


def narrowed(model: type[BaseModel], field: str, **constraints: Any) -> type[BaseModel]:
    """`model` with new constraints on one field, e.g. `narrowed(AnswerOutput, "answer",
    max_length=1500)` or a list of exactly n labels (`min_length=n, max_length=n`).
    Same class name, so traces and error messages read the same; cached, so the LLM
    layer sees one class per variant."""
    return _narrowed(model, field, tuple(sorted(constraints.items())))


def _type_arguments(cls: type) -> tuple[Any, Any] | None:
    """The (input, output) that `cls` gives `Agent[I, O]` through its generic bases,
    followed down subclass chains (`ListJudge[A, B]` over `Agent[I, O]`) and past mixins
    (`StyledAnswer`); None when no base of its own gives them."""
    for base in cls.__dict__.get("__orig_bases__", ()):  # its own bases only: the rest is inherited
        origin = get_origin(base)
        if not (isinstance(origin, type) and issubclass(origin, Agent)):
            continue
        args = get_args(base)
        if origin is Agent:
            return args[0], args[1]
        inner = _type_arguments(origin)  # a generic subclass: put our arguments in for its parameters
        if inner is not None:
            bound = dict(zip(getattr(origin, "__parameters__", ()), args))
            return bound.get(inner[0], inner[0]), bound.get(inner[1], inner[1])
    return None


class Agent(Generic[I, O]):
    """`class Planner(Agent[PlanInput, Plan])` declares the role's input and output
    models: `Planner.Input is PlanInput`, `Planner.Output is Plan` (set from the type
    arguments unless the class sets them itself, e.g. a subclass with a wider input)."""

    name: ClassVar[str]
    Input: ClassVar[type[BaseModel]]
    # The class default; an instance may narrow it (a longer answer, an exact number of
    # labels) by assigning `self.Output` / `self.max_tokens`.
    Output: type[BaseModel]
    max_tokens: int = 256
    # ask the model for each token's log-probability (where the backend has them): the
    # answering roles do, so that `auto` can route on the reader's confidence and runs
    # record it (`LLMCall.logprobs`)
    logprobs: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        args = _type_arguments(cls)
        for attr, arg in zip(("Input", "Output"), args or (None, None)):
            if attr not in cls.__dict__ and isinstance(arg, type):
                setattr(cls, attr, arg)
        if getattr(cls, "__parameters__", ()):  # still generic (`ListJudge(Agent[I, O])`): its subclasses say
            return
        missing = [attr for attr in ("Input", "Output") if not isinstance(getattr(cls, attr, None), type)]
        if missing:
            raise TypeError(
                f"agent {cls.__qualname__} has no {' and no '.join(missing)}: subclass Agent[InputModel, OutputModel] "
                "(or a subclass that gives them), or set them on the class"
            )

    def messages(self, inp: I) -> list[Message]:
        """The conversation sent to the model for this input."""
        raise NotImplementedError

    def fallback(self, inp: I, error: StructuredOutputError) -> O:
        """What the agent returns when the model's output is unusable."""
        raise error

    def finish(self, out: O) -> O:
        """The last word on a parsed or fallback output (default: unchanged)."""
        return out

    def recheck(self, inp: I, out: O) -> str | None:
        """A note that sends a parsed output back once, or None to keep it (default).

        The note is the user's next turn after the model's reply; the second reply
        stands, whatever it says (one turn, never a loop)."""
        return None

    async def settle(self, llm: LLM, inp: I, out: O, temperature: float = 0.0, seed: int | None = None) -> O:
        """The last word on a parsed output once its step has closed (default: unchanged;
        never called on a fallback). An agent may make one more, separate call here, in a
        step of its own (the answering roles: the span of an answer that stayed a
        sentence, `marag.agents.span`)."""
        return out

    async def __call__(self, llm: LLM, inp: I, temperature: float = 0.0, seed: int | None = None) -> O:
        extra = {"logprobs": True} if self.logprobs and getattr(llm, "supports_logprobs", False) else {}

        async def ask(messages: list[Message]) -> O:
            response = await llm.generate(messages, output=self.Output, temperature=temperature, max_tokens=self.max_tokens, seed=seed, **extra)
            return self.finish(response.parsed)

        with step(self.name, **inp.model_dump(mode="json")) as s:
            messages = self.messages(inp)
            try:
                out = await ask(messages)
            except StructuredOutputError as exc:
                out = self.finish(self.fallback(inp, exc))
                # skipped: the budget was spent, so no call was made (not the model's fault)
                s.status = "skipped" if isinstance(exc, BudgetExhausted) else "fallback"
                s.error = str(exc).splitlines()[0]
            note = self.recheck(inp, out) if s.status == "ok" else None
            first = out
            if note:
                reply = Message(role="assistant", content=out.model_dump_json())
                try:
                    out = await ask([*messages, reply, Message(role="user", content=note)])
                except StructuredOutputError:
                    pass  # the first reply stands (also when the budget is spent)
            s.outputs = out.model_dump(mode="json")
            if note:
                s.outputs["rechecked"] = {"note": note, "first": first.model_dump(mode="json")}
        # a fallback (or a skipped call) is not the model's reply: nothing to settle
        return await self.settle(llm, inp, out, temperature, seed) if s.status == "ok" else out
