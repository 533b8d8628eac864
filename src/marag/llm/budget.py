"""Hard per-question budgets: LLM calls, tokens and seconds, whichever runs out first.

`Strategy.run` opens a `Budget` around each question (limits from the strategy's
config). The LLM port checks it before every round trip and charges it after, so no
loop in any strategy can spend past it. Once it is spent:
- further calls raise `BudgetExhausted` (a `StructuredOutputError`: the agent returns
  its fallback, and its trace step is marked `skipped`, with no model call);
- strategies see `spent()` and stop their loops;
- the final answer runs inside `grace()`, which lets its calls through, so the strategy
  answers from what it has.
The reason is reported (`Budget.stopped_by`) in the answer's usage and the trace.

Calls and tokens do not depend on the machine, so runs that stop on them are
reproducible; a deadline does depend on the machine's load (`--deterministic` turns
it off). A call already running when the deadline passes finishes: its length is
bounded by the agent's `max_tokens`.

A call whose reply does not parse is repaired with a second round trip only while the
budget has room for it; otherwise the agent falls back (a repair is one more prompt
as long as the first, and went unchecked).

Calls of one question may run at once (mRAG judges pages in parallel), so a call is
let through only if the calls and tokens *in flight* fit too: each reserves one call
and an estimate of its tokens (its prompt's characters / 4 plus its completion cap)
until it is charged. Without that, every concurrent call passed the check before any
was charged and the budget overshot by all of them; with it, by one call's size at most.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from marag.errors import StructuredOutputError


class BudgetExhausted(StructuredOutputError):
    """The question's budget is spent: the call was not made."""


@dataclass
class Budget:
    max_llm_calls: int | None = None
    max_tokens: int | None = None  # prompt + completion tokens (responses from marag's cache cost none)
    deadline_s: float | None = None
    calls: int = 0
    tokens: int = 0
    stopped_by: str | None = None  # the first limit that was reached
    _started: float = field(default_factory=time.monotonic, repr=False)
    _grace: int = field(default=0, repr=False)
    _in_flight: int = field(default=0, repr=False)
    _reserved: int = field(default=0, repr=False)  # estimated tokens of the calls in flight

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def spent(self) -> str | None:
        """The limit that is reached ("llm_calls", "tokens", "deadline"), else None.
        Calls in flight count as made: they will be charged when they return."""
        if self.stopped_by is None:
            if self.max_llm_calls is not None and self.calls + self._in_flight >= self.max_llm_calls:
                self.stopped_by = "llm_calls"
            elif self.max_tokens is not None and self.tokens + self._reserved >= self.max_tokens:
                self.stopped_by = "tokens"
            elif self.deadline_s is not None and self.elapsed() >= self.deadline_s:
                self.stopped_by = "deadline"
        return self.stopped_by

    def check(self) -> None:
        """Raise `BudgetExhausted` unless a call may go ahead."""
        if self._grace == 0 and (reason := self.spent()):
            limit = {"llm_calls": self.max_llm_calls, "tokens": self.max_tokens, "deadline": self.deadline_s}[reason]
            raise BudgetExhausted(
                f"budget spent ({reason} limit {limit}): call skipped",
                hint="raise max_llm_calls / max_tokens / deadline_s in the strategy's config (--set)",
            )

    def charge(self, prompt_tokens: int, completion_tokens: int) -> None:
        self.calls += 1
        self.tokens += prompt_tokens + completion_tokens

    def room(self, extra: int) -> bool:
        """Whether `extra` more tokens fit: asked before a call's repair round trip, with
        what the call spent so far (its own reservation stands in for the repair)."""
        if self._grace or self.max_tokens is None:
            return True
        return self.tokens + self._reserved + extra < self.max_tokens

    @contextlib.contextmanager
    def reserve(self, estimate: int) -> Iterator[None]:
        """Check, then hold one call and `estimate` tokens until the call is charged
        (the caller charges inside the block)."""
        self.check()
        self._in_flight += 1
        self._reserved += estimate
        try:
            yield
        finally:
            self._in_flight -= 1
            self._reserved -= estimate

    @contextlib.contextmanager
    def grace(self) -> Iterator[None]:
        """Let calls through (the final answer from what was collected)."""
        self._grace += 1
        try:
            yield
        finally:
            self._grace -= 1

    def report(self) -> dict[str, float | str | None]:
        return {
            "budget_llm_calls": self.calls,
            "budget_tokens": self.tokens,
            "stopped_by_budget": self.stopped_by,
        }


_current: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("marag_budget", default=None)


def current_budget() -> Budget | None:
    return _current.get()


def budget_spent() -> str | None:
    """The limit the current question's budget reached, if any (None without a budget)."""
    b = _current.get()
    return b.spent() if b is not None else None


@contextlib.contextmanager
def grace() -> Iterator[None]:
    """`Budget.grace()` of the current budget (a no-op without one)."""
    b = _current.get()
    if b is None:
        yield
    else:
        with b.grace():
            yield


@contextlib.contextmanager
def activate_budget(budget: Budget) -> Iterator[Budget]:
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)
