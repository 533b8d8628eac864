"""Evaluations started over HTTP (POST /runs): their state, and their progress as a
stream any number of readers can follow, joining at any time.

A reader who joins a running evaluation gets every event so far, then each new one as
it happens; one who joins after it finished gets a single event with the final state,
at once. Each reader keeps its own position in the event list, so readers never take
events from each other.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

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

    def progress(self, record: dict[str, Any], done: int, total: int) -> None:
        self.done, self.total = done, total
        self.publish({"done": done, "total": total, "strategy": record.get("strategy"), "qid": record.get("qid"),
                      "error": record.get("error")})  # fmt: skip

    def finish(self, status: str, error: str | None = None) -> None:
        self.status, self.error = status, error
        self.publish(self.state())

    async def follow(self) -> AsyncIterator[dict[str, Any]]:
        """Events for one reader (see the module docstring); ends with the final state."""
        if self.status != RUNNING:
            yield self.state()
            return
        seen = 0
        while True:
            changed = self._changed
            while seen < len(self.events):
                event = self.events[seen]
                seen += 1
                yield event
                if "status" in event:
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

        job.task = asyncio.create_task(run())
        return job
