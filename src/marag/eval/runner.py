"""Run strategies over a dataset: concurrent, written as it goes, resumable.

A run directory holds `config.json` (what was asked, with seeds, model and library
versions), `results.jsonl` (one line per strategy x question, appended the moment the
question is scored) and `traces.jsonl`. Rerunning the same command finds the directory
and answers only the questions without a finished result; a question that raised is
recorded with its error and retried on the next run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from tqdm.auto import tqdm

from marag.corpus.models import Question
from marag.errors import MaragError
from marag.eval.datasets import Dataset, load_dataset
from marag.eval.metrics import METRICS, EvalExample, score_example
from marag.eval.versions import library_versions
from marag.index.store import IndexConfig
from marag.llm import LLMConfig, make_llm
from marag.strategies import STRATEGIES, Answer, make_strategy
from marag.trace import write_jsonl

DEFAULT_METRICS = [
    "em", "f1", "accuracy", "rouge_l",
    "retrieval_precision", "retrieval_recall", "retrieval_f1", "recall@2", "recall@5", "mrr",
]


class EvalConfig(BaseModel):
    dataset: str
    strategies: list[str]
    strategy_configs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    limit: int | None = None
    metrics: list[str] = Field(default_factory=lambda: list(DEFAULT_METRICS))
    judge_metrics: list[str] = Field(default_factory=list)
    judge_repeats: int = 1
    # repeats at temperature 0 would repeat the same verdict; sample when repeating
    judge_temperature: float | None = None
    llm: LLMConfig = Field(default_factory=LLMConfig)
    judge: LLMConfig | None = None  # defaults to the strategy LLM
    retriever: str | None = None
    index: IndexConfig = Field(default_factory=IndexConfig)
    concurrency: int = 4
    seed: int = 0

    def fingerprint(self) -> str:
        """What makes two runs the same run (for resuming): everything but concurrency."""
        data = self.model_dump(mode="json", exclude={"concurrency"})
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]

    def default_run_id(self) -> str:
        return f"{Path(self.dataset).stem}-{'+'.join(self.strategies)}-{self.fingerprint()}"


def validate_names(cfg: EvalConfig) -> None:
    """Fail before any work on a misspelt strategy or metric."""
    for s in cfg.strategies:
        STRATEGIES.get(s)
    for m in cfg.metrics + cfg.judge_metrics:
        METRICS.get(m)().check()  # a missing optional package fails now, not per question
    if cfg.judge_repeats < 1:
        raise MaragError("--judge-repeats must be at least 1")


def read_results(path: Path) -> dict[tuple[str, str], dict]:
    """Latest line per (strategy, question id); a torn last line (killed mid-write) is ignored."""
    out: dict[tuple[str, str], dict] = {}
    if not path.exists():
        return out
    with path.open(encoding="utf-8") as f:
        for line in f:
            try:
                r = json.loads(line)
                out[(r["strategy"], r["qid"])] = r
            except (json.JSONDecodeError, KeyError):
                continue
    return out


def drop_torn_tail(path: Path) -> None:
    """A run killed mid-write leaves a last line without its newline: cut it off, or the
    next appended record would be glued onto it and lost."""
    if not path.exists():
        return
    with path.open("rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


def _prepare_run_dir(cfg: EvalConfig, run_dir: Path, models: dict[str, str]) -> None:
    cfg_path = run_dir / "config.json"
    if cfg_path.exists():
        old = json.loads(cfg_path.read_text())
        if old.get("fingerprint") != cfg.fingerprint():
            raise MaragError(
                f"{run_dir} holds a run with a different configuration",
                hint="choose another --run-id, or delete that directory to start over",
            )
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "fingerprint": cfg.fingerprint(),
        "config": cfg.model_dump(mode="json"),
        "versions": library_versions(),
        "models": models,  # the resolved model ids (e.g. the GGUF file), not just the spec
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    tmp = cfg_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(cfg_path)


def _example(q: Question, answer: Answer) -> EvalExample:
    seen: dict[str, None] = {}
    for s in answer.sources:
        seen.setdefault(s.doc_id, None)
    return EvalExample(
        question=q,
        prediction=answer.answer,
        retrieved_doc_ids=list(seen),
        retrieved_texts=[s.text for s in answer.sources],
    )


async def _score(
    cfg: EvalConfig, ex: EvalExample, judge, judge_temperature: float, retrieves: bool
) -> tuple[dict[str, float], dict[str, float], dict]:
    # a strategy that never retrieves has no retrieval quality (not a quality of 0)
    names = [m for m in cfg.metrics if retrieves or METRICS.get(m).kind != "retrieval"]
    means = {name: r.value for name, r in (await score_example(ex, names)).items()}
    stds: dict[str, float] = {}
    details: dict[str, Any] = {}
    if cfg.judge_metrics:
        runs = [
            await score_example(ex, cfg.judge_metrics, judge=judge, seed=cfg.seed + i, temperature=judge_temperature)
            for i in range(cfg.judge_repeats)
        ]
        for name in cfg.judge_metrics:
            values = [r[name].value for r in runs if name in r]
            if values:
                means[name] = statistics.fmean(values)
                stds[name] = statistics.pstdev(values) if len(values) > 1 else 0.0
                details[name] = runs[0][name].details
    return means, stds, details


async def run_eval(
    cfg: EvalConfig,
    run_dir: Path,
    data_dir: str | Path | None = None,
    index_cache: Path = Path(".marag/indexes"),
    progress: bool = True,
    dataset: Dataset | None = None,
    llm=None,
    judge=None,
) -> Path:
    """Answer and score every (strategy, question) not yet done in `run_dir`."""
    validate_names(cfg)
    ds = dataset or load_dataset(cfg.dataset, data_dir)
    questions = ds.questions[: cfg.limit] if cfg.limit else ds.questions
    if not questions:
        raise MaragError(f"dataset {ds.name!r} has no questions")
    # models are created lazily (no server starts until the first call): cheap to make
    # here, so config.json can record the resolved model ids before any work
    llm = llm or make_llm(cfg.llm)
    if cfg.judge_metrics and judge is None:
        judge = make_llm(cfg.judge) if cfg.judge else llm
    judge_temp = cfg.judge_temperature if cfg.judge_temperature is not None else (0.7 if cfg.judge_repeats > 1 else 0.0)
    models = {"llm": getattr(llm, "model", "")} | ({"judge": getattr(judge, "model", "")} if judge else {})
    _prepare_run_dir(cfg, run_dir, models)
    results_path, traces_path = run_dir / "results.jsonl", run_dir / "traces.jsonl"
    drop_torn_tail(results_path)
    drop_torn_tail(traces_path)
    done = {k for k, r in read_results(results_path).items() if not r.get("error")}
    todo = [(s, q) for s in cfg.strategies for q in questions if (s, q.id) not in done]

    retriever = None
    if todo and any(STRATEGIES.get(s).needs_retriever for s in cfg.strategies):
        from marag.eval.indexes import ensure_index

        retriever = ensure_index(ds, cfg.index, index_cache, progress=progress).retriever(cfg.retriever)
    strategies = {s: make_strategy(s, llm, retriever, cfg.strategy_configs.get(s)) for s in cfg.strategies} if todo else {}

    gate = asyncio.Semaphore(max(1, cfg.concurrency))
    write_lock = asyncio.Lock()
    bar = tqdm(total=len(todo), desc=f"eval {ds.name}", disable=not progress, unit="q")
    running: dict[str, list[float]] = {}

    async def one(sname: str, q: Question) -> None:
        async with gate:
            t0 = time.perf_counter()
            record: dict[str, Any] = {"strategy": sname, "qid": q.id, "question": q.question}
            trace = None
            try:
                answer = await strategies[sname].run(q.question)
                trace = answer.trace
                ex = _example(q, answer)
                means, stds, details = await _score(
                    cfg, ex, judge, judge_temp, retrieves=STRATEGIES.get(sname).needs_retriever
                )
                record |= {
                    "prediction": answer.answer,
                    "retrieved_doc_ids": ex.retrieved_doc_ids,
                    "metrics": means,
                    "metrics_std": stds,
                    "judge_details": details,
                    "cost": {**answer.usage, "seconds": answer.seconds},
                    "trace_id": trace.id,
                    "error": None,
                }
            except MaragError as exc:
                record |= {"error": f"{type(exc).__name__}: {exc.message}", "cost": {"seconds": time.perf_counter() - t0}}
            except Exception as exc:  # one bad question must not stop the run
                record |= {"error": f"{type(exc).__name__}: {exc}", "cost": {"seconds": time.perf_counter() - t0}}
            record |= {
                "answers": q.answers,
                "gold_doc_ids": q.gold_doc_ids,
                "metadata": _flat_metadata(q, ds.categories),
            }
            async with write_lock:
                with results_path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
                if trace is not None:
                    trace.config = {**trace.config, "qid": q.id}
                    write_jsonl([trace], traces_path)
                for m in ("f1", "accuracy", "rouge_l"):
                    if m in record.get("metrics", {}):
                        running.setdefault(f"{sname}:{m}", []).append(record["metrics"][m])
                bar.set_postfix({k: f"{statistics.fmean(v):.2f}" for k, v in running.items()}, refresh=False)
                bar.update(1)

    try:
        await asyncio.gather(*(one(s, q) for s, q in todo))
    finally:
        bar.close()
    return run_dir


def _flat_metadata(q: Question, categories: tuple[str, ...]) -> dict[str, Any]:
    """Only the scalar fields reports break down by (keeps results.jsonl small)."""
    return {k: q.metadata[k] for k in categories if k in q.metadata and isinstance(q.metadata[k], (str, int, float, bool))}
