"""Soak of the HTTP API (issue 83): a real `marag serve` under many clients for minutes,
with an evaluation started through the API running all along; then the server is
stopped under load (SIGTERM), started again on the same runs directory, and the
evaluation resumed through the API and checked record by record.

    MARAG_DATA=/path/to/data python benchmarks/soak.py                      # scripted model, 30 min
    MARAG_DATA=/path/to/data python benchmarks/soak.py --model default      # qwen2.5-1.5b (llama.cpp), 5 min
    MARAG_DATA=/path/to/data python benchmarks/soak.py --minutes 0.5        # a smoke run
        [--clients 16] [--burst 4] [--max-concurrency 1] [--grace 10] [--out RESULTS.md]
        [--eval-dataset D] [--eval-strategies a,b] [--eval-limit N] [--cache DIR] [--keep DIR]

Run it from a checkout nobody edits meanwhile: the server started again after the stop
runs the source as it is then, and a run's id carries a digest of that source, so an
edit makes the resumed request a new run.

What runs:
- the server: `python -m marag.cli serve` on 127.0.0.1 (a free port), with a token
  (`--token-env`), `--max-concurrency 1` (so, with the server's queue of 16, more than
  17 questions at once get 429) and the model of the profile: `--llm scripted` (the
  shipped fake: every call answered at once, so the load is the server's own work) or
  the default local model. It serves one index, the repo's samples/corpus (BM25), built
  with `marag index` as a user builds it; an evaluation that retrieves finds its
  dataset's index built beforehand in `--cache`, the server's working directory.
- `--clients` clients (asyncio + httpx), each a user doing one thing after another at
  random: asking (a burst of `--burst` questions at once, as a page that asks several,
  which is what pushes the server past its capacity), looking at an answer's trace,
  listing runs, reading a run's state, its page, a trajectory, a question page, the
  home page, a run's config file, /health, /strategies, and following a run's event
  stream for a moment.
- beside them, evaluations through the API (POST /runs), one after another, each
  followed on its event stream to the end. Each is a new run (its strategies' budgets
  differ by one call, which changes the run's fingerprint and so its folder); the one
  running at the end is the one stopped and resumed.
- the stop: after `--minutes`, once the running evaluation has written answers and
  has more left than it can write before the stop ends it (in its first half, or with
  three times the grace + 3 s of work left at its pace; the load goes on until then), the
  server gets SIGTERM while the clients keep sending; it must exit within its grace
  (`--grace`, the server's `--shutdown-grace`) plus a margin. It is started again on
  the same runs directory, the same POST /runs resumes the evaluation (same request,
  same run id), and the soak follows it to the end.

What it measures (a markdown table, also appended to `--out`): requests by kind with
p50/p95/p99/max latency of the answered ones (a 429 is counted, not timed; "events
(first)" is timed to the first event, answered when one came within its second), the
share of questions refused with 429, every other error (any status but the expected
one, a dropped connection, a timeout: the count and the first distinct ones, with when
they first came), the server's resident memory (VmRSS of the process and its children,
from /proc) after the warm-up and at the end (the highest reading in the first and in
the last fifth of the load after the warm-up: `memory_levels`), and at each tenth of the load, how long
the stop took, and the resume check: every line of every evaluation's results.jsonl and
traces.jsonl is whole JSON, every requested (strategy, question) has exactly one
answer and every answer its trace.

Exit status 1 when any request failed other than with a 429, the memory grew more than
10% from the warm-up to the end, the stop overran, the evaluation was not caught
running, or a record was torn, lost or doubled. Requests cut by the stop itself (in
flight when it came, or sent after) are counted apart, not as errors.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
TOKEN_ENV = "MARAG_SOAK_TOKEN"
TOKEN = "soak-" + os.urandom(12).hex()
MAX_RSS_GROWTH = 0.10  # past this, from the warm-up to the end, the soak fails
STOP_MARGIN_S = 15.0  # a stop may take the grace plus this (the loop's last turns, threads ending)
# Work left, at the evaluation's pace so far, that the stop must find, as a multiple of
# the grace + 3 s: the pace changes (the 30-minute soak stopped one at 1,865/1,952 with
# 19 s left by its average, and it finished within the 8 s the stop took)
STOP_WORK_FACTOR = 3.0


@dataclass(frozen=True)
class Profile:
    llm: str  # `marag serve --llm`
    minutes: float
    ask_strategies: tuple[str, ...]  # what clients ask with
    eval_dataset: str
    eval_strategies: tuple[str, ...]
    eval_limit: int
    timeout_s: float  # a client's patience with one request (past it: an error)


PROFILES = {
    # Every call answered at once: what is soaked is the server (routing, the gate, the
    # queue, trace and run reading, the pages, the writer). The evaluation retrieves, so
    # each one opens the dataset's index as a real one does; 488 questions x 4
    # strategies take minutes at this speed, so one is running whenever the load ends.
    "scripted": Profile("scripted", 30.0, ("vanilla_rag", "llm_only", "mrag", "kair", "unirag", "ircot"),
                        "hotpotqa_dev488", ("llm_only", "vanilla_rag", "mrag", "kair"), 488, 60.0),  # fmt: skip
    # The default local model (llama.cpp, qwen2.5-1.5b): seconds per call, so the asks are
    # the cheap strategies and the evaluation (200 answers) outlasts 5 minutes; a question
    # queued behind 16 others can wait minutes, hence the patience.
    "default": Profile("llamacpp", 5.0, ("vanilla_rag", "llm_only"), "hotpotqa_train100", ("llm_only", "vanilla_rag"), 100, 900.0),
}


# -- the server ---------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int:
    """Resident memory of a process and all its descendants (VmRSS from /proc): a model
    server or worker the process starts counts too."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:"))
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration, ValueError):  # gone meanwhile, or a kernel thread without VmRSS
            continue
    return total


class Server:
    """`marag serve` in a subprocess, started as an operator starts it."""

    def __init__(self, args: argparse.Namespace, profile: Profile, root: Path, cache: Path, data_dir: Path):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "server.log"
        self.cmd = [sys.executable, "-m", "marag.cli", "serve", "--llm", profile.llm, "--runs", str(root / "runs"),
                    "--indexes", str(root / "indexes"), "--port", str(self.port), "--token-env", TOKEN_ENV,
                    "--max-concurrency", str(args.max_concurrency), "--shutdown-grace", str(args.grace),
                    "--data-dir", str(data_dir)]  # fmt: skip
        # the working directory is where evaluations cache their datasets' indexes
        # (.marag/indexes): a kept one spares each soak a build of minutes
        self.cwd = cache
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 180.0) -> None:
        with self.log_path.open("a") as log:
            log.write(f"\n--- {time.strftime('%H:%M:%S')} {' '.join(self.cmd)}\n")
            log.flush()
            self.proc = subprocess.Popen(self.cmd, cwd=self.cwd, env={**os.environ, TOKEN_ENV: TOKEN}, stdout=log,
                                         stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"the server did not answer /health within {timeout_s:.0f} s: {self.log_tail()}")

    def rss(self) -> int:
        return rss_bytes(self.proc.pid) if self.proc and self.proc.poll() is None else 0

    def stop(self, limit_s: float) -> tuple[float, bool]:
        """SIGTERM, then (seconds until it exited, whether it exited by itself within
        `limit_s`); past that it is killed."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(limit_s)
            return time.monotonic() - t0, True
        except subprocess.TimeoutExpired:
            self.kill()
            return time.monotonic() - t0, False

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""


# -- what the clients saw -----------------------------------------------------------------------
@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # answered requests' seconds
    statuses: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))  # kind -> status (or error name)
    errors: Counter = field(default_factory=Counter)  # a description of each failure -> times
    first_seen: dict[str, float] = field(default_factory=dict)  # description -> seconds into the load
    cut: int = 0  # requests the stop cut (in flight when it came, or sent after)
    started: float = field(default_factory=time.monotonic)

    def fail(self, description: str) -> None:
        self.errors[description] += 1
        self.first_seen.setdefault(description, time.monotonic() - self.started)

    def failures(self) -> int:
        return sum(self.errors.values())

    def transport_error(self, kind: str, exc: Exception, what: str, stopping: bool) -> None:
        """A request that got no answer: cut by the stop, or a failure."""
        if stopping:
            self.cut += 1
        else:
            self.statuses[kind][type(exc).__name__] += 1
            self.fail(f"{what}: {type(exc).__name__}: {str(exc)[:200]}")


@dataclass
class EvalRun:
    body: dict[str, Any]
    run_id: str = ""
    done: int = 0
    total: int = 0
    status: str = "starting"
    started: float = field(default_factory=time.monotonic)
    first_answer: float | None = None  # when its first answer was written
    ended: float | None = None  # when its final state came

    def seconds_left(self) -> float:
        """At its rate since its first answer, how long the rest takes (0 while that rate
        is not known yet)."""
        if self.first_answer is None or self.done < max(2, self.total // 50):
            return 0.0
        rate = (self.done - 1) / max(1e-3, time.monotonic() - self.first_answer)
        return (self.total - self.done) / rate if rate > 0 else float("inf")


@dataclass
class World:
    server: Server
    profile: Profile
    args: argparse.Namespace
    questions: list[str]
    tally: Tally = field(default_factory=Tally)
    stopping: bool = False  # set just before SIGTERM: clients finish their request and leave
    evals: list[EvalRun] = field(default_factory=list)
    run_ids: set[str] = field(default_factory=set)
    # what browsing found to open next, newest last (a user clicks what a page showed)
    trace_links: deque = field(default_factory=lambda: deque(maxlen=200))  # (run id, trace id)
    question_links: deque = field(default_factory=lambda: deque(maxlen=200))  # (run id, qid)
    rss: list[tuple[float, int]] = field(default_factory=list)  # (seconds into the load, bytes)
    memory_from: float = 0.0  # seconds into the load where the memory's comparison starts (`memory_levels`)

    def current_eval(self) -> EvalRun | None:
        return self.evals[-1] if self.evals else None


async def call(world: World, client: httpx.AsyncClient, kind: str, method: str, path: str, ok: tuple[int, ...] = (200,),
               **kw: Any) -> httpx.Response | None:  # fmt: skip
    """One request, tallied under `kind`: its latency when answered with an `ok`
    status, its status always, and a failure when neither that nor (for questions) 429."""
    t = world.tally
    t0 = time.perf_counter()
    try:
        r = await client.request(method, path, **kw)
    except httpx.HTTPError as exc:
        t.transport_error(kind, exc, f"{kind}: {method} {path[:80]}", world.stopping)
        return None
    seconds = time.perf_counter() - t0
    if world.stopping and r.status_code == 503:  # "the server is stopping": the stop's answer
        t.cut += 1
        return None
    t.statuses[kind][r.status_code] += 1
    if r.status_code in ok:
        t.latencies[kind].append(seconds)
        return r
    if not (r.status_code == 429 and kind == "ask"):
        t.fail(f"{kind}: {method} {path[:80]}: {r.status_code} {r.text[:300]}")
    return None


# -- the clients' actions -------------------------------------------------------------------------
def _known_run(world: World, rng: random.Random) -> str | None:
    """Mostly the evaluation running now (its files change under the reader), else any run."""
    current = world.current_eval()
    if current and current.run_id and rng.random() < 0.7:
        return current.run_id
    return rng.choice(sorted(world.run_ids)) if world.run_ids else None


async def ask(world: World, client: httpx.AsyncClient, rng: random.Random) -> None:
    """A burst of questions at once; then the trace of one answer, as JSON and as a page
    (right away: the server keeps the last 200 answers' traces)."""
    bodies = [{"question": rng.choice(world.questions), "strategy": rng.choice(world.profile.ask_strategies)}
              for _ in range(world.args.burst)]  # fmt: skip
    answers = await asyncio.gather(*(call(world, client, "ask", "POST", "/ask", json=b) for b in bodies))
    answered = [r for r in answers if r is not None]
    if answered:
        trace_id = rng.choice(answered).json()["trace_id"]
        await call(world, client, "ask trace", "GET", f"/traces/{trace_id}")
        if rng.random() < 0.3:
            await call(world, client, "trajectory page", "GET", f"/view/traces/{trace_id}")


async def list_runs(world: World, client: httpx.AsyncClient, rng: random.Random) -> None:
    r = await call(world, client, "run list", "GET", "/runs")
    if r is not None:
        world.run_ids.update(run["run_id"] for run in r.json())


async def run_state(world: World, client: httpx.AsyncClient, rng: random.Random) -> None:
    if run_id := _known_run(world, rng):
        await call(world, client, "run state", "GET", f"/runs/{run_id}")


LINK = re.compile(r"href='(/view/runs/[^']+)'")


async def run_page(world: World, client: httpx.AsyncClient, rng: random.Random) -> None:
    """A run's page; the trajectories and questions it links to are what is opened next."""
    run_id = _known_run(world, rng)
    if not run_id:
        return
    r = await call(world, client, "run page", "GET", f"/view/runs/{run_id}")
    if r is None:
        return
    for href in LINK.findall(r.text):
        href = html.unescape(href)
        if m := re.fullmatch(r"/view/runs/([^/]+)/traces/([0-9a-f]+)", href):
            world.trace_links.append((m[1], m[2]))
        elif m := re.fullmatch(r"/view/runs/([^/]+)/question\?qid=(.+)", href):
            world.question_links.append((m[1], m[2]))  # both still quoted, as the page wrote them


async def trajectory(world: World, client: httpx.AsyncClient, rng: random.Random) -> None:
    if not world.trace_links:
        return await run_page(world, client, rng)
    run_id, trace_id = rng.choice(world.trace_links)
    if rng.random() < 0.5:
        await call(world, client, "trajectory page", "GET", f"/view/runs/{run_id}/traces/{trace_id}")
    else:
        await call(world, client, "run trace", "GET", f"/traces/{trace_id}")


async def question_page(world: World, client: httpx.AsyncClient, rng: random.Random) -> None:
    if not world.question_links:
        return await run_page(world, client, rng)
    run_id, qid = rng.choice(world.question_links)
    await call(world, client, "question page", "GET", f"/view/runs/{run_id}/question?qid={qid}")


async def home(world: World, client: httpx.AsyncClient, rng: random.Random) -> None:
    await call(world, client, "home page", "GET", "/")


async def health(world: World, client: httpx.AsyncClient, rng: random.Random) -> None:
    await call(world, client, "health", "GET", "/health")


async def listings(world: World, client: httpx.AsyncClient, rng: random.Random) -> None:
    await call(world, client, "strategies", "GET", rng.choice(["/strategies", "/indexes"]))


async def run_file(world: World, client: httpx.AsyncClient, rng: random.Random) -> None:
    if run_id := _known_run(world, rng):
        await call(world, client, "run file", "GET", f"/runs/{run_id}/files/config.json")


async def glance_at_events(world: World, client: httpx.AsyncClient, rng: random.Random) -> None:
    """Follow the running evaluation's events for up to a second, then hang up (a page
    closed in the middle of a stream): timed to its first event."""
    current = world.current_eval()
    if not current or not current.run_id:
        return
    t, kind = world.tally, "events (first)"
    t0 = time.perf_counter()
    try:
        async with client.stream("GET", f"/runs/{current.run_id}/events") as r:
            if world.stopping and r.status_code == 503:
                t.cut += 1
                return
            t.statuses[kind][r.status_code] += 1
            if r.status_code != 200:
                await r.aread()
                t.fail(f"{kind}: {r.status_code} {r.text[:300]}")
                return
            first = True
            async with asyncio.timeout(1.0):
                async for line in r.aiter_lines():
                    if line.startswith("data:") and first:
                        t.latencies[kind].append(time.perf_counter() - t0)
                        first = False
    except TimeoutError:
        pass  # the hang-up
    except httpx.HTTPError as exc:
        t.transport_error(kind, exc, kind, world.stopping)


# how often a user does each (weights): mostly asking and reading runs
ACTIONS = [(ask, 4), (list_runs, 2), (run_state, 2), (run_page, 1), (trajectory, 2), (question_page, 1), (home, 1),
           (health, 1), (listings, 1), (run_file, 1), (glance_at_events, 1)]  # fmt: skip


def client(world: World) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=world.server.base, headers={"Authorization": f"Bearer {TOKEN}"},
                             timeout=world.profile.timeout_s)  # fmt: skip


async def user(world: World, seed: int) -> None:
    rng = random.Random(seed)
    actions, weights = zip(*ACTIONS)
    async with client(world) as http:
        while not world.stopping:
            await rng.choices(actions, weights)[0](world, http, rng)
            await asyncio.sleep(rng.uniform(0, 0.02))  # a breath, so the loop is not one client's


# -- the evaluations --------------------------------------------------------------------------------
def eval_body(args: argparse.Namespace, n: int) -> dict[str, Any]:
    """The n-th evaluation: the same dataset and strategies, each strategy's call budget
    one higher than the last one's (80 is the default; a question takes a few): a new
    fingerprint, so a new run folder, and the same work."""
    strategies = args.eval_strategies.split(",")
    options = {s: {"max_llm_calls": 80 + n} for s in strategies} if n else {}
    return {"dataset": args.eval_dataset, "strategies": strategies, "limit": args.eval_limit, "options": options}


async def follow(world: World, http: httpx.AsyncClient, run: EvalRun) -> None:
    """Read a run's event stream to its final state, keeping its progress."""
    async with http.stream("GET", f"/runs/{run.run_id}/events", timeout=httpx.Timeout(world.profile.timeout_s, read=None)) as r:
        if r.status_code != 200:
            await r.aread()
            raise RuntimeError(f"events of {run.run_id}: {r.status_code} {r.text[:300]}")
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            if event.get("done") is not None:
                run.done, run.total = event["done"], event["total"] or run.total
                if run.first_answer is None and run.done >= 1:
                    run.first_answer = time.monotonic()
            if "status" in event:
                run.status, run.ended = event["status"], time.monotonic()
                if event.get("error"):
                    raise RuntimeError(f"evaluation {run.run_id} {run.status}: {event['error']}")
                return


async def evaluations(world: World) -> None:
    """Evaluations through the API, one after another, until the stop (which cuts the
    last one's stream: expected)."""
    t = world.tally
    async with client(world) as http:
        n = 0
        while not world.stopping:
            run = EvalRun(eval_body(world.args, n))
            r = await call(world, http, "eval start", "POST", "/runs", json=run.body)
            if r is None:
                await asyncio.sleep(1.0)  # tallied as a failure; try again
                continue
            run.run_id, run.status = r.json()["run_id"], "running"
            world.evals.append(run)
            world.run_ids.add(run.run_id)
            try:
                await follow(world, http, run)
            except (httpx.HTTPError, RuntimeError) as exc:
                if world.stopping and isinstance(exc, httpx.HTTPError):
                    t.cut += 1
                    return
                t.fail(f"evaluation: {type(exc).__name__}: {str(exc)[:300]}")
                await asyncio.sleep(1.0)
            else:
                if run.status == "running" and not world.stopping:
                    t.fail(f"evaluation: the event stream of {run.run_id} ended before its final state")
            n += 1


async def sample_rss(world: World, started: float) -> None:
    while not world.stopping:
        world.rss.append((time.monotonic() - started, world.server.rss()))
        await asyncio.sleep(2.0)


# -- the check of the runs -------------------------------------------------------------------------
@dataclass
class RunCheck:
    run_id: str
    requested: int
    answers: int = 0
    torn: list[str] = field(default_factory=list)  # "results.jsonl line 7", ...
    missing: int = 0
    doubled: int = 0
    unasked: int = 0
    errored: int = 0  # records with an error (retried on resume; the later record counts)
    traces: int = 0
    traceless: int = 0  # answers whose trace is not in traces.jsonl
    traces_doubled: int = 0

    def ok(self) -> bool:
        return not (self.torn or self.missing or self.doubled or self.unasked or self.traceless or self.traces_doubled)

    def problems(self) -> str:
        parts = [f"{len(self.torn)} torn lines ({', '.join(self.torn[:3])})" if self.torn else "",
                 f"{self.missing} missing" if self.missing else "", f"{self.doubled} doubled" if self.doubled else "",
                 f"{self.unasked} not asked for" if self.unasked else "", f"{self.traceless} without a trace" if self.traceless else "",
                 f"{self.traces_doubled} traces doubled" if self.traces_doubled else ""]  # fmt: skip
        return "; ".join(p for p in parts if p) or "whole"


def _lines(path: Path, check: RunCheck) -> list[dict[str, Any]]:
    """Every line of a JSONL file as an object; a line that is not one is torn."""
    out = []
    if not path.exists():
        return out
    for i, line in enumerate(path.read_bytes().split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            out.append(record)
        else:
            check.torn.append(f"{path.name} line {i}")
    if path.read_bytes()[-1:] not in (b"", b"\n"):
        check.torn.append(f"{path.name} ends inside a line")
    return out


def check_run(run_dir: Path, requested: set[tuple[str, str]]) -> RunCheck:
    """Whole lines, one answer per requested (strategy, question), a trace for each."""
    check = RunCheck(run_dir.name, len(requested))
    records = _lines(run_dir / "results.jsonl", check)
    check.errored = sum(1 for r in records if r.get("error"))
    answered = Counter((r.get("strategy"), r.get("qid")) for r in records if not r.get("error"))
    check.answers = sum(answered.values())
    check.missing = len(requested - set(answered))
    check.doubled = sum(1 for n in answered.values() if n > 1)
    check.unasked = len(set(answered) - requested)
    trace_ids = Counter(t.get("id") for t in _lines(run_dir / "traces.jsonl", check))
    check.traces = sum(trace_ids.values())
    check.traces_doubled = sum(1 for n in trace_ids.values() if n > 1)
    check.traceless = sum(1 for r in records if not r.get("error") and r.get("trace_id") not in trace_ids)
    return check


def requested_answers(body: dict[str, Any], data_dir: Path) -> set[tuple[str, str]]:
    """What an evaluation was asked for, from the dataset itself (not the run's files)."""
    from marag.eval.datasets import load_dataset

    questions = load_dataset(body["dataset"], data_dir).questions[: body["limit"]]
    return {(s, q.id) for s in body["strategies"] for q in questions}


def answers_written(run_dir: Path) -> int:
    path = run_dir / "results.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


# -- the soak ------------------------------------------------------------------------------------
@dataclass
class Report:
    table: str
    failures: list[str]
    tally: Tally
    resume: RunCheck | None  # the stopped evaluation's files after it was resumed
    interrupted: bool  # whether the stop caught that evaluation with answers still to write
    rss_growth: float | None

    @property
    def ok(self) -> bool:
        return not self.failures


def prepare(args: argparse.Namespace, root: Path, cache: Path, data_dir: Path) -> None:
    """The served index (samples/corpus with `marag index`, as a user builds it) and, when
    the evaluation retrieves, its dataset's index in the server's cache, built here so the
    soak measures a server at work rather than its first build."""
    subprocess.run([sys.executable, "-m", "marag.cli", "index", str(REPO / "samples" / "corpus"), "--out", str(root / "indexes" / "sample"),
                    "--retrievers", "bm25", "--quiet"], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    from marag.eval.datasets import load_dataset
    from marag.eval.indexes import ensure_index
    from marag.index.config import IndexConfig
    from marag.index.uri import close_index
    from marag.strategies import STRATEGIES

    if any(STRATEGIES.get(s).needs_retriever for s in args.eval_strategies.split(",")):
        t0 = time.monotonic()
        close_index(ensure_index(load_dataset(args.eval_dataset, data_dir), IndexConfig(), cache / ".marag" / "indexes", progress=False))
        print(f"the evaluation's index ({args.eval_dataset}) is ready in {cache} ({time.monotonic() - t0:.0f} s)", file=sys.stderr)


async def load(world: World, warmup_s: float) -> tuple[float, int, int, float, bool, str]:
    """The clients and evaluations for `--minutes`, then the stop under load. Returns
    (seconds of load, RSS after the warm-up and at the end (`memory_levels`), seconds the stop took,
    whether it stopped by itself, the stopped evaluation's state at the stop)."""
    args = world.args
    started = world.tally.started = time.monotonic()
    tasks = [asyncio.create_task(user(world, seed)) for seed in range(args.clients)]
    tasks += [asyncio.create_task(evaluations(world)), asyncio.create_task(sample_rss(world, started))]
    await asyncio.sleep(args.minutes * 60)

    # Stop only when the evaluation running now has written answers and has more left
    # than it can write before the stop ends it (it goes on through the grace and the
    # server's last turns): in its first half, or with STOP_WORK_FACTOR x (grace + 3 s) of work
    # left at its pace. Else the stop would not interrupt it: until then (or a limit)
    # the load goes on, and the next evaluation may be the one.
    wait_until = time.monotonic() + max(120.0, 0.2 * args.minutes * 60)
    while time.monotonic() < wait_until:
        run = world.current_eval()
        if run and run.status == "running" and run.done >= 1 and (run.done <= run.total / 2 or run.seconds_left() > STOP_WORK_FACTOR * (args.grace + 3)):
            break
        await asyncio.sleep(0.05)
    load_s = time.monotonic() - started
    world.rss.append((load_s, world.server.rss()))
    first = world.evals[0] if world.evals and world.evals[0].ended else None  # a whole evaluation: one cycle of the memory
    if first is not None and first.ended - started < load_s / 2:
        warmup_s = max(warmup_s, first.ended - started)
    world.memory_from = warmup_s
    rss_warm, rss_end = memory_levels(world.rss, warmup_s, load_s, first.ended - first.started if first else 0.0)
    run = world.current_eval()
    at_stop = f"{run.done}/{run.total} answers" if run else "none running"

    world.stopping = True
    stop_s, by_itself = await asyncio.to_thread(world.server.stop, args.grace + STOP_MARGIN_S)
    await asyncio.gather(*tasks, return_exceptions=True)
    return load_s, rss_warm, rss_end, stop_s, by_itself, at_stop


async def resume(world: World, body: dict[str, Any], run_id: str) -> str | None:
    """Start the server again and send the stopped evaluation's request again; None when
    it resumed under the same run id and finished, else what went wrong."""
    await asyncio.to_thread(world.server.start)
    async with client(world) as http:
        r = await http.post("/runs", json=body)
        if r.status_code != 200:
            return f"POST /runs again: {r.status_code} {r.text[:300]}"
        if r.json()["run_id"] != run_id:
            # a run id carries a digest of marag's source (marag.eval.versions): an edit
            # during the soak makes the same request a new run. Soak a checkout left alone.
            return (f"POST /runs again started {r.json()['run_id']}, not {run_id} (was marag's source edited during "
                    "the soak? a run's id changes with the code)")  # fmt: skip
        run = EvalRun(body, run_id=run_id)
        try:
            await follow(world, http, run)
        except (httpx.HTTPError, RuntimeError) as exc:
            return f"following the resumed run: {type(exc).__name__}: {str(exc)[:300]}"
        return None if run.status == "done" else f"the resumed run ended {run.status}"


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least a share q of them at or below it."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def memory_levels(samples: list[tuple[float, int]], warmup_s: float, load_s: float, cycle_s: float = 0.0) -> tuple[int, int]:
    """The server's memory after the warm-up and at the end: the highest reading in the
    first and in the last fifth of the load after the warm-up, each window at least one
    evaluation long (`cycle_s`) and at most half the load. Single readings compare
    different states: the memory swings with each evaluation (its index is loaded, its
    records held, then freed), and the 30-minute soak's first reading (first evaluation
    loading, 493 MB) against its last (one running, 672 MB) read as +36% where its idle
    readings moved 447-470 MB. A window that spans an evaluation holds its peak, so peak
    against peak compares like with like, and a leak still shows: it lifts every peak
    after it. The soak ends its warm-up when the first evaluation ends (the first one
    also loads what the server keeps) and passes that evaluation's length as `cycle_s`."""
    span = load_s - warmup_s
    window = min(max(10.0, 0.2 * span, cycle_s), span / 2)

    def peak(lo: float, hi: float) -> int:
        return max((b for s, b in samples if lo <= s <= hi), default=0)

    return peak(warmup_s, warmup_s + window), peak(load_s - window, load_s)


def rss_timeline(samples: list[tuple[float, int]], load_s: float, end: int) -> str:
    """The memory at each tenth of the load: a plateau reads as a level line, a leak as
    a climb to the end."""
    points = [next((b for s, b in samples if s >= f * load_s / 10), end) for f in range(10)] + [end]
    return " ".join(f"{b / 2**20:.0f}" for b in points) + " MB"


def soak(args: argparse.Namespace) -> Report:
    from marag.config import data_dir as find_data

    profile = PROFILES[args.model]
    data_dir = find_data(args.data_dir)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="marag-soak-"))
    if root.exists() and any(root.iterdir()):  # its runs would be resumed, not made
        raise SystemExit(f"--keep {root} is not empty: give a new folder")
    root.mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache).expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    prepare(args, root, cache, data_dir)
    questions = [json.loads(line)["question"] for line in (REPO / "samples" / "questions.jsonl").read_text().splitlines() if line.strip()]
    server = Server(args, profile, root, cache, data_dir)
    world = World(server, profile, args, questions)
    warmup_s = args.warmup if args.warmup is not None else min(60.0, 0.2 * args.minutes * 60)
    failures: list[str] = []
    resume_check: RunCheck | None = None
    interrupted = False
    try:
        server.start()
        load_s, rss_warm, rss_end, stop_s, by_itself, at_stop = asyncio.run(load(world, warmup_s))
        if not by_itself:
            failures.append(f"the server did not exit within {args.grace + STOP_MARGIN_S:.0f} s of SIGTERM (killed)")
        elif stop_s > args.grace + STOP_MARGIN_S:
            failures.append(f"the stop took {stop_s:.1f} s")
        stopped = world.current_eval()
        checks: list[RunCheck] = []
        resumed = "no evaluation was started"
        if stopped and stopped.run_id:
            run_dir = root / "runs" / stopped.run_id
            requested = requested_answers(stopped.body, data_dir)
            written = answers_written(run_dir)
            interrupted = written < len(requested)
            if not interrupted:
                failures.append(f"the evaluation had finished when the stop came ({written} answers): make it bigger "
                                "(--eval-limit, --eval-strategies) or the grace shorter")  # fmt: skip
            t0 = time.monotonic()
            problem = asyncio.run(resume(world, stopped.body, stopped.run_id))
            resume_s = time.monotonic() - t0
            if problem:
                failures.append(problem)
            resume_check = check_run(run_dir, requested)
            resumed = (f"{stopped.run_id}: stopped at {at_stop} ({written} lines on disk), resumed in {resume_s:.1f} s: "
                       f"{resume_check.answers}/{resume_check.requested} answers, {resume_check.traces} traces, "
                       f"{resume_check.errored} errored records; {resume_check.problems()}")  # fmt: skip
            checks = [check_run(root / "runs" / r.run_id, requested_answers(r.body, data_dir)) for r in world.evals[:-1] if r.run_id]
            checks.append(resume_check)
        bad = [c for c in checks if not c.ok()]
        failures += [f"run {c.run_id}: {c.problems()}" for c in bad]
    finally:
        server.kill()
    tally = world.tally
    if tally.failures():
        failures.append(f"{tally.failures()} requests failed other than with 429")
    growth = (rss_end - rss_warm) / rss_warm if rss_warm else None
    if growth is not None and growth > MAX_RSS_GROWTH:
        failures.append(f"server memory grew {growth:+.1%} from the warm-up to the end (limit {MAX_RSS_GROWTH:+.0%})")

    finished = [r for r in world.evals[:-1] if r.status == "done"]
    lines = [f"### HTTP soak: {args.model} model (`--llm {profile.llm}`), {args.clients} clients, {load_s / 60:.1f} min",
             "", "| kind | requests | answered | 429 | failed | p50 ms | p95 ms | p99 ms | max ms |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    failed_by_kind = Counter(e.split(":", 1)[0] for e in tally.errors.elements())
    for kind in sorted(tally.statuses, key=lambda k: -sum(tally.statuses[k].values())):
        n, lat = sum(tally.statuses[kind].values()), tally.latencies[kind]
        ms = [f"{percentile(lat, q) * 1000:.0f}" for q in (0.5, 0.95, 0.99)] + [f"{max(lat) * 1000:.0f}"] if lat else ["–"] * 4
        lines.append(f"| {kind} | {n} | {len(lat)} | {tally.statuses[kind][429]} | {failed_by_kind[kind]} | {' | '.join(ms)} |")
    total = sum(sum(c.values()) for c in tally.statuses.values())
    asks = sum(tally.statuses["ask"].values())
    mb = lambda b: f"{b / 2**20:.0f} MB"  # noqa: E731
    lines += ["", "| measure | value |", "|---|---|",
              f"| model | {args.model} (`marag serve --llm {profile.llm}`) |",
              f"| clients | {args.clients}, questions in bursts of {args.burst}; server `--max-concurrency {args.max_concurrency}` (queue 16) |",
              f"| duration | {load_s:.0f} s of load ({args.minutes:g} min asked; warm-up {warmup_s:.0f} s, memory compared from {world.memory_from:.0f} s) |",
              f"| n | {total} requests ({total / load_s:.1f}/s), {asks} questions |",
              f"| 429 past capacity | {tally.statuses['ask'][429] / asks:.1%} of questions |" if asks else "| 429 past capacity | no questions |",
              f"| errors other than 429 | {tally.failures()} |",
              f"| cut by the stop | {tally.cut} requests (in flight at SIGTERM, or sent after) |",
              f"| server RSS | highest {mb(rss_warm)} in the first fifth after the warm-up, {mb(rss_end)} in the last fifth ({growth:+.1%}); peak {mb(max(b for _, b in world.rss))} |"
              if growth is not None else "| server RSS | not measured |",
              f"| RSS over the load | {rss_timeline(world.rss, load_s, world.rss[-1][1])} |",
              f"| evaluations | {args.eval_dataset} x {args.eval_strategies}, limit {args.eval_limit}: {len(finished)} finished during the load, each checked |",
              f"| stop | SIGTERM under load: {'exited' if by_itself else 'KILLED'} after {stop_s:.1f} s (grace {args.grace:g} s) |",
              f"| resume | {resumed} |",
              f"| verdict | {'pass' if not failures else 'FAIL: ' + '; '.join(failures)} |"]  # fmt: skip
    if tally.errors:
        lines += ["", "First failures (distinct, with how often):"]
        lines += [f"- {n} x (first at {tally.first_seen[e]:.0f} s) {e}" for e, n in tally.errors.most_common(5)]
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        lines += ["", f"(server log, runs and indexes kept in {root})"]
    return Report("\n".join(lines), failures, tally, resume_check, interrupted, growth)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(PROFILES), default="scripted", help="scripted: the shipped fake model; default: qwen2.5-1.5b")
    ap.add_argument("--minutes", type=float, default=None, help="minutes of load (fractions allowed; default 30 scripted, 5 default)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--burst", type=int, default=4, help="questions a client asks at once")
    ap.add_argument("--max-concurrency", type=int, default=1, help="the server's --max-concurrency")
    ap.add_argument("--grace", type=float, default=10.0, help="the server's --shutdown-grace (seconds)")
    ap.add_argument("--warmup", type=float, default=None, help="seconds before the first memory reading (default: 20%% of the load, at most 60)")
    ap.add_argument("--eval-dataset", default=None)
    ap.add_argument("--eval-strategies", default=None, help="comma-separated")
    ap.add_argument("--eval-limit", type=int, default=None)
    ap.add_argument("--cache", default="~/.cache/marag/soak", help="the server's working directory, where evaluations keep their indexes")
    ap.add_argument("--keep", default=None, help="a folder for the server log, runs and indexes, kept (default: a temporary one, removed)")
    ap.add_argument("--data-dir", default=None, help="benchmark data (default: MARAG_DATA)")
    ap.add_argument("--out", default=None, help="also append the table to this file")
    args = ap.parse_args(argv)
    profile = PROFILES[args.model]
    args.minutes = profile.minutes if args.minutes is None else args.minutes
    args.eval_dataset = args.eval_dataset or profile.eval_dataset
    args.eval_strategies = args.eval_strategies or ",".join(profile.eval_strategies)
    args.eval_limit = args.eval_limit or profile.eval_limit
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = soak(args)
    print(report.table)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + report.table + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
