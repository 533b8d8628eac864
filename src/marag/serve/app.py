"""`marag serve`: the library over HTTP, and the trajectory viewer.

    POST /ask              {question, strategy, index, options} -> answer, sources, trace id
    POST /runs             {dataset, strategies, limit, options} -> a background evaluation
    GET  /runs             the runs in the runs directory
    GET  /runs/{id}        a run's settings, per-strategy means, and status
    GET  /runs/{id}/events progress of a running evaluation (server-sent events)
    GET  /traces/{id}      one question's trace (JSON)
    GET  /strategies, /indexes, /health; OpenAPI docs at /docs
    GET  /  and /view/...  the viewer pages (`marag.serve.pages`)

Safety (documents, model outputs and requests are untrusted): the server binds
127.0.0.1 unless told otherwise; with a token, every request but /health needs
`Authorization: Bearer <token>`; bodies over `max_body_bytes` get 413; answering is
limited to `max_concurrency` at once with `max_queue` waiting (more get 429); strategy,
dataset and index names are checked against registries and the configured index
directory, and run, trace and file names against strict patterns inside the runs
directory, so no request chooses a filesystem path.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from marag.errors import MaragError, UnknownNameError
from marag.serve import pages
from marag.serve.store import RUN_ID, TRACE_ID, BadName, RunStore, check

INDEX_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class ServeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runs_dir: str = "runs"
    indexes_dir: str | None = None  # each subdirectory holding a manifest.json is an index, by its name
    index_uris: dict[str, str] = Field(default_factory=dict)  # name -> index URI (marag.index.uri); no secrets in them
    data_dir: str | None = None  # benchmark data for POST /runs
    llm: dict[str, Any] = Field(default_factory=lambda: {"backend": "llamacpp"})  # LLMConfig fields
    token: str | None = None
    max_body_bytes: int = Field(default=64_000, ge=1_000)
    max_concurrency: int = Field(default=4, ge=1)
    max_queue: int = Field(default=16, ge=0)
    max_question_chars: int = Field(default=2_000, ge=10)


class AskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1)
    strategy: str = "vanilla_rag"
    index: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset: str
    strategies: list[str] = Field(min_length=1, max_length=10)
    limit: int = Field(default=10, ge=1, le=1000)
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    metrics: list[str] | None = None


def create_app(settings: ServeSettings, llm=None):
    """The FastAPI application. `llm` overrides the model built from `settings.llm`
    (tests pass a scripted one)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, StreamingResponse

    from marag.llm import LLMConfig, make_llm
    from marag.strategies import STRATEGIES, make_strategy

    app = FastAPI(title="marag", description="Multi-agent RAG: ask, evaluate, and view trajectories.")
    store = RunStore(settings.runs_dir)
    model = llm or make_llm(LLMConfig.model_validate(settings.llm))
    gate = asyncio.Semaphore(settings.max_concurrency)
    state = {"waiting": 0}
    ask_traces: OrderedDict[str, dict[str, Any]] = OrderedDict()  # recent /ask traces, newest last
    jobs: dict[str, dict[str, Any]] = {}
    links = pages.Links(static=False)

    # -- guards -------------------------------------------------------------------------------
    @app.middleware("http")
    async def guard(request: Request, call_next):
        if settings.token and request.url.path != "/health":
            given = request.headers.get("authorization", "")
            if not secrets.compare_digest(given.encode(), f"Bearer {settings.token}".encode()):
                return JSONResponse({"error": "missing or wrong token", "hint": "send Authorization: Bearer <token>"}, 401)
        size = request.headers.get("content-length")
        if size is not None and (not size.isdigit() or int(size) > settings.max_body_bytes):
            return JSONResponse({"error": f"request body over {settings.max_body_bytes} bytes"}, 413)
        if size is None and request.method in ("POST", "PUT", "PATCH"):  # a body of unknown size is not read
            return JSONResponse({"error": "send the body with a Content-Length header"}, 411)
        return await call_next(request)

    @app.exception_handler(MaragError)
    async def marag_error(request: Request, exc: MaragError):
        status = 404 if isinstance(exc, UnknownNameError) and not isinstance(exc, BadName) else 400
        if isinstance(exc, UnknownNameError) and request.url.path in ("/ask", "/runs"):
            status = 400  # an unknown strategy or dataset is a bad request, not a missing page
        return JSONResponse({"error": exc.message, "hint": exc.hint}, status)

    opened_uris: dict[str, Any] = {}  # a server-backed index is opened once: a connection and an embedder

    def open_named_index(name: str | None):
        from marag.index.uri import open_index

        if not settings.indexes_dir and not settings.index_uris:
            raise MaragError("this server has no indexes", hint="start it with --indexes DIR (or an index URI)")
        if name is None:
            names = available_indexes()
            if len(names) != 1:
                raise MaragError("name the index", hint=f"choose one of: {', '.join(names) or '(none)'}")
            name = names[0]
        if name in settings.index_uris:
            if name not in opened_uris:
                opened_uris[name] = open_index(settings.index_uris[name])
            return opened_uris[name]
        return open_index(index_path(name))

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

    # -- API ------------------------------------------------------------------------------------
    @app.get("/health")
    async def health():
        import marag

        return {"status": "ok", "version": marag.__version__}

    @app.get("/strategies")
    async def strategies():
        return [{"name": n, "description": STRATEGIES.get(n).description, "needs_retriever": STRATEGIES.get(n).needs_retriever}
                for n in STRATEGIES.names()]  # fmt: skip

    @app.get("/indexes")
    async def indexes():
        return available_indexes()

    @app.post("/ask")
    async def ask(req: AskRequest):
        if not req.question.strip():
            raise MaragError("the question is empty")
        if len(req.question) > settings.max_question_chars:
            raise MaragError(f"the question is over {settings.max_question_chars} characters")
        cls = STRATEGIES.get(req.strategy)
        retriever = open_named_index(req.index).retriever() if cls.needs_retriever or req.index else None
        strategy = make_strategy(req.strategy, model, retriever, req.options)
        if state["waiting"] >= settings.max_queue + settings.max_concurrency:
            return JSONResponse({"error": "too many questions in progress", "hint": "retry later"}, 429)
        state["waiting"] += 1
        try:
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
        return find_trace(trace_id)

    def find_trace(trace_id: str) -> dict[str, Any]:
        check(trace_id, TRACE_ID, "trace id")
        if trace_id in ask_traces:
            return ask_traces[trace_id]
        for run_id, _ in store.runs():
            try:
                return store.trace(run_id, trace_id)
            except UnknownNameError:
                continue
        raise UnknownNameError(f"no trace {trace_id!r}")

    @app.post("/runs")
    async def start_run(req: RunRequest):
        from marag.eval.datasets import DATASETS
        from marag.eval.runner import DEFAULT_METRICS, EvalConfig, run_eval

        DATASETS.get(req.dataset)  # a registered name only: never a path
        for s in req.strategies:
            STRATEGIES.get(s).validate_config(req.options.get(s))
        cfg = EvalConfig(
            dataset=req.dataset, strategies=req.strategies, limit=req.limit, strategy_configs=req.options,
            metrics=req.metrics or list(DEFAULT_METRICS), llm=LLMConfig.model_validate(settings.llm),
        )  # fmt: skip
        run_id = cfg.default_run_id()
        job = jobs.get(run_id)
        if job and job["status"] == "running":
            return {"run_id": run_id, "status": "running"}
        job = jobs[run_id] = {"status": "running", "done": 0, "total": 0, "events": asyncio.Queue(), "error": None}

        def progress(record: dict[str, Any], done: int, total: int) -> None:
            job["done"], job["total"] = done, total
            job["events"].put_nowait({"done": done, "total": total, "strategy": record["strategy"], "qid": record["qid"],
                                      "error": record.get("error")})  # fmt: skip

        async def work() -> None:
            try:
                await run_eval(cfg, Path(settings.runs_dir) / run_id, data_dir=settings.data_dir, progress=False, llm=model,
                               on_result=progress)  # fmt: skip
                from marag.eval.report import build_report

                await asyncio.to_thread(build_report, [Path(settings.runs_dir) / run_id])
                job["status"] = "done"
            except Exception as exc:  # reported through GET /runs/{id} and the event stream
                job["status"], job["error"] = "failed", f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"
            job["events"].put_nowait({"status": job["status"], "error": job["error"]})

        job["task"] = asyncio.create_task(work())
        return {"run_id": run_id, "status": "running"}

    @app.get("/runs")
    async def list_runs():
        return [{"run_id": rid, "dataset": m.get("config", {}).get("dataset"), "strategies": m.get("config", {}).get("strategies"),
                 "status": jobs.get(rid, {}).get("status", "stored")} for rid, m in store.runs()]  # fmt: skip

    @app.get("/runs/{run_id}")
    async def get_run(run_id: str):
        from marag.eval.report import summary_rows

        meta = store.meta(run_id)
        job = jobs.get(run_id, {})
        rows = summary_rows(Path(settings.runs_dir) / run_id) if (Path(settings.runs_dir) / run_id / "results.jsonl").exists() else []
        return {"run_id": run_id, "status": job.get("status", "stored"), "done": job.get("done"), "total": job.get("total"),
                "error": job.get("error"), "config": meta.get("config"), "summary": rows}  # fmt: skip

    @app.get("/runs/{run_id}/events")
    async def run_events(run_id: str):
        check(run_id, RUN_ID, "run id")
        job = jobs.get(run_id)
        if job is None:
            raise UnknownNameError(f"no evaluation {run_id!r} is running here")

        async def stream():
            while True:
                event = await job["events"].get()
                yield f"data: {json.dumps(event)}\n\n"
                if "status" in event:
                    return

        return StreamingResponse(stream(), media_type="text/event-stream")

    @app.get("/runs/{run_id}/files/{name}")
    async def run_file(run_id: str, name: str):
        return FileResponse(store.file(run_id, name))

    # -- viewer pages -----------------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse)
    async def home():
        return pages.home_page(store.runs(), [(n, STRATEGIES.get(n).description) for n in STRATEGIES.names()], links)

    @app.get("/view/runs/{run_id}", response_class=HTMLResponse)
    async def view_run(run_id: str):
        return pages.run_page(run_id, store.meta(run_id), store.results(run_id), store.plots(run_id), links)

    @app.get("/view/runs/{run_id}/traces/{trace_id}", response_class=HTMLResponse)
    async def view_trace(run_id: str, trace_id: str):
        return pages.trace_page(store.trace(run_id, trace_id), links)

    @app.get("/view/traces/{trace_id}", response_class=HTMLResponse)
    async def view_any_trace(trace_id: str):
        return pages.trace_page(find_trace(trace_id), links)

    @app.get("/view/runs/{run_id}/questions/{qid}", response_class=HTMLResponse)
    async def view_question(run_id: str, qid: str):
        results = [r for r in store.results(run_id) if r["qid"] == qid]
        if not results:
            raise UnknownNameError(f"no question {qid[:80]!r} in run {run_id!r}")
        return pages.question_page(run_id, qid, results, store.traces(run_id, [r.get("trace_id", "") for r in results]), links)

    app.state.started = time.time()
    return app
