"""Answering: GET /health, /strategies, /indexes, POST /ask, GET /traces/{id}, and the
indexes /ask answers from (checked by name, opened once each)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends
from pydantic import Field

from marag.errors import MaragError, UnknownNameError
from marag.serve.answers import AskAnswer, Health, StrategyInfo, ok
from marag.serve.http import SafeJSON
from marag.serve.jobs import refuse_operator_settings
from marag.serve.state import RequestBody, ServeState, serve_state
from marag.serve.store import BadName
from marag.strategies import STRATEGIES

INDEX_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")

router = APIRouter()


class AskRequest(RequestBody):
    question: str = Field(min_length=1, description="The question.")
    strategy: str = Field(default="vanilla_rag", description="A strategy name (GET /strategies).")
    index: str | None = Field(default=None, description="An index name (GET /indexes); none: the only one served.")
    options: dict[str, Any] = Field(default_factory=dict, description="The strategy's settings, as `--set` gives them to `marag ask`.")


# Each index's retriever, by index name, as a task that opens it (`ServeState.opened`):
# opening connects to an index's server and loads its embedder (URIs) or reads its files
# and parts (directories), seconds of work for a large index, so it happens once per
# index, in a thread (the event loop keeps serving), and requests that come while it
# opens wait for the same task. A directory index is keyed by its manifest's modification
# time too, so one rebuilt in place is opened again; a failed opening is not kept.


def locate_index(st: ServeState, name: str | None) -> tuple[str, str | Path, int | None]:
    """(the index's name, its target, its version stamp), checked without opening it."""
    settings = st.settings
    if not settings.indexes_dir and not settings.index_uris:
        raise MaragError("this server has no indexes", hint="start it with --indexes DIR (or an index URI)")
    if name is None:
        names = available_indexes(st)
        if len(names) != 1:
            raise MaragError("name the index", hint=f"choose one of: {', '.join(names) or '(none)'}")
        name = names[0]
    if name in settings.index_uris:
        return name, settings.index_uris[name], None
    path = index_path(st, name)
    return name, path, (path / "manifest.json").stat().st_mtime_ns


async def named_retriever(st: ServeState, name: str, target: str | Path, stamp: int | None):
    from marag.index.uri import open_index

    opened = st.opened
    entry = opened.get(name)
    if entry is None or entry[0] != stamp:
        entry = opened[name] = (stamp, asyncio.ensure_future(asyncio.to_thread(lambda: open_index(target).retriever())))
    try:
        # shielded: a client that goes away must not cancel an opening others wait for
        return await asyncio.shield(entry[1])
    except Exception:
        if opened.get(name) is entry:
            del opened[name]
        raise


def index_path(st: ServeState, name: str) -> Path:
    settings = st.settings
    if not settings.indexes_dir:
        raise UnknownNameError(f"unknown index {name[:80]!r}", hint=f"choose one of: {', '.join(available_indexes(st)) or '(none)'}")
    root = Path(settings.indexes_dir).resolve()
    if not INDEX_NAME.fullmatch(name) or ".." in name:
        raise BadName(f"not a valid index name: {name[:80]!r}")
    path = (root / name).resolve()
    if not path.is_relative_to(root) or not (path / "manifest.json").is_file():
        raise UnknownNameError(f"unknown index {name!r}", hint=f"choose one of: {', '.join(available_indexes(st)) or '(none)'}")
    return path


def available_indexes(st: ServeState) -> list[str]:
    settings = st.settings
    root = Path(settings.indexes_dir) if settings.indexes_dir else None
    names = set(settings.index_uris)
    if root is not None and root.is_dir():
        names |= {d.name for d in root.iterdir() if (d / "manifest.json").is_file() and INDEX_NAME.fullmatch(d.name)}
    return sorted(names)


@router.get("/health", responses=ok(Health))
async def health():
    """Liveness and marag's version; needs no token."""
    import marag

    return {"status": "ok", "version": marag.__version__}


@router.get("/strategies", responses=ok(list[StrategyInfo]))
async def strategies():
    """The registered strategies: name, description, whether it needs an index."""
    return [{"name": n, "description": STRATEGIES.get(n).description, "needs_retriever": STRATEGIES.get(n).needs_retriever}
            for n in STRATEGIES.names()]  # fmt: skip


@router.get("/indexes", responses=ok(list[str]))
async def indexes(st: ServeState = Depends(serve_state)):
    """The names of the indexes this server answers from (`index` in POST /ask)."""
    return available_indexes(st)


@router.post("/ask", responses=ok(AskAnswer))
async def ask(req: AskRequest, st: ServeState = Depends(serve_state)):
    """Answer one question with a strategy. With no `index`, the only index served is used
    (with several, 400 names them). Returns the answer, its sources, usage and the trace id."""
    settings = st.settings
    if not req.question.strip():
        raise MaragError("the question is empty")
    if len(req.question) > settings.max_question_chars:
        raise MaragError(f"the question is over {settings.max_question_chars} characters")
    cls = STRATEGIES.get(req.strategy)
    refuse_operator_settings(req.strategy, req.options)
    config = cls.validate_config(req.options)
    where = locate_index(st, req.index) if cls.needs_retriever or req.index else None
    # the queue is checked before any work: a busy server answers 429 at once
    if st.waiting >= settings.max_queue + settings.max_concurrency:
        return SafeJSON({"error": "too many questions in progress", "hint": "retry later"}, 429)
    st.waiting += 1
    try:
        retriever = await named_retriever(st, *where) if where else None
        # in a thread: a strategy may load a model file when it is made (GINGER's cross-encoder)
        strategy = await asyncio.to_thread(cls, st.model, retriever, config)
        async with st.gate:
            answer = await strategy.run(req.question)
    finally:
        st.waiting -= 1
    trace = answer.trace.model_dump(mode="json")
    st.ask_traces[answer.trace.id] = trace
    while len(st.ask_traces) > 200:
        st.ask_traces.popitem(last=False)
    return {**answer.summary(), "trace_id": answer.trace.id}


@router.get("/traces/{trace_id}", responses=ok(dict[str, Any]))
async def get_trace(trace_id: str, st: ServeState = Depends(serve_state)):
    """One question's trace (every step, LLM call and search), from an answer or a run."""
    return st.find_trace(trace_id)[1]
