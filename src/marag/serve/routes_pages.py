"""The viewer pages: GET / and /view/... (HTML from `marag.serve.pages`)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from marag.errors import UnknownNameError
from marag.serve import pages
from marag.serve.http import SafeHTML
from marag.serve.state import ServeState, serve_state
from marag.strategies import STRATEGIES

router = APIRouter()


@router.get("/", response_class=SafeHTML, include_in_schema=False)
async def home(st: ServeState = Depends(serve_state)):
    listing = st.store.scan()
    return SafeHTML(pages.home_page(listing.runs, [(n, STRATEGIES.get(n).description) for n in STRATEGIES.names()], st.links,
                                    listing.skipped))  # fmt: skip


@router.get("/view/runs/{run_id}", response_class=SafeHTML, include_in_schema=False)
async def view_run(run_id: str, st: ServeState = Depends(serve_state)):
    store = st.store
    return SafeHTML(pages.run_page(run_id, store.meta(run_id), store.results(run_id), store.plots(run_id), st.links))


@router.get("/view/runs/{run_id}/traces/{trace_id}", response_class=SafeHTML, include_in_schema=False)
async def view_trace(run_id: str, trace_id: str, st: ServeState = Depends(serve_state)):
    trace = st.store.trace(run_id, trace_id)
    result = next((r for r in st.store.results(run_id) if r.trace_id == trace_id), None)
    return SafeHTML(pages.trace_page(trace, st.links, run_id, result))


@router.get("/view/traces/{trace_id}", response_class=SafeHTML, include_in_schema=False)
async def view_any_trace(trace_id: str, st: ServeState = Depends(serve_state)):
    run_id, trace = st.find_trace(trace_id)
    result = next((r for r in st.store.results(run_id) if r.trace_id == trace_id), None) if run_id else None
    return SafeHTML(pages.trace_page(trace, st.links, run_id, result))


@router.get("/view/runs/{run_id}/question", response_class=SafeHTML, include_in_schema=False)
async def view_question(run_id: str, qid: str, st: ServeState = Depends(serve_state)):
    results = [r for r in st.store.results(run_id) if r.qid == qid]
    if not results:
        raise UnknownNameError(f"no question {qid[:80]!r} in run {run_id!r}", hint="the run page lists its questions")
    traces = st.store.traces(run_id, [r.trace_id for r in results if r.trace_id])
    return SafeHTML(pages.question_page(run_id, qid, results, traces, st.links))
