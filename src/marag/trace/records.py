"""The record of one run: steps, each with the LLM calls and searches made inside it.

Agents never write here. The strategy opens a step around each agent call
(`with step("searcher", inputs=...)`); the LLM and retriever ports append what they did
to whichever step is current (a context variable, so concurrent questions in one event
loop never mix their records).
"""

from __future__ import annotations

import contextlib
import contextvars
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator

from pydantic import BaseModel, Field


class TokenLogprob(BaseModel):
    """One generated token and the model's own log-probability for it (before any
    grammar or sampler narrowed the choice), with the best other token's
    (`runner_up`): how sure the model was of each token it wrote."""

    token: str
    logprob: float
    runner_up: float | None = None


class LLMCall(BaseModel):
    model: str
    messages: list[dict[str, str]]
    response: str
    schema_name: str | None = None
    prompt_tokens: int = 0
    # prompt tokens the server did not evaluate: a prefix it still held from an earlier
    # request (llama.cpp's per-slot prompt cache); the rest were evaluated
    reused_prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    started: float = 0.0  # wall clock (epoch seconds) when the call began: a trace's timeline
    cached: bool = False  # answered from marag's own response cache: nothing was spent
    repaired: bool = False
    error: str | None = None
    # the reply's tokens with their log-probabilities, when the caller asked for them and
    # the backend gives them (answering roles do: `auto` routes on the reader's confidence)
    logprobs: list[TokenLogprob] | None = None


class SearchCall(BaseModel):
    retriever: str
    query: str
    k: int
    offset: int = 0
    hits: list[dict[str, Any]] = Field(default_factory=list)  # doc_id, chunk_id, score
    latency_s: float = 0.0
    started: float = 0.0  # wall clock (epoch seconds) when the search began


class Step(BaseModel):
    agent: str
    # the role whose calls the step makes, qualified by the strategy running it
    # (`unirag.planner`; `current_role`), when that is not the trace's own strategy's
    # (a strategy running another's agents, as `auto` runs its agent's); None otherwise,
    # so older traces read the same
    role: str | None = None
    inputs: dict[str, Any] = Field(default_factory=dict)
    outputs: dict[str, Any] = Field(default_factory=dict)
    status: str = "ok"  # ok | fallback (unusable model output) | refused (precondition unmet) | error
    error: str | None = None
    started: float = Field(default_factory=time.time)
    latency_s: float = 0.0
    llm_calls: list[LLMCall] = Field(default_factory=list)
    searches: list[SearchCall] = Field(default_factory=list)


class Trace(BaseModel):
    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    question: str = ""
    strategy: str = ""
    config: dict[str, Any] = Field(default_factory=dict)
    steps: list[Step] = Field(default_factory=list)
    answer: str | None = None
    error: str | None = None
    budget: dict[str, Any] = Field(default_factory=dict)  # the question's hard limits, what it spent, what stopped it
    # every document a model was shown (chunk_id, doc_id, title), in the order first
    # shown: what the strategy *read*, as opposed to what its searches returned (a
    # reranker's candidates) or what its answer cites (`Answer.sources`)
    read: list[dict[str, str]] = Field(default_factory=list)

    # -- totals read by cost accounting, the viewer and trajectory export -----------
    def llm_calls(self) -> Iterator[LLMCall]:
        for s in self.steps:
            yield from s.llm_calls

    def searches(self) -> Iterator[SearchCall]:
        for s in self.steps:
            yield from s.searches

    def totals(self) -> dict[str, float]:
        calls = list(self.llm_calls())
        # a cache hit cost nothing in this run: count the call, not its tokens
        spent = [c for c in calls if not c.cached]
        searches = list(self.searches())
        pages = [(normalize_query(s.query), s.offset) for s in searches]
        prompt = sum(c.prompt_tokens for c in spent)
        reused = sum(c.reused_prompt_tokens for c in spent)
        return {
            "steps": len(self.steps),
            "llm_calls": len(calls),
            "cached_llm_calls": len(calls) - len(spent),
            "prompt_tokens": prompt,
            "prompt_tokens_reused": reused,
            "prompt_tokens_evaluated": prompt - reused,
            "completion_tokens": sum(c.completion_tokens for c in spent),
            # one number for comparing strategies' cost: thousands of evaluated prompt
            # tokens plus 4x thousands of completion tokens (generating costs ~4x reading,
            # in time on CPU and in most API prices)
            "cost_units": round((prompt - reused + 4 * sum(c.completion_tokens for c in spent)) / 1000, 4),
            "llm_latency_s": round(sum(c.latency_s for c in calls), 4),
            "searches": len(searches),
            "search_latency_s": round(sum(s.latency_s for s in searches), 4),
            # search progress: distinct queries, distinct chunks any search returned, and
            # searches that read a page (query, offset) already read
            "distinct_queries": len({q for q, _ in pages}),
            "docs_read": len({h.get("chunk_id") for s in searches for h in s.hits}),
            "repeated_searches": len(pages) - len(set(pages)),
        }


_current_trace: contextvars.ContextVar[Trace | None] = contextvars.ContextVar(
    "marag_trace", default=None
)
_current_step: contextvars.ContextVar[Step | None] = contextvars.ContextVar(
    "marag_step", default=None
)
# whose roles the steps are: the strategy running (`mrag`), so a step `planner` is the
# role `mrag.planner` (set by `activate(trace, roles=...)`; never written into the trace)
_role_scope: contextvars.ContextVar[str] = contextvars.ContextVar("marag_role_scope", default="")
_home_scope: contextvars.ContextVar[str] = contextvars.ContextVar("marag_home_scope", default="")


def busy_seconds(trace: "Trace") -> float:
    """Wall time covered by the trace's LLM calls and searches (overlapping ones counted
    once): what remains of a question's seconds is spent in the framework itself."""
    spans = sorted(
        (c.started, c.started + c.latency_s)
        for c in [*trace.llm_calls(), *trace.searches()]
        if c.started > 0
    )
    busy, end = 0.0, float("-inf")
    for a, b in spans:
        if b > end:
            busy += b - max(a, end)
            end = b
    return busy


def normalize_query(query: str) -> str:
    """A query as the index sees it, for telling repeats apart: case and spacing folded."""
    return " ".join(query.lower().split())


def current_trace() -> Trace | None:
    return _current_trace.get()


def current_step() -> Step | None:
    """The step open in this context (the innermost), if any: its `agent` is the role
    whose model calls are being made (what training exports and LoRA routing key on)."""
    return _current_step.get()


def current_role() -> str | None:
    """The role whose model calls are made now: the open step's agent qualified by the
    strategy running it (`mrag.planner`, `unirag.planner`), the bare agent name outside
    a strategy's run, None outside any step. Trace steps keep the bare name; the
    qualified one is what LoRA routing and training key on."""
    s = _current_step.get()
    if s is None:
        return None
    scope = _role_scope.get()
    return f"{scope}.{s.agent}" if scope else s.agent


@contextlib.contextmanager
def activate(trace: Trace, roles: str = "") -> Iterator[Trace]:
    """Make `trace` the one the ports write into, for the duration of the block;
    `roles`: the strategy whose roles its steps are (see `current_role`)."""
    # the roles a trace is opened with are its own; activating it again with another
    # strategy's roles (an agent run inside it) marks those steps with their role
    home = _home_scope.set(roles) if _current_trace.get() is not trace else None
    token = _current_trace.set(trace)
    scope = _role_scope.set(roles)
    try:
        yield trace
    finally:
        _role_scope.reset(scope)
        _current_trace.reset(token)
        if home is not None:
            _home_scope.reset(home)


@contextlib.contextmanager
def step(agent: str, **inputs: Any) -> Iterator[Step]:
    """Open a step in the current trace (a detached step when there is none)."""
    s = Step(agent=agent, inputs=_jsonable(inputs))
    trace = _current_trace.get()
    if trace is not None:
        s.role = _foreign_role(trace, agent)
        trace.steps.append(s)
    token = _current_step.set(s)
    t0 = time.perf_counter()
    try:
        yield s
    except BaseException as exc:
        s.status, s.error = "error", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        s.latency_s = round(time.perf_counter() - t0, 4)
        _current_step.reset(token)


def _target_step(agent: str) -> Step | None:
    """The step the ports write into; calls outside any step get a step of their own."""
    s = _current_step.get()
    if s is not None:
        return s
    trace = _current_trace.get()
    if trace is None:
        return None
    s = Step(agent=agent, role=_foreign_role(trace, agent))
    trace.steps.append(s)
    return s


def _foreign_role(trace: Trace, agent: str) -> str | None:
    """`scope.agent` when the roles in scope are not those the trace was opened with
    (see `Step.role`)."""
    scope, home = _role_scope.get(), _home_scope.get()
    return f"{scope}.{agent}" if scope and scope != home else None


def record_llm_call(call: LLMCall) -> None:
    s = _target_step("llm")
    if s is not None:
        s.llm_calls.append(call)


def record_read(hits: Iterable[Any]) -> None:
    """Note that these documents (anything with chunk_id, doc_id and title: a `Hit`) are
    about to be shown to a model. Strategies call it where they put retrieved documents
    into a prompt, so every strategy reports what it read the same way."""
    trace = _current_trace.get()
    if trace is None:
        return
    seen = {r["chunk_id"] for r in trace.read}
    for h in hits:
        if h.chunk_id not in seen:
            seen.add(h.chunk_id)
            trace.read.append({"chunk_id": h.chunk_id, "doc_id": h.doc_id, "title": getattr(h, "title", "")})


def record_search(call: SearchCall) -> None:
    s = _target_step("search")
    if s is not None:
        s.searches.append(call)


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel) or callable(getattr(type(value), "model_dump", None)):
        # (a model, or a value class that dumps as one: a retrieval `Hit`)
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def write_jsonl(traces: Iterable[Trace], path: str | Path, append: bool = True) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for t in traces:
            f.write(t.model_dump_json() + "\n")
    return path


def read_jsonl(path: str | Path) -> list[Trace]:
    with Path(path).open(encoding="utf-8") as f:
        return [Trace.model_validate_json(line) for line in f if line.strip()]
