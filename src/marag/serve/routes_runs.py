"""Evaluations and their runs: POST /runs, GET /runs, /runs/{id}, /runs/{id}/events,
/runs/{id}/files/{name}."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import Field

from marag.errors import UnknownNameError
from marag.llm import LLMConfig
from marag.serve.answers import RUN_EVENT, RUN_FILE, RunListed, RunStarted, RunState, ok, ok_as
from marag.serve.http import SafeJSON
from marag.serve.state import RequestBody, ServeState, serve_state
from marag.serve.store import RUN_ID, check

router = APIRouter()


class RunRequest(RequestBody):
    dataset: str = Field(description="A registered dataset whose data the server has (`marag datasets`).")
    strategies: list[str] = Field(min_length=1, max_length=10, description="Strategy names.")
    limit: int = Field(default=10, ge=1, le=1000, description="The first N questions.")
    options: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Per strategy, its settings.")
    metrics: list[str] | None = Field(default=None, max_length=30, description="Metric names (default: the dataset's).")


@router.post("/runs", responses=ok(RunStarted))
async def start_run(req: RunRequest, st: ServeState = Depends(serve_state)):
    """Start an evaluation (`marag eval` on the server): its run id, status running;
    follow it at /runs/{run_id}/events. Past the runs allowed at once (two), 429."""
    from marag.eval.report import build_report
    from marag.eval.runner import run_eval
    from marag.serve.jobs import eval_config

    settings = st.settings
    cfg = eval_config(req.dataset, req.strategies, req.limit, req.options, req.metrics, LLMConfig.model_validate(settings.llm),
                      settings.data_dir)  # fmt: skip
    run_id = cfg.default_run_id()
    st.store.check_writable(run_id)
    run_dir = Path(settings.runs_dir) / run_id

    async def work(job) -> None:
        await run_eval(cfg, run_dir, data_dir=settings.data_dir, progress=False, llm=st.model, on_result=job.progress)
        await asyncio.to_thread(build_report, [run_dir])

    if st.jobs.start(run_id, work) is None:
        return SafeJSON({"error": f"{settings.max_runs} evaluations are running already", "hint": "retry when one has finished"}, 429)
    return {"run_id": run_id, "status": "running"}


@router.get("/runs", responses=ok(list[RunListed]))
async def list_runs(st: ServeState = Depends(serve_state)):
    """The runs in the runs folder: id, dataset, strategies."""
    return [{"run_id": rid, "dataset": m["config"]["dataset"], "strategies": m["config"]["strategies"],
             "status": job.status if (job := st.jobs.get(rid)) else "stored"} for rid, m in st.store.runs()]  # fmt: skip


@router.get("/runs/{run_id}", responses=ok(RunState))
async def get_run(run_id: str, st: ServeState = Depends(serve_state)):
    """A run's config, per-strategy summary and progress."""
    from marag.eval.report import Run, summary_rows

    check(run_id, RUN_ID, "run id")
    job = st.jobs.get(run_id)
    state = job.state() if job else {"status": "stored", "done": None, "total": None, "error": None}
    try:
        meta = st.store.meta(run_id)
    except UnknownNameError:
        if job is None:
            raise
        return {"run_id": run_id, **state, "config": None, "summary": []}  # failed before writing anything
    results = st.store.results(run_id)
    rows = summary_rows(Run.of(run_id, meta, results)) if results else []
    return {"run_id": run_id, **state, "config": meta["config"], "summary": rows}


@router.get("/runs/{run_id}/events", response_class=StreamingResponse, responses=ok_as({"text/event-stream": RUN_EVENT}))
async def run_events(run_id: str, st: ServeState = Depends(serve_state)):
    """Server-sent events: one per answer written, then the final state."""
    check(run_id, RUN_ID, "run id")
    job = st.jobs.get(run_id)
    if job is None:
        st.store.meta(run_id)  # a stored run: its state at once; otherwise 404

        async def stored():
            yield f"data: {json.dumps({'status': 'stored', 'done': None, 'total': None, 'error': None})}\n\n"

        return StreamingResponse(stored(), media_type="text/event-stream")

    async def stream():
        async for batch in job.batches():  # each as one write (`Job.batches`)
            yield "".join(f"data: {json.dumps(event)}\n\n" for event in batch)

    return StreamingResponse(stream(), media_type="text/event-stream")


@router.get("/runs/{run_id}/files/{name}", response_class=FileResponse, responses=ok_as(RUN_FILE))
async def run_file(run_id: str, name: str, st: ServeState = Depends(serve_state)):
    """A file of a run: report.md, config.json or a plot (a name ending .md, .json or .png)."""
    return FileResponse(st.store.file(run_id, name))
