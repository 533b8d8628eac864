"""Evaluation over a Ray cluster (`marag eval --executor ray [--ray-address ADDR]`).

Each Ray worker (an actor) loads the dataset, the model and the index once, then
answers and scores the (strategy, question) pairs it is sent with the same code as the
local executor (`runner.answer_one`). The driver writes every record and trace as it
arrives, so results, resume and progress are those of a local run. Without an address
Ray starts a local instance (offline, ~2 s); with one it joins that cluster, whose
workers must have marag, the model and the data directory at the same paths.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from marag.corpus.models import Question
from marag.errors import MaragError
from marag.trace import Trace


def _worker_class():
    import ray

    @ray.remote
    class EvalWorker:
        def __init__(self, cfg_json: str, data_dir: str | None, index_cache: str):
            from marag.eval.datasets import load_dataset
            from marag.eval.runner import EvalConfig, prepare_retrieval, strategy_settings
            from marag.llm import make_llm
            from marag.strategies import make_strategy

            self.cfg = EvalConfig.model_validate_json(cfg_json)
            ds = load_dataset(self.cfg.dataset, data_dir)
            self.categories = ds.categories
            self.questions = {q.id: q for q in ds.questions}
            llm = make_llm(self.cfg.llm)
            self.judge = (make_llm(self.cfg.judge) if self.cfg.judge else llm) if self.cfg.judge_metrics else None
            retriever, self.collections = prepare_retrieval(self.cfg, ds, Path(index_cache))
            settings = strategy_settings(self.cfg, ds)
            self.strategies = {s: make_strategy(s, llm, retriever, settings[s]) for s in self.cfg.strategies}
            self.loop = asyncio.new_event_loop()

        def answer(self, sname: str, qid: str) -> tuple[dict[str, Any], str | None]:
            from marag.eval.runner import answer_one

            q = self.questions[qid]
            record, trace = self.loop.run_until_complete(
                answer_one(self.cfg, self.strategies[sname], sname, q, self.judge, self.collections, self.categories)
            )
            return record, trace.model_dump_json() if trace is not None else None

    return EvalWorker


async def ray_answers(
    cfg, todo: list[tuple[str, Question]], data_dir, index_cache: Path, address: str | None = None
) -> AsyncIterator[tuple[dict[str, Any], Trace | None]]:
    """(record, trace) for every pair in `todo`, as Ray workers finish them; each worker
    takes the next pair when it is done with one."""
    try:
        import ray
    except ImportError:
        raise MaragError("--executor ray needs Ray", hint="pip install 'marag[ray]' (or pip install ray)") from None
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    worker_cls = _worker_class()
    n = max(1, min(cfg.concurrency, len(todo)))
    workers = [
        worker_cls.remote(cfg.model_dump_json(), str(data_dir) if data_dir else None, str(Path(index_cache).resolve()))
        for _ in range(n)
    ]
    pending = list(todo)
    running: dict[asyncio.Future, Any] = {}

    def submit(worker) -> None:
        sname, q = pending.pop(0)
        running[asyncio.ensure_future(worker.answer.remote(sname, q.id))] = worker

    for w in workers:
        if pending:
            submit(w)
    try:
        while running:
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                worker = running.pop(fut)
                record, trace_json = fut.result()
                if pending:
                    submit(worker)
                yield record, Trace.model_validate_json(trace_json) if trace_json else None
    finally:
        for w in workers:
            ray.kill(w)
