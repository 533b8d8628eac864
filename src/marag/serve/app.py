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
import re
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

# at module level: FastAPI resolves the routes' annotations (strings here) by name in this module
from starlette.requests import Request

from marag.errors import MaragError, UnknownNameError
from marag.serve import pages
from marag.serve.auth import MIN_TOKEN_CHARS
from marag.serve.store import RUN_ID, TRACE_ID, BadName, RunConflict, RunStore, check

INDEX_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
log = logging.getLogger("marag.serve")

# HTTP status of each error kind; the first class an error is an instance of decides.
STATUS: list[tuple[type[Exception], int]] = [(BadName, 400), (RunConflict, 409), (UnknownNameError, 404), (MaragError, 400)]


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


class AskRequest(RequestBody):
    question: str = Field(min_length=1, description="The question.")
    strategy: str = Field(default="vanilla_rag", description="A strategy name (GET /strategies).")
    index: str | None = Field(default=None, description="An index name (GET /indexes); none: the only one served.")
    options: dict[str, Any] = Field(default_factory=dict, description="The strategy's settings, as `--set` gives them to `marag ask`.")


class RunRequest(RequestBody):
    dataset: str = Field(description="A registered dataset whose data the server has (`marag datasets`).")
    strategies: list[str] = Field(min_length=1, max_length=10, description="Strategy names.")
    limit: int = Field(default=10, ge=1, le=1000, description="The first N questions.")
    options: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Per strategy, its settings.")
    metrics: list[str] | None = Field(default=None, max_length=30, description="Metric names (default: the dataset's).")


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
    from fastapi import FastAPI, Query
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import FileResponse, RedirectResponse, StreamingResponse
    from starlette.exceptions import HTTPException

    from marag.llm import LLMConfig, make_llm
    from marag.serve.auth import Sessions, cookie_name, safe_next
    from marag.serve.docs import add_docs
    from marag.serve.http import OPEN_PATHS, Gate, SafeHTML, SafeJSON
    from marag.serve.jobs import Jobs, refuse_operator_settings
    from marag.strategies import STRATEGIES

    app = FastAPI(title="marag", description="Multi-agent RAG: ask, evaluate, and view trajectories.",
                  docs_url=None, redoc_url=None, default_response_class=SafeJSON)  # fmt: skip
    store = RunStore(settings.runs_dir)
    model = llm or make_llm(LLMConfig.model_validate(settings.llm))
    gate = asyncio.Semaphore(settings.max_concurrency)
    state = {"waiting": 0}
    ask_traces: OrderedDict[str, dict[str, Any]] = OrderedDict()  # recent /ask traces, newest last
    jobs = Jobs(settings.max_runs)
    sessions = Sessions(settings.token, max_age_s=int(settings.session_hours * 3600)) if settings.token else None
    links = pages.Links(static=False, signout=sessions is not None)
    app.add_middleware(Gate, sessions=sessions, token=settings.token, max_body_bytes=settings.max_body_bytes,
                       body_timeout_s=settings.body_timeout_s,
                       allowed_hosts=frozenset(settings.allowed_hosts) if settings.allowed_hosts is not None else None)  # fmt: skip
    add_docs(app, OPEN_PATHS, secured=bool(settings.token))

    # -- errors: always JSON with a message and a hint ------------------------------------------
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

    # Each index's retriever, by index name, as a task that opens it: opening connects to
    # an index's server and loads its embedder (URIs) or reads its files and parts
    # (directories), seconds of work for a large index, so it happens once per index, in a
    # thread (the event loop keeps serving), and requests that come while it opens wait for
    # the same task. A directory index is keyed by its manifest's modification time too,
    # so one rebuilt in place is opened again; a failed opening is not kept.
    opened: dict[str, tuple[int | None, asyncio.Future]] = {}

    def locate_index(name: str | None) -> tuple[str, str | Path, int | None]:
        """(the index's name, its target, its version stamp), checked without opening it."""
        if not settings.indexes_dir and not settings.index_uris:
            raise MaragError("this server has no indexes", hint="start it with --indexes DIR (or an index URI)")
        if name is None:
            names = available_indexes()
            if len(names) != 1:
                raise MaragError("name the index", hint=f"choose one of: {', '.join(names) or '(none)'}")
            name = names[0]
        if name in settings.index_uris:
            return name, settings.index_uris[name], None
        path = index_path(name)
        return name, path, (path / "manifest.json").stat().st_mtime_ns

    async def named_retriever(name: str, target: str | Path, stamp: int | None):
        from marag.index.uri import open_index

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

    def index_path(name: str) -> Path:
        if not settings.indexes_dir:
            raise UnknownNameError(f"unknown index {name[:80]!r}", hint=f"choose one of: {', '.join(available_indexes()) or '(none)'}")
        root = Path(settings.indexes_dir).resolve()
        if not INDEX_NAME.fullmatch(name) or ".." in name:
            raise BadName(f"not a valid index name: {name[:80]!r}")
        path = (root / name).resolve()
        if not path.is_relative_to(root) or not (path / "manifest.json").is_file():
            raise UnknownNameError(f"unknown index {name!r}", hint=f"choose one of: {', '.join(available_indexes()) or '(none)'}")
        return path

    def available_indexes() -> list[str]:
        root = Path(settings.indexes_dir) if settings.indexes_dir else None
        names = set(settings.index_uris)
        if root is not None and root.is_dir():
            names |= {d.name for d in root.iterdir() if (d / "manifest.json").is_file() and INDEX_NAME.fullmatch(d.name)}
        return sorted(names)

    # -- signing in (browsers) --------------------------------------------------------------------
    @app.get("/signin", response_class=SafeHTML, include_in_schema=False)
    async def signin_form(next_path: str = Query("/", alias="next")):
        return SafeHTML(pages.signin_page(safe_next(next_path)))

    @app.post("/signin", include_in_schema=False)
    async def signin(request: Request):
        try:
            form = parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=5)
        except ValueError:  # more fields than the form has
            return SafeHTML(pages.signin_page("/", "Send the sign-in form as it is."), 400)
        target = safe_next((form.get("next") or ["/"])[0])
        if sessions is None:
            return RedirectResponse(target, 303)  # no token: nothing to sign in to
        if sessions.locked():
            return SafeHTML(pages.signin_page(target, "Too many wrong tokens in the last minute: wait a minute and try again."), 429,
                            headers={"retry-after": str(sessions.retry_after())})  # fmt: skip
        value = sessions.sign_in((form.get("token") or [""])[0])
        if value is None:
            return SafeHTML(pages.signin_page(target, "That is not the token this server was started with."), 401)
        response = RedirectResponse(target, 303)
        response.set_cookie(cookie_name(_port(request)), value, max_age=sessions.max_age_s, path="/",
                            httponly=True, samesite="strict", secure=request.url.scheme == "https")  # fmt: skip
        return response

    @app.post("/signout", include_in_schema=False)
    async def signout(request: Request):
        name = cookie_name(_port(request))
        if sessions is not None:
            sessions.sign_out(request.cookies.get(name))
        response = RedirectResponse("/signin" if sessions is not None else "/", 303)
        response.delete_cookie(name, path="/", httponly=True, samesite="strict")
        return response

    # -- API ------------------------------------------------------------------------------------
    @app.get("/health")
    async def health():
        """Liveness and marag's version; needs no token."""
        import marag

        return {"status": "ok", "version": marag.__version__}

    @app.get("/strategies")
    async def strategies():
        """The registered strategies: name, description, whether it needs an index."""
        return [{"name": n, "description": STRATEGIES.get(n).description, "needs_retriever": STRATEGIES.get(n).needs_retriever}
                for n in STRATEGIES.names()]  # fmt: skip

    @app.get("/indexes")
    async def indexes():
        """The names of the indexes this server answers from (`index` in POST /ask)."""
        return available_indexes()

    @app.post("/ask")
    async def ask(req: AskRequest):
        """Answer one question with a strategy. With no `index`, the only index served is used
        (with several, 400 names them). Returns the answer, its sources, usage and the trace id."""
        if not req.question.strip():
            raise MaragError("the question is empty")
        if len(req.question) > settings.max_question_chars:
            raise MaragError(f"the question is over {settings.max_question_chars} characters")
        cls = STRATEGIES.get(req.strategy)
        refuse_operator_settings(req.strategy, req.options)
        config = cls.validate_config(req.options)
        where = locate_index(req.index) if cls.needs_retriever or req.index else None
        # the queue is checked before any work: a busy server answers 429 at once
        if state["waiting"] >= settings.max_queue + settings.max_concurrency:
            return SafeJSON({"error": "too many questions in progress", "hint": "retry later"}, 429)
        state["waiting"] += 1
        try:
            retriever = await named_retriever(*where) if where else None
            # in a thread: a strategy may load a model file when it is made (GINGER's cross-encoder)
            strategy = await asyncio.to_thread(cls, model, retriever, config)
            async with gate:
                answer = await strategy.run(req.question)
        finally:
            state["waiting"] -= 1
        trace = answer.trace.model_dump(mode="json")
        ask_traces[answer.trace.id] = trace
        while len(ask_traces) > 200:
            ask_traces.popitem(last=False)
        return {**answer.summary(), "trace_id": answer.trace.id}

    @app.get("/traces/{trace_id}")
    async def get_trace(trace_id: str):
        """One question's trace (every step, LLM call and search), from an answer or a run."""
        return find_trace(trace_id)[1]

    def find_trace(trace_id: str) -> tuple[str | None, dict[str, Any]]:
        """(the run holding it, or None for an /ask trace; the trace)."""
        check(trace_id, TRACE_ID, "trace id")
        if trace_id in ask_traces:
            return None, ask_traces[trace_id]
        for run_id, _ in store.runs():
            try:
                return run_id, store.trace(run_id, trace_id)
            except UnknownNameError:
                continue
        raise UnknownNameError(f"no trace {trace_id!r}")

    @app.post("/runs")
    async def start_run(req: RunRequest):
        """Start an evaluation (`marag eval` on the server): its run id, status running;
        follow it at /runs/{run_id}/events. Past the runs allowed at once (two), 429."""
        from marag.eval.report import build_report
        from marag.eval.runner import run_eval
        from marag.serve.jobs import eval_config

        cfg = eval_config(req.dataset, req.strategies, req.limit, req.options, req.metrics, LLMConfig.model_validate(settings.llm),
                          settings.data_dir)  # fmt: skip
        run_id = cfg.default_run_id()
        store.check_writable(run_id)
        run_dir = Path(settings.runs_dir) / run_id

        async def work(job) -> None:
            await run_eval(cfg, run_dir, data_dir=settings.data_dir, progress=False, llm=model, on_result=job.progress)
            await asyncio.to_thread(build_report, [run_dir])

        if jobs.start(run_id, work) is None:
            return SafeJSON({"error": f"{settings.max_runs} evaluations are running already", "hint": "retry when one has finished"}, 429)
        return {"run_id": run_id, "status": "running"}

    @app.get("/runs")
    async def list_runs():
        """The runs in the runs folder: id, dataset, strategies."""
        return [{"run_id": rid, "dataset": m["config"]["dataset"], "strategies": m["config"]["strategies"],
                 "status": job.status if (job := jobs.get(rid)) else "stored"} for rid, m in store.runs()]  # fmt: skip

    @app.get("/runs/{run_id}")
    async def get_run(run_id: str):
        """A run's config, per-strategy summary and progress."""
        from marag.eval.report import Run, summary_rows

        check(run_id, RUN_ID, "run id")
        job = jobs.get(run_id)
        state = job.state() if job else {"status": "stored", "done": None, "total": None, "error": None}
        try:
            meta = store.meta(run_id)
        except UnknownNameError:
            if job is None:
                raise
            return {"run_id": run_id, **state, "config": None, "summary": []}  # failed before writing anything
        results = store.results(run_id)
        rows = summary_rows(Run.of(run_id, meta, results)) if results else []
        return {"run_id": run_id, **state, "config": meta["config"], "summary": rows}

    @app.get("/runs/{run_id}/events")
    async def run_events(run_id: str):
        """Server-sent events: one per answer written, then the final state."""
        import json

        check(run_id, RUN_ID, "run id")
        job = jobs.get(run_id)
        if job is None:
            store.meta(run_id)  # a stored run: its state at once; otherwise 404

            async def stored():
                yield f"data: {json.dumps({'status': 'stored', 'done': None, 'total': None, 'error': None})}\n\n"

            return StreamingResponse(stored(), media_type="text/event-stream")

        async def stream():
            async for event in job.follow():
                yield f"data: {json.dumps(event)}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    @app.get("/runs/{run_id}/files/{name}")
    async def run_file(run_id: str, name: str):
        """A file of a run: report.md, results.jsonl, traces.jsonl or a plot."""
        return FileResponse(store.file(run_id, name))

    # -- viewer pages -----------------------------------------------------------------------------
    @app.get("/", response_class=SafeHTML, include_in_schema=False)
    async def home():
        listing = store.scan()
        return SafeHTML(pages.home_page(listing.runs, [(n, STRATEGIES.get(n).description) for n in STRATEGIES.names()], links,
                                        listing.skipped))  # fmt: skip

    @app.get("/view/runs/{run_id}", response_class=SafeHTML, include_in_schema=False)
    async def view_run(run_id: str):
        return SafeHTML(pages.run_page(run_id, store.meta(run_id), store.results(run_id), store.plots(run_id), links))

    @app.get("/view/runs/{run_id}/traces/{trace_id}", response_class=SafeHTML, include_in_schema=False)
    async def view_trace(run_id: str, trace_id: str):
        trace = store.trace(run_id, trace_id)
        result = next((r for r in store.results(run_id) if r.trace_id == trace_id), None)
        return SafeHTML(pages.trace_page(trace, links, run_id, result))

    @app.get("/view/traces/{trace_id}", response_class=SafeHTML, include_in_schema=False)
    async def view_any_trace(trace_id: str):
        run_id, trace = find_trace(trace_id)
        result = next((r for r in store.results(run_id) if r.trace_id == trace_id), None) if run_id else None
        return SafeHTML(pages.trace_page(trace, links, run_id, result))

    @app.get("/view/runs/{run_id}/question", response_class=SafeHTML, include_in_schema=False)
    async def view_question(run_id: str, qid: str):
        results = [r for r in store.results(run_id) if r.qid == qid]
        if not results:
            raise UnknownNameError(f"no question {qid[:80]!r} in run {run_id!r}", hint="the run page lists its questions")
        traces = store.traces(run_id, [r.trace_id for r in results if r.trace_id])
        return SafeHTML(pages.question_page(run_id, qid, results, traces, links))

    app.state.started = time.time()
    return app


def _port(request) -> int | None:
    """The port the server listens on (the Gate names the cookie by it, too)."""
    server = request.scope.get("server")
    return server[1] if server else None
