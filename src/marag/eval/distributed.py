"""Evaluation over a Ray cluster (`marag eval --executor ray [--ray-address ADDR]`).

Each Ray worker (an actor) loads the dataset, the model and the index once, then
answers and scores the (strategy, question) pairs it is sent with the same code as the
local executor (`answering.answer_one`). The driver writes every record and trace as it
arrives, so results, resume and progress are those of a local run. Without an address
Ray starts a local instance (offline, ~2 s); with one it joins that cluster, whose
workers must have marag, the model and the data directory at the same paths. With an
index URI (`--index milvus://HOST:PORT/NAME`) every worker connects to that one shared
collection instead of loading a copy; a Milvus Lite file, which one process holds at a
time, is refused with the command that serves it. `start_ray` waits out and retries a
slow first start.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from marag.corpus.models import Question
from marag.errors import MaragError, MaragWarning
from marag.eval.rundir import ResultRecord
from marag.trace import Trace

# Pauses before the second and third attempt to start a local Ray instance.
START_PAUSES_S = (5.0, 15.0)


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def _children() -> set[int]:
    """Ids of this process's direct children (Linux /proc; empty elsewhere)."""
    me, out = os.getpid(), set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:  # the field after the state is the parent id
                out.add(int(entry))
    return out


def _stop(pids: set[int], grace_s: float = 5.0) -> None:
    """Stop the processes a failed start left behind: these ids are children this
    process started during the attempt (Ray's GCS, raylet, reaper), nothing else."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = set()
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.add(pid)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while alive and time.monotonic() < deadline:
            for pid in list(alive):
                try:
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        alive.discard(pid)
                except ChildProcessError:
                    alive.discard(pid)
            time.sleep(0.1)
        pids = alive
        if not pids:
            return


def _probe(address: str) -> None:
    """Fail fast when nothing listens at an explicit HOST:PORT: joining an absent
    cluster makes Ray retry for minutes."""
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise MaragError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc})",
            hint="start it (`ray start --head` on the head node) or fix --ray-address "
            "(ray://HEAD:10001 for a Ray client, HEAD:6379 from a cluster node), or run with --executor local",
        ) from None


def start_ray(address: str | None = None, attempts: int = 3, pauses_s: tuple[float, ...] | None = None, **options: Any) -> None:
    """Join the Ray cluster at `address`, or start a local instance without one.

    On a busy machine a local instance's first start can time out waiting for its own
    processes ("The current node timed out during startup", which Ray raises as a plain
    Exception). A failed start is cleaned up (the processes it spawned are stopped) and
    tried again after a pause, up to `attempts` times; then a MaragError says what to do."""
    try:
        import ray
    except ImportError:
        raise MaragError("--executor ray needs Ray", hint="pip install 'marag[ray]' (or pip install ray)") from None
    if ray.is_initialized():
        return
    if address and address != "auto":
        _probe(address)
    pauses_s = START_PAUSES_S if pauses_s is None else pauses_s
    last: BaseException | None = None
    for attempt in range(1, attempts + 1):
        before = _children()
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True, **options)
            return
        except Exception as exc:  # Ray raises Exception, RuntimeError, ConnectionError, TimeoutError...
            last = exc
            try:
                ray.shutdown()
            except Exception:
                pass
            _stop(_children() - before)
        if attempt < attempts:
            pause = pauses_s[min(attempt - 1, len(pauses_s) - 1)] if pauses_s else 0.0
            warnings.warn(f"Ray did not start (attempt {attempt} of {attempts}: {_one_line(last)}); trying again in {pause:g}s",
                          MaragWarning, stacklevel=2)  # fmt: skip
            time.sleep(pause)
    where = f"the Ray cluster at {address}" if address else "a local Ray instance"
    raise MaragError(
        f"could not start {where} after {attempts} attempts ({_one_line(last)})" if not address
        else f"could not join {where} after {attempts} attempts ({_one_line(last)})",
        hint="check `ray status` on the head node and the address, or run with --executor local" if address
        else "the machine may be short of CPU, memory or /tmp space: retry when it is quieter, start Ray yourself "
        "(`ray start --head`) and pass --ray-address auto, or run with --executor local",
    )


def _worker_class():
    import ray

    @ray.remote
    class EvalWorker:
        def __init__(self, cfg_json: str, data_dir: str | None, index_cache: str):
            from marag.eval.datasets import load_dataset
            from marag.eval.answering import EvalConfig, prepare_retrieval, strategy_settings
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

        def answer(self, sname: str, qid: str) -> tuple[ResultRecord, str | None]:
            from marag.eval.answering import answer_one

            q = self.questions[qid]
            record, trace = self.loop.run_until_complete(
                answer_one(self.cfg, self.strategies[sname], sname, q, self.judge, self.collections, self.categories)
            )
            return record, trace.model_dump_json() if trace is not None else None

    return EvalWorker


async def ray_answers(
    cfg, todo: list[tuple[str, Question]], data_dir, index_cache: Path, address: str | None = None
) -> AsyncIterator[tuple[ResultRecord, Trace | None]]:
    """(record, trace) for every pair in `todo`, as Ray workers finish them; each worker
    takes the next pair when it is done with one."""
    if cfg.index_path:
        from marag.index.uri import require_shared

        require_shared(cfg.index_path, "Ray workers")
    start_ray(address)
    import ray

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
