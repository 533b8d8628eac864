"""Run strategies over a dataset: concurrent, written as it goes, resumable.

A run directory holds `config.json` (what was asked, with seeds, model and library
versions), `results.jsonl` (one `marag.eval.rundir.ResultRecord` per strategy x
question, appended the moment the question is scored) and `traces.jsonl`. Rerunning the
same command finds the directory and answers only the questions without a finished
result; a question that raised is recorded with its error and retried on the next run.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from marag.collector import freeze_long_lived, thaw
from marag.corpus.models import Question
from marag.errors import MaragError, MaragWarning
from marag.eval.answering import (
    PAPER_JUDGE_REPEATS,
    PAPER_JUDGE_TEMPERATURE,
    EvalConfig,
    answer_one,
    prepare_retrieval,
    strategy_settings,
    validate_names,
)
from marag.eval.datasets import Dataset, load_dataset
from marag.eval.rundir import RESULTS, ResultRecord, append_result, drop_torn_tail, read_results
from marag.eval.versions import code_version, library_versions
from marag.index.uri import close_index
from marag.llm import make_llm
from marag.strategies import STRATEGIES, make_strategy
from marag.trace import Trace, write_jsonl


TRACES = "traces.jsonl"


def _write_json(path: Path, record: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(path)


def _prepare_run_dir(cfg: EvalConfig, run_dir: Path, facts: dict[str, Any]) -> None:
    """Create the run directory, or check that it holds this run. `facts`: what the
    run resolved (model ids, effective strategy settings, dataset pool, judge setup)."""
    cfg_path = run_dir / "config.json"
    if cfg_path.exists():
        old = json.loads(cfg_path.read_text())
        if old.get("fingerprint") != cfg.fingerprint():
            raise MaragError(
                f"{run_dir} holds a run with a different configuration (or made by other code)",
                hint="choose another --run-id, or delete that directory to start over",
            )
        old_limit = old["config"].get("limit")
        if old_limit is not None and (cfg.limit is None or cfg.limit > old_limit):  # a larger limit extends
            old["config"]["limit"] = cfg.limit
            old["questions"] = facts["questions"]
            _write_json(cfg_path, old)
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "fingerprint": cfg.fingerprint(),
        "code": code_version(),
        "config": cfg.model_dump(mode="json"),
        "versions": library_versions(),
        **facts,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    _write_json(cfg_path, record)


async def run_eval(
    cfg: EvalConfig,
    run_dir: Path,
    data_dir: str | Path | None = None,
    index_cache: Path = Path(".marag/indexes"),
    progress: bool = True,
    dataset: Dataset | None = None,
    llm=None,
    judge=None,
    on_result: Callable[[ResultRecord, int, int], None] | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
) -> Path:
    """Answer and score every (strategy, question) not yet done in `run_dir`.
    `on_result(record, done, total)` is called after each answer is written (the HTTP
    API streams it as progress). `executor` and `ray_address` default to the config's."""
    validate_names(cfg)
    executor, ray_address = executor or cfg.executor, ray_address or cfg.ray_address
    ds = dataset or load_dataset(cfg.dataset, data_dir)
    questions = _questions(cfg, ds)
    # models are created lazily (no server starts until the first call): cheap to make
    # here, so config.json can record the resolved model ids before any work
    llm = llm or make_llm(cfg.llm)
    judge, self_judged = _judge(cfg, llm, judge)
    settings = strategy_settings(cfg, ds)
    _prepare_run_dir(cfg, run_dir, _facts(cfg, ds, questions, settings, llm, judge, self_judged))
    todo = _todo(cfg, run_dir, questions, progress)

    # In a thread, both: building the dataset's index (minutes for a new one) and making
    # the strategies (GINGER loads a cross-encoder) would otherwise stop the event loop,
    # and in `marag serve` every other request with it (/health took 113 s while an
    # evaluation started over HTTP built its index; benchmarks/soak.py).
    retriever, doc_collections = await asyncio.to_thread(prepare_retrieval, cfg, ds, index_cache, progress) if todo else (None, None)
    strategies = (await asyncio.to_thread(lambda: {s: make_strategy(s, llm, retriever, settings[s]) for s in cfg.strategies})
                  if todo and executor == "local" else {})  # fmt: skip
    if todo:
        # What is loaded now (dataset, index, models, libraries) lives for the whole run:
        # frozen, no collection walks it again (a full one took ~0.15 s per 600 answers).
        freeze_long_lived()
    writer = _ResultWriter(run_dir, len(todo), f"eval {ds.name}", progress, on_result)
    try:
        if executor == "ray":
            from marag.eval.distributed import ray_answers

            async for record, trace in ray_answers(cfg, todo, data_dir, index_cache, ray_address):
                await writer.write(record, trace)
        else:
            await _answer_here(cfg, todo, strategies, judge, doc_collections, ds.categories, writer)
    finally:
        writer.close()
        # the run's index: its connection (a Lite file's lock) ends with the run
        close_index(getattr(retriever, "index", None))
        if todo:
            thaw()  # what the run loaded and dropped is freed by the next full collection
    return run_dir


def _questions(cfg: EvalConfig, ds: Dataset) -> list[Question]:
    """The dataset's questions the run answers: past --skip, up to --limit; some."""
    questions = ds.questions[cfg.skip :]
    questions = questions[: cfg.limit] if cfg.limit else questions
    if not questions:
        raise MaragError(
            f"dataset {ds.name!r} has no questions" + (f" after the first {cfg.skip}" if cfg.skip else ""),
            hint="lower --skip" if cfg.skip else "check the dataset's files",
        )
    return questions


def _judge(cfg: EvalConfig, llm, judge):
    """The judge of the judged metrics (the one given, the config's, else the strategies'
    own model, with a warning that it grades itself) and whether it is that own model."""
    self_judged = bool(cfg.judge_metrics) and cfg.judge is None and judge is None
    if cfg.judge_metrics and judge is None:
        judge = make_llm(cfg.judge) if cfg.judge else llm
    if self_judged:
        warnings.warn(
            f"judged metrics ({', '.join(cfg.judge_metrics)}) use the strategies' own model "
            f"({getattr(llm, 'model', '?')}) as the judge, so it grades itself; pass --judge MODEL for "
            f"a separate judge (it then also gets the paper's {PAPER_JUDGE_REPEATS} repeats at "
            f"temperature {PAPER_JUDGE_TEMPERATURE})",
            MaragWarning,
            stacklevel=3,  # run_eval's caller, as when run_eval warned itself
        )
    return judge, self_judged


def _facts(
    cfg: EvalConfig, ds: Dataset, questions: list[Question], settings: dict[str, dict], llm, judge, self_judged: bool
) -> dict[str, Any]:
    """What the run resolved, for config.json: model ids, judge setup, dataset pool and
    each strategy's effective settings (validated now: a bad --set fails before any work)."""
    effective = {s: STRATEGIES.get(s).validate_config(settings[s]).model_dump(mode="json") for s in cfg.strategies}
    return {
        # the resolved model ids (e.g. the GGUF file), not just the spec
        "models": {"llm": getattr(llm, "model", "")} | ({"judge": getattr(judge, "model", "")} if judge else {}),
        "judge_setup": {
            "self_judged": self_judged,
            "repeats": cfg.repeats,
            "temperature": cfg.judge_temp,
            "batch": cfg.judge_batch,
        }
        if cfg.judge_metrics
        else None,
        "dataset": {"name": ds.name, "pool": ds.pool, "pool_note": ds.pool_note, "answer_style": ds.answer_style},
        "strategy_settings": effective,
        "questions": len(questions),  # per strategy: a report can tell an unfinished run
    }


def _todo(cfg: EvalConfig, run_dir: Path, questions: list[Question], progress: bool) -> list[tuple[str, Question]]:
    """The (strategy, question) pairs without a finished result in `run_dir` (a torn last
    line, from a killed run, is dropped first); with `progress`, said on stderr."""
    drop_torn_tail(run_dir / RESULTS)
    drop_torn_tail(run_dir / TRACES)
    done = {k for k, r in read_results(run_dir / RESULTS).items() if not r.error}
    todo = [(s, q) for s in cfg.strategies for q in questions if (s, q.id) not in done]
    total = len(cfg.strategies) * len(questions)
    if progress and total > len(todo):
        print(f"resuming {run_dir}: {total - len(todo)} of {total} answers done, {len(todo)} to go", file=sys.stderr)
    if progress and todo:
        print(plan_line(cfg, questions, todo), file=sys.stderr)
    return todo


class _ResultWriter:
    """Appends each scored answer to the run directory (its result, then its trace), one
    at a time, and moves the progress bar (with running means of f1, accuracy, rouge_l)."""

    def __init__(self, run_dir: Path, total: int, desc: str, progress: bool, on_result: Callable[[ResultRecord, int, int], None] | None):
        self.results_path, self.traces_path = run_dir / RESULTS, run_dir / TRACES
        self.total, self.on_result = total, on_result
        self.lock = asyncio.Lock()
        self.bar = tqdm(total=total, desc=desc, disable=not progress, unit="q")
        self.running: dict[str, list[float]] = {}
        self.finished = 0  # answers written in this call (the bar may be disabled)

    async def write(self, record: ResultRecord, trace: Trace | None) -> None:
        async with self.lock:
            append_result(self.results_path, record)
            if trace is not None:
                write_jsonl([trace], self.traces_path)
            for m in ("f1", "accuracy", "rouge_l"):
                if m in record.metrics:
                    self.running.setdefault(f"{record.strategy}:{m}", []).append(record.metrics[m])
            self.bar.set_postfix({k: f"{statistics.fmean(v):.2f}" for k, v in self.running.items()}, refresh=False)
            self.bar.update(1)
            self.finished += 1
            if self.on_result is not None:
                self.on_result(record, self.finished, self.total)

    def close(self) -> None:
        self.bar.close()


async def _answer_here(
    cfg: EvalConfig,
    todo: list[tuple[str, Question]],
    strategies: dict[str, Any],
    judge,
    doc_collections,
    categories,
    writer: _ResultWriter,
) -> None:
    """Answer and score `todo` in this process, `cfg.concurrency` questions at a time."""
    gate = asyncio.Semaphore(max(1, cfg.concurrency))

    async def one(sname: str, q: Question) -> None:
        async with gate:
            record, trace = await answer_one(cfg, strategies[sname], sname, q, judge, doc_collections, categories)
        await writer.write(record, trace)

    await asyncio.gather(*(one(s, q) for s, q in todo))


def plan_line(cfg: EvalConfig, questions: list[Question], todo: list[tuple[str, Question]]) -> str:
    """What a run is about to do, said before it starts: answers to make and about how
    many LLM calls they take (each strategy's typical calls per question, measured)."""
    low = sum(STRATEGIES.get(s).calls[0] for s, _ in todo)
    high = sum(STRATEGIES.get(s).calls[1] for s, _ in todo)
    calls = f"{low:,}" if low == high else f"{low:,}-{high:,}"
    hint = "" if cfg.limit else " (all of them: --limit N answers only the first N)"
    return (f"answering {len(questions)} questions{hint} x {len(cfg.strategies)} strategies: {len(todo)} answers to make, "
            f"about {calls} LLM calls")  # fmt: skip


