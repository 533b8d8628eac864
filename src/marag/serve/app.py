"""`marag serve`: the library over HTTP, and the trajectory viewer.

    POST /ask              {question, strategy, index, options} -> answer, sources, trace id
    POST /runs             {dataset, strategies, limit, options, metrics} -> a background evaluation
    GET  /runs             the runs in the runs directory
    GET  /runs/{id}        a run's settings, per-strategy means, and status
    GET  /runs/{id}/events progress of an evaluation (server-sent events; ends with its final state)
    GET  /traces/{id}      one question's trace (JSON)
    GET  /strategies, /indexes, /health; API docs at /docs (OpenAPI at /openapi.json)
    GET  /  and /view/...  the viewer pages (`marag.serve.pages`)
    GET/POST /signin, POST /signout   a browser session (see `marag.serve.auth`)

Safety (documents, model outputs, run folders and requests are untrusted): the server
binds 127.0.0.1 unless told otherwise; with a token, every request but /health and
sign-in needs `Authorization: Bearer <token>` or, for reading, a session cookie
(`marag.serve.http.Gate`); bodies must arrive whole, under `max_body_bytes`, within
`body_timeout_s`; answering is limited to `max_concurrency` at once with `max_queue`
waiting and evaluations to `max_runs` (more get 429); strategy, dataset, metric and
index names are checked against registries and the configured index directory before
any work starts; options may not set what names a model, file, URL, directory or
environment variable (`OPERATOR_ONLY` in `marag.strategies.base`: those are the
operator's, set when the server starts); run, trace and file names against strict
patterns, and every file read must resolve inside the runs directory
(`marag.serve.store`). Every error a request can cause is a 4xx JSON answer with a
message and a hint.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from pydantic import ValidationError

# at module level: FastAPI resolves the handlers' annotations (strings here) by name in this module
from starlette.requests import Request

from marag.errors import MaragError, UnknownNameError
from marag.serve import pages
from marag.serve.state import ServeSettings, ServeState
from marag.serve.store import BadName, RunConflict, RunStore

__all__ = ["ServeSettings", "create_app"]

log = logging.getLogger("marag.serve")

# HTTP status of each error kind; the first class an error is an instance of decides.
STATUS: list[tuple[type[Exception], int]] = [(BadName, 400), (RunConflict, 409), (UnknownNameError, 404), (MaragError, 400)]


def _problems(errors: list[dict[str, Any]]) -> str:
    """Pydantic's errors as one line, without the input values (they may be huge or
    not encodable; the client has them)."""
    out = []
    for err in errors[:10]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        out.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(out)[:2000]


def create_app(settings: ServeSettings, llm=None):
    """The FastAPI application. `llm` overrides the model built from `settings.llm`
    (tests pass a scripted one)."""
    from fastapi import FastAPI

    from marag.llm import LLMConfig, make_llm
    from marag.serve import routes_ask, routes_auth, routes_pages, routes_runs
    from marag.serve.answers import ERRORS
    from marag.serve.auth import Sessions
    from marag.serve.docs import add_docs
    from marag.serve.http import OPEN_PATHS, Gate, SafeJSON
    from marag.serve.jobs import Jobs

    app = FastAPI(title="marag", description="Multi-agent RAG: ask, evaluate, and view trajectories.",
                  docs_url=None, redoc_url=None, default_response_class=SafeJSON, responses=ERRORS)  # fmt: skip
    sessions = Sessions(settings.token, max_age_s=int(settings.session_hours * 3600)) if settings.token else None
    app.state.serve = ServeState(settings=settings, store=RunStore(settings.runs_dir), model=llm or make_llm(LLMConfig.model_validate(settings.llm)),
                                 jobs=Jobs(settings.max_runs), sessions=sessions, links=pages.Links(static=False, signout=sessions is not None),
                                 gate=asyncio.Semaphore(settings.max_concurrency))  # fmt: skip
    app.add_middleware(Gate, sessions=sessions, token=settings.token, max_body_bytes=settings.max_body_bytes,
                       body_timeout_s=settings.body_timeout_s,
                       allowed_hosts=frozenset(settings.allowed_hosts) if settings.allowed_hosts is not None else None)  # fmt: skip
    add_docs(app, OPEN_PATHS, secured=bool(settings.token))
    _add_error_handlers(app)
    for routes in (routes_auth, routes_ask, routes_runs, routes_pages):  # in this order: the schema lists paths as added
        app.include_router(routes.router)
    app.state.started = time.time()
    return app


def _add_error_handlers(app) -> None:
    """Every error as JSON with a message and a hint."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    from marag.serve.http import SafeJSON

    @app.exception_handler(MaragError)
    async def marag_error(request: Request, exc: MaragError):
        status = next(code for cls, code in STATUS if isinstance(exc, cls))
        if isinstance(exc, UnknownNameError) and request.url.path in ("/ask", "/runs"):
            status = 400  # an unknown strategy or dataset is a bad request, not a missing page
        return SafeJSON({"error": exc.message, "hint": exc.hint}, status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):  # no such route or method
        return SafeJSON({"error": str(exc.detail), "hint": "GET /docs lists the routes"}, exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        return SafeJSON({"error": f"invalid request: {_problems(exc.errors())}", "hint": "GET /docs shows each request's fields"}, 422)

    @app.exception_handler(ValidationError)
    async def invalid_settings(request: Request, exc: ValidationError):  # options that build a bad config
        return SafeJSON({"error": f"invalid {exc.title} settings: {_problems(exc.errors())}", "hint": "check the options"}, 400)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception):  # a bug: logged with its traceback, never shown
        log.exception("error serving %s %s", request.method, request.url.path)
        return SafeJSON({"error": "internal error", "hint": "the server's log has the details"}, 500)
