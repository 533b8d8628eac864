"""Evaluations started over HTTP (POST /runs): their settings checked before they start,
their state, and their progress as a stream any number of readers can follow, joining
at any time.

A reader who joins a running evaluation gets every event so far, then each new one as
it happens; one who joins after it finished gets a single event with the final state,
at once. Each reader keeps its own position in the event list, so readers never take
events from each other.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from marag.errors import MaragError
from marag.eval.rundir import ResultRecord
from marag.serve.memory import give_memory_back

RUNNING, DONE, FAILED = "running", "done", "failed"


class Job:
    def __init__(self) -> None:
        self.status = RUNNING
        self.done = 0
        self.total = 0
        self.error: str | None = None
        self.events: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self.task: asyncio.Task | None = None

    def state(self) -> dict[str, Any]:
        return {"status": self.status, "done": self.done, "total": self.total, "error": self.error}

    def publish(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()  # wakes every reader waiting now; later ones wait on the new event

    def progress(self, record: ResultRecord, done: int, total: int) -> None:
        self.done, self.total = done, total
        self.publish({"done": done, "total": total, "strategy": record.strategy, "qid": record.qid, "error": record.error})

    def finish(self, status: str, error: str | None = None) -> None:
        self.status, self.error = status, error
        self.publish(self.state())
        # Readers following now keep the list they read (`batches`); later ones get only
        # the final state: the job keeps no events, or a server grows by every answer of
        # every evaluation it ran (~0.5 MB per 1,000; benchmarks/soak.py).
        self.events = []

    async def follow(self) -> AsyncIterator[dict[str, Any]]:
        """Events for one reader (see the module docstring); ends with the final state."""
        async for batch in self.batches():
            for event in batch:
                yield event

    async def batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        """`follow`'s events, as lists of all that came since the reader's last list. A
        stream sends each list as one write: one reader joining a long evaluation got its
        backlog as thousands of writes in one turn of the event loop, which held every
        other request up (a soak's /health waited seconds) and, to a reader already gone,
        logged a warning per write (benchmarks/soak.py)."""
        if self.status != RUNNING:
            yield [self.state()]
            return
        events = self.events  # this reader's, to the end: `finish` lets go of the job's
        seen = 0
        while True:
            changed = self._changed  # taken before the reader's turn: a publish meanwhile sets it
            if seen < len(events):
                batch = events[seen:]
                seen += len(batch)
                last = next((i for i, event in enumerate(batch) if "status" in event), None)
                yield batch if last is None else batch[: last + 1]
                if last is not None:
                    return
            await changed.wait()


class Jobs:
    """The evaluations this server started, by run id; at most `max_running` at once."""

    def __init__(self, max_running: int) -> None:
        self.max_running = max_running
        self._jobs: dict[str, Job] = {}

    def get(self, run_id: str) -> Job | None:
        return self._jobs.get(run_id)

    def running(self) -> int:
        return sum(1 for j in self._jobs.values() if j.status == RUNNING)

    def start(self, run_id: str, work: Callable[[Job], Awaitable[None]]) -> Job | None:
        """The job for `run_id`: the one already running, or a new one running `work`;
        None when `max_running` others are running."""
        job = self._jobs.get(run_id)
        if job is not None and job.status == RUNNING:
            return job
        if self.running() >= self.max_running:
            return None
        job = self._jobs[run_id] = Job()

        async def run() -> None:
            try:
                await work(job)
                job.finish(DONE)
            except Exception as exc:  # noqa: BLE001 - reported through GET /runs/{id} and the event stream
                job.finish(FAILED, f"{type(exc).__name__}: {getattr(exc, 'message', exc)}")
            await asyncio.to_thread(give_memory_back)

        job.task = asyncio.create_task(run())
        return job


def refuse_operator_settings(strategy: str, options: dict[str, Any] | None) -> None:
    """A MaragError (HTTP 400) when a request's options for `strategy` set a field that
    names a model, file, URL, directory or environment variable (`OPERATOR_ONLY` in
    `marag.strategies.base`): a remote caller could otherwise point the server at their
    own host with one of its secrets as the key, or make it read or write any file."""
    from marag.strategies import STRATEGIES
    from marag.strategies.base import operator_only_fields

    refused = sorted(set(options or {}) & operator_only_fields(STRATEGIES.get(strategy).Config))
    if refused:
        keys = ", ".join(map(repr, refused))
        raise MaragError(f"strategy {strategy!r}: {keys} cannot be set in a request: {'it names' if len(refused) == 1 else 'they name'} "
                         "a model, file, URL or environment variable, which is set when the server starts, not per request",
                         hint=f"remove {keys} from the options; the server answers with the model it was started with (--llm)")  # fmt: skip


def eval_config(dataset: str, strategies: list[str], limit: int, options: dict[str, dict[str, Any]],
                metrics: list[str] | None, llm, data_dir: str | None):  # fmt: skip
    """The EvalConfig of an evaluation asked for over HTTP, with everything it could fail
    on at its start checked first (a MaragError saying what to change): the dataset is
    registered (never a path) and its data present, no strategy or metric is named twice,
    options are keyed by a listed strategy, valid for it and set nothing only the server's
    operator may (`refuse_operator_settings`), and every name is known.
    Judged metrics are run as judged metrics (by the server's model)."""
    from marag.eval.datasets import DATASETS
    from marag.eval.metrics import METRICS
    from marag.eval.answering import DEFAULT_METRICS, EvalConfig, validate_names
    from marag.strategies import STRATEGIES

    spec = DATASETS.get(dataset)
    if not data_dir:
        raise MaragError("this server has no benchmark data", hint="start it with --data-dir DIR (or MARAG_DATA)")
    missing = [f for f in spec.files() if not (Path(data_dir) / f).exists()]
    if missing:
        raise MaragError(f"dataset {dataset!r} has no data on this server", hint=f"missing in the data directory: {', '.join(missing)}")
    for what, names in (("strategies", strategies), ("metrics", metrics or [])):
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise MaragError(f"{what} named twice: {', '.join(repeated)}", hint=f"name each of the {what} once")
    stray = sorted(set(options) - set(strategies))
    if stray:
        raise MaragError(f"options for {', '.join(map(repr, stray))}, which {'is' if len(stray) == 1 else 'are'} not among the strategies",
                         hint=f"options are keyed by strategy: {', '.join(strategies)}")  # fmt: skip
    for s in strategies:
        refuse_operator_settings(s, options.get(s))
        STRATEGIES.get(s).validate_config(options.get(s))
    names = metrics or list(DEFAULT_METRICS)
    judged = {m for m in names if METRICS.get(m).needs_judge}
    cfg = EvalConfig(dataset=dataset, strategies=strategies, limit=limit, strategy_configs=options, llm=llm,
                     metrics=[m for m in names if m not in judged], judge_metrics=[m for m in names if m in judged])  # fmt: skip
    validate_names(cfg)
    return cfg
