"""What a server's routes share: its settings, the runs store, the model, the limits and
caches, built once by `marag.serve.app.create_app`, kept on `app.state.serve` and handed
to each route by the `serve_state` dependency (no module globals: two apps in one
process share nothing)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.requests import Request

from marag.errors import UnknownNameError
from marag.serve import pages
from marag.serve.auth import MIN_TOKEN_CHARS, Sessions
from marag.serve.jobs import Jobs
from marag.serve.store import TRACE_ID, RunStore, check


class ServeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runs_dir: str = "runs"
    indexes_dir: str | None = None  # each subdirectory holding a manifest.json is an index, by its name
    index_uris: dict[str, str] = Field(default_factory=dict)  # name -> index URI (marag.index.uri); no secrets in them
    data_dir: str | None = None  # benchmark data for POST /runs
    llm: dict[str, Any] = Field(default_factory=lambda: {"backend": "llamacpp"})  # LLMConfig fields
    token: str | None = Field(default=None, min_length=MIN_TOKEN_CHARS)  # `marag serve` says how to make one
    max_body_bytes: int = Field(default=64_000, ge=1_000)
    body_timeout_s: float = Field(default=15.0, gt=0)  # a body not whole by then: 408, connection closed
    max_concurrency: int = Field(default=4, ge=1)
    max_queue: int = Field(default=16, ge=0)
    max_runs: int = Field(default=2, ge=1)  # evaluations running at once (POST /runs)
    max_question_chars: int = Field(default=2_000, ge=10)
    session_hours: float = Field(default=12.0, gt=0)  # a browser session's lifetime
    allowed_hosts: list[str] | None = None  # Host header names answered (None: any); loopback names for a loopback bind


def _unencodable(value: Any, where: str) -> str | None:
    """Where in `value` a string holds a lone surrogate (JSON can carry "\\ud800"; no
    UTF-8 text, prompt or page can), or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
    elif isinstance(value, dict):
        for k, v in value.items():
            name = str(k).encode("utf-8", "backslashreplace").decode()
            found = _unencodable(k, where) or _unencodable(v, f"{where}.{name}")
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _unencodable(v, f"{where}[{i}]")
            if found:
                return found
    return None


class RequestBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _valid_text(cls, data: Any) -> Any:
        where = _unencodable(data, "body")
        if where:
            raise ValueError(f"{where} is not valid Unicode text (it holds a lone surrogate such as \\ud800)")
        return data


@dataclass
class ServeState:
    settings: ServeSettings
    store: RunStore
    model: Any  # the LLM every answer and evaluation uses
    jobs: Jobs  # evaluations started over HTTP
    sessions: Sessions | None  # browser sessions; None without a token
    links: pages.Links
    gate: asyncio.Semaphore  # answers running at once
    waiting: int = 0  # answers running or queued
    ask_traces: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)  # recent /ask traces, newest last
    # each index's retriever being opened or open, by name: (version stamp, task); see routes_ask
    opened: dict[str, tuple[int | None, asyncio.Future]] = field(default_factory=dict)

    def find_trace(self, trace_id: str) -> tuple[str | None, dict[str, Any]]:
        """(the run holding it, or None for an /ask trace; the trace)."""
        check(trace_id, TRACE_ID, "trace id")
        if trace_id in self.ask_traces:
            return None, self.ask_traces[trace_id]
        for run_id, _ in self.store.runs():
            try:
                return run_id, self.store.trace(run_id, trace_id)
            except UnknownNameError:
                continue
        raise UnknownNameError(f"no trace {trace_id!r}")


def serve_state(request: Request) -> ServeState:
    """The dependency that hands a route its app's state."""
    return request.app.state.serve
