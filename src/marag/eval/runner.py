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
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from tqdm.auto import tqdm

from marag.collector import freeze_long_lived, thaw
from marag.corpus.models import Question
from marag.errors import MaragError, MaragWarning
from marag.eval.attribution import attribute, outcome_of
from marag.eval.datasets import Dataset, load_dataset
from marag.eval.metrics import METRICS, EvalExample, score_example
from marag.eval.versions import code_version, library_versions
from marag.index.store import IndexConfig
from marag.index.uri import close_index, scheme_of
from marag.llm import LLMConfig, make_llm
from marag.strategies import STRATEGIES, Answer, make_strategy
from marag.trace import Trace, write_jsonl

DEFAULT_METRICS = [
    "em", "f1", "accuracy", "rouge_l",
    "retrieval_precision", "retrieval_recall", "retrieval_f1", "recall@2", "recall@5", "mrr", "sources_recall",
    "agent_answerable", "agent_useful",  # apply only to routing strategies (RopMura)
]


# The mRAG paper's judge settings: each judged metric 5 times at temperature 0.5.
PAPER_JUDGE_REPEATS = 5
PAPER_JUDGE_TEMPERATURE = 0.5


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")  # run files name their keys exactly (marag.eval.runfile)

    dataset: str
    strategies: list[str]
    strategy_configs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    limit: int | None = None
    # leave out the first `skip` questions (e.g. tune on 51-100, report on 1-30): a run
    # of other questions is another run directory, though the same configuration
    skip: int = Field(default=0, ge=0)
    metrics: list[str] = Field(default_factory=lambda: list(DEFAULT_METRICS))
    judge_metrics: list[str] = Field(default_factory=list)
    # None: the paper's 5 repeats when a separate judge is given, else 1 (see `repeats`)
    judge_repeats: int | None = None
    # None: the paper's 0.5 when repeating (repeats at temperature 0 would repeat the
    # same verdict), else 0
    judge_temperature: float | None = None
    judge_batch: int | None = None  # aspects/nuggets per judge call (None: each metric's default)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    judge: LLMConfig | None = None  # defaults to the strategy LLM (which then grades itself)
    retriever: str | None = None
    index: IndexConfig = Field(default_factory=IndexConfig)
    # an index the user built of this dataset's corpus (its config is `index`): a directory
    # or an index URI (marag.index.uri); where it lives is not part of the run's identity,
    # the kind of store is (another engine scores the same terms and vectors)
    index_path: str | None = None
    concurrency: int = 4
    # where the questions are answered (how, not what: not part of the run's identity);
    # a run file can hold the whole cluster setup
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    seed: int = 0
    # the same answers in every run with the local model: one slot, no prompt cache, no
    # deadline (a load-dependent stop); see `marag.llm.llamacpp`
    deterministic: bool = False

    def model_post_init(self, _: Any) -> None:
        if self.deterministic:
            self.llm = self.llm.model_copy(update={"deterministic": True})
            if self.judge is not None:
                self.judge = self.judge.model_copy(update={"deterministic": True})

    @property
    def repeats(self) -> int:
        if self.judge_repeats is not None:
            return self.judge_repeats
        return PAPER_JUDGE_REPEATS if self.judge is not None and self.judge_metrics else 1

    @property
    def judge_temp(self) -> float:
        if self.judge_temperature is not None:
            return self.judge_temperature
        return PAPER_JUDGE_TEMPERATURE if self.repeats > 1 else 0.0

    def fingerprint(self) -> str:
        """What makes two runs the same run (for resuming): what decides the answers and
        their scores, and the code version. Not how fast it runs (concurrency, threads,
        slots, timeouts, cache, log level), and not `limit`: a larger limit extends the
        run, a smaller one reads part of it."""
        data = self.model_dump(mode="json", exclude={"concurrency", "limit", "skip", "llm", "judge", "index_path", "executor", "ray_address"})
        if self.index_path and scheme_of(self.index_path) != "dir":
            data["index_store"] = scheme_of(self.index_path)
        data["llm"] = self.llm.identity()
        data["judge"] = self.judge.identity() if self.judge else None
        data["code"] = code_version()
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]

    def default_run_id(self) -> str:
        """`<dataset>-<strategies>-<fingerprint>`. Many strategies' names would make a
        folder name past what the server accepts as a run id (200 characters): past
        `RUN_ID_NAMES_CHARS` the names part is the first two and a count. The fingerprint
        covers every strategy, so ids stay distinct; ids that fit are unchanged."""
        skipped = f"-from{self.skip + 1}" if self.skip else ""
        names = "+".join(self.strategies)
        if len(names) > RUN_ID_NAMES_CHARS:
            names = "+".join(s[:30] for s in self.strategies[:2]) + f"-{len(self.strategies)}-strategies"
        return f"{Path(self.dataset).stem[:60]}{skipped}-{names}-{self.fingerprint()}"


RUN_ID_NAMES_CHARS = 100  # the strategies part of a default run id, at most (see default_run_id)


def validate_names(cfg: EvalConfig) -> None:
    """Fail before any work on a misspelt strategy or metric."""
    for s in cfg.strategies:
        STRATEGIES.get(s)
    for m in cfg.metrics + cfg.judge_metrics:
        METRICS.get(m)().check()  # a missing optional package fails now, not per question
    if cfg.repeats < 1:
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


def strategy_settings(cfg: EvalConfig, ds: Dataset) -> dict[str, dict[str, Any]]:
    """Each strategy's config as it runs: the dataset's answer style unless the user
    set one, then the user's overrides."""
    out = {}
    for name in cfg.strategies:
        cls = STRATEGIES.get(name)
        given = cfg.strategy_configs.get(name, {})
        style = {"answer_style": ds.answer_style} if "answer_style" in cls.Config.model_fields else {}
        clock = {"deadline_s": None} if cfg.deterministic else {}  # a deadline depends on the machine's load
        out[name] = {**style, **clock, **given}
    return out


def _example(q: Question, answer: Answer, doc_collections: dict[str, str] | None = None) -> EvalExample:
    gold = [doc_collections[d] for d in q.gold_doc_ids if doc_collections and d in doc_collections]
    return EvalExample(
        question=q,
        prediction=answer.answer,
        retrieved_doc_ids=list(dict.fromkeys(r["doc_id"] for r in answer.read)),
        source_doc_ids=list(dict.fromkeys(s.doc_id for s in answer.sources)),
        retrieved_texts=[s.text for s in answer.sources],
        details=answer.details,
        gold_collections=list(dict.fromkeys(gold)),
    )


async def _score(
    cfg: EvalConfig, ex: EvalExample, judge, retrieves: bool
) -> tuple[dict[str, float], dict[str, float], dict, dict[str, dict[str, int]]]:
    """(means, stds across judge repeats, first repeat's details, per judged metric how
    many judgments were made and how many of them by a lexical stand-in)."""
    # a strategy that never retrieves has no retrieval quality (not a quality of 0)
    names = [m for m in cfg.metrics if retrieves or METRICS.get(m).kind != "retrieval"]
    means = {name: r.value for name, r in (await score_example(ex, names)).items()}
    stds: dict[str, float] = {}
    details: dict[str, Any] = {}
    judged: dict[str, dict[str, int]] = {}
    if cfg.judge_metrics:
        runs = [
            await score_example(
                ex, cfg.judge_metrics, judge=judge, seed=cfg.seed + i, temperature=cfg.judge_temp, batch=cfg.judge_batch
            )
            for i in range(cfg.repeats)
        ]
        for name in cfg.judge_metrics:
            results = [r[name] for r in runs if name in r]
            if results:
                values = [r.value for r in results]
                means[name] = statistics.fmean(values)
                stds[name] = statistics.pstdev(values) if len(values) > 1 else 0.0
                details[name] = results[0].details
                judged[name] = {
                    "decisions": sum(r.decisions for r in results),
                    "fallbacks": sum(r.fallbacks for r in results),
                }
    return means, stds, details, judged


async def run_eval(
    cfg: EvalConfig,
    run_dir: Path,
    data_dir: str | Path | None = None,
    index_cache: Path = Path(".marag/indexes"),
    progress: bool = True,
    dataset: Dataset | None = None,
    llm=None,
    judge=None,
    on_result: Callable[[dict[str, Any], int, int], None] | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
) -> Path:
    """Answer and score every (strategy, question) not yet done in `run_dir`.
    `on_result(record, done, total)` is called after each answer is written (the HTTP
    API streams it as progress). `executor` and `ray_address` default to the config's."""
    validate_names(cfg)
    executor, ray_address = executor or cfg.executor, ray_address or cfg.ray_address
    ds = dataset or load_dataset(cfg.dataset, data_dir)
    questions = ds.questions[cfg.skip :]
    questions = questions[: cfg.limit] if cfg.limit else questions
    if not questions:
        raise MaragError(
            f"dataset {ds.name!r} has no questions" + (f" after the first {cfg.skip}" if cfg.skip else ""),
            hint="lower --skip" if cfg.skip else "check the dataset's files",
        )
    # models are created lazily (no server starts until the first call): cheap to make
    # here, so config.json can record the resolved model ids before any work
    llm = llm or make_llm(cfg.llm)
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
            stacklevel=2,
        )
    settings = strategy_settings(cfg, ds)
    # validated now: a bad --set fails before any work
    strategy_cls = {s: STRATEGIES.get(s) for s in cfg.strategies}
    effective = {s: strategy_cls[s].validate_config(settings[s]).model_dump(mode="json") for s in cfg.strategies}
    facts = {
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
    _prepare_run_dir(cfg, run_dir, facts)
    results_path, traces_path = run_dir / "results.jsonl", run_dir / "traces.jsonl"
    drop_torn_tail(results_path)
    drop_torn_tail(traces_path)
    done = {k for k, r in read_results(results_path).items() if not r.get("error")}
    todo = [(s, q) for s in cfg.strategies for q in questions if (s, q.id) not in done]
    total = len(cfg.strategies) * len(questions)
    if progress and total > len(todo):
        print(f"resuming {run_dir}: {total - len(todo)} of {total} answers done, {len(todo)} to go", file=sys.stderr)
    if progress and todo:
        print(plan_line(cfg, questions, todo), file=sys.stderr)

    retriever, doc_collections = prepare_retrieval(cfg, ds, index_cache, progress) if todo else (None, None)
    strategies = {s: make_strategy(s, llm, retriever, settings[s]) for s in cfg.strategies} if todo and executor == "local" else {}
    if todo:
        # What is loaded now (dataset, index, models, libraries) lives for the whole run:
        # frozen, no collection walks it again (a full one took ~0.15 s per 600 answers).
        freeze_long_lived()

    write_lock = asyncio.Lock()
    bar = tqdm(total=len(todo), desc=f"eval {ds.name}", disable=not progress, unit="q")
    running: dict[str, list[float]] = {}
    finished = [0]  # answers written in this call (the bar may be disabled)

    async def write(record: dict[str, Any], trace: Trace | None) -> None:
        async with write_lock:
            with results_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
            if trace is not None:
                write_jsonl([trace], traces_path)
            for m in ("f1", "accuracy", "rouge_l"):
                if m in record.get("metrics", {}):
                    running.setdefault(f"{record['strategy']}:{m}", []).append(record["metrics"][m])
            bar.set_postfix({k: f"{statistics.fmean(v):.2f}" for k, v in running.items()}, refresh=False)
            bar.update(1)
            finished[0] += 1
            if on_result is not None:
                on_result(record, finished[0], len(todo))

    try:
        if executor == "ray":
            from marag.eval.distributed import ray_answers

            async for record, trace in ray_answers(cfg, todo, data_dir, index_cache, ray_address):
                await write(record, trace)
        else:
            gate = asyncio.Semaphore(max(1, cfg.concurrency))

            async def one(sname: str, q: Question) -> None:
                async with gate:
                    record, trace = await answer_one(cfg, strategies[sname], sname, q, judge, doc_collections, ds.categories)
                await write(record, trace)

            await asyncio.gather(*(one(s, q) for s, q in todo))
    finally:
        bar.close()
        # the run's index: its connection (a Lite file's lock) ends with the run
        close_index(getattr(retriever, "index", None))
        if todo:
            thaw()  # what the run loaded and dropped is freed by the next full collection
    return run_dir


def plan_line(cfg: EvalConfig, questions: list[Question], todo: list[tuple[str, Question]]) -> str:
    """What a run is about to do, said before it starts: answers to make and about how
    many LLM calls they take (each strategy's typical calls per question, measured)."""
    low = sum(STRATEGIES.get(s).calls[0] for s, _ in todo)
    high = sum(STRATEGIES.get(s).calls[1] for s, _ in todo)
    calls = f"{low:,}" if low == high else f"{low:,}-{high:,}"
    hint = "" if cfg.limit else " (all of them: --limit N answers only the first N)"
    return (f"answering {len(questions)} questions{hint} x {len(cfg.strategies)} strategies: {len(todo)} answers to make, "
            f"about {calls} LLM calls")  # fmt: skip


def prepare_retrieval(cfg: EvalConfig, ds: Dataset, index_cache: Path, progress: bool = False):
    """(retriever, doc id -> collection) for the run: the dataset's index (built and
    cached, or the user's `index_path`), or (None, None) when no strategy retrieves."""
    if not any(STRATEGIES.get(s).needs_retriever for s in cfg.strategies):
        return None, None
    from marag.eval.indexes import ensure_index

    idx = ensure_index(ds, cfg.index, index_cache, progress=progress, existing=cfg.index_path)
    collections = None
    if idx.collections():  # for the agent-level metrics: which collection holds each document
        collections = {c.doc_id: coll for c, coll in zip(idx.chunks, idx.chunk_collections) if coll}
    return idx.retriever(cfg.retriever), collections


async def answer_one(
    cfg: EvalConfig, strategy, sname: str, q: Question, judge, doc_collections: dict[str, str] | None, categories
) -> tuple[dict[str, Any], Trace | None]:
    """Answer and score one (strategy, question): the record for results.jsonl and the
    trace (None when the question failed). Shared by every executor."""
    t0 = time.perf_counter()
    record: dict[str, Any] = {"strategy": sname, "qid": q.id, "question": q.question}
    trace = None
    try:
        answer = await strategy.run(q.question)
        trace = answer.trace
        trace.config = {**trace.config, "qid": q.id}
        ex = _example(q, answer, doc_collections)
        retrieves = STRATEGIES.get(sname).needs_retriever
        means, stds, details, judged = await _score(cfg, ex, judge, retrieves=retrieves)
        record |= {
            "prediction": answer.answer,
            "cause": attribute(outcome_of(answer, q.answers, q.gold_doc_ids, retrieves)),
            "retrieved_doc_ids": ex.retrieved_doc_ids,
            "source_doc_ids": ex.source_doc_ids,
            "metrics": means,
            "metrics_std": stds,
            "judge_details": details,
            "judge_fallbacks": judged,
            "cost": {**answer.usage, "seconds": answer.seconds},
            "trace_id": trace.id,
            "error": None,
        }
    except MaragError as exc:
        record |= {"error": f"{type(exc).__name__}: {exc.message}", "cause": "error", "cost": {"seconds": time.perf_counter() - t0}}
    except Exception as exc:  # one bad question must not stop the run
        record |= {"error": f"{type(exc).__name__}: {exc}", "cause": "error", "cost": {"seconds": time.perf_counter() - t0}}
    record |= {"answers": q.answers, "gold_doc_ids": q.gold_doc_ids, "metadata": _flat_metadata(q, categories)}
    return record, trace


def _flat_metadata(q: Question, categories: tuple[str, ...]) -> dict[str, Any]:
    """Only the scalar fields reports break down by (keeps results.jsonl small)."""
    return {k: q.metadata[k] for k in categories if k in q.metadata and isinstance(q.metadata[k], (str, int, float, bool))}
