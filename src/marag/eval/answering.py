"""Answering one (strategy, question) of an evaluation, shared by every executor (the
local one in `marag.eval.runner`, Ray's in `marag.eval.distributed`): the run's config,
each strategy's settings, the run's retrieval, and the answer scored into a record.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from marag.corpus.models import Question
from marag.errors import MaragError
from marag.eval.attribution import attribute, outcome_of
from marag.eval.datasets import Dataset
from marag.eval.metrics import METRICS, EvalExample, score_example
from marag.eval.rundir import ResultRecord
from marag.eval.versions import code_version
from marag.index.store import IndexConfig
from marag.index.uri import scheme_of
from marag.llm import LLMConfig
from marag.strategies import STRATEGIES, Answer
from marag.trace import Trace

DEFAULT_METRICS = [
    "em", "f1", "accuracy", "rouge_l", "overlong",
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


def strategy_settings(cfg: EvalConfig, ds: Dataset) -> dict[str, dict[str, Any]]:
    """Each strategy's config as it runs: the dataset's answer style unless the user
    set one, its deadline for the questions in flight, then the user's overrides."""
    out = {}
    for name in cfg.strategies:
        cls = STRATEGIES.get(name)
        given = cfg.strategy_configs.get(name, {})
        style = {"answer_style": ds.answer_style} if "answer_style" in cls.Config.model_fields else {}
        deadline = cls.defaults.get("deadline_s", cls.Config.model_fields["deadline_s"].default)  # a variant may set its own
        out[name] = {**style, **_clock(cfg, deadline), **given}
    return out


def _clock(cfg: EvalConfig, deadline_s: float | None) -> dict[str, float | None]:
    """A strategy's deadline is wall-clock time for one question on a machine of its
    own. With N questions in flight on one local model, each gets about 1/N of the
    machine, so it gets N times the wall clock: with the default 4 in flight and 900 s,
    KAIR and RopMura cut 8 and 7 of 30 held-out questions, each of which had had about
    225 s of the machine. Calls and tokens still bound a runaway.
    `--deterministic` has no deadline (a stop that depends on the machine's load)."""
    if cfg.deterministic:
        return {"deadline_s": None}
    return {"deadline_s": deadline_s * max(1, cfg.concurrency)} if deadline_s else {}


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
) -> tuple[ResultRecord, Trace | None]:
    """Answer and score one (strategy, question): the record for results.jsonl and the
    trace (None when the question failed). Shared by every executor."""
    t0 = time.perf_counter()
    trace = None
    try:
        answer = await strategy.run(q.question)
        trace = answer.trace
        trace.config = {**trace.config, "qid": q.id}
        ex = _example(q, answer, doc_collections)
        retrieves = STRATEGIES.get(sname).needs_retriever
        means, stds, details, judged = await _score(cfg, ex, judge, retrieves=retrieves)
        fields: dict[str, Any] = {
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
        fields = {"error": f"{type(exc).__name__}: {exc.message}", "cause": "error", "cost": {"seconds": time.perf_counter() - t0}}
    except Exception as exc:  # one bad question must not stop the run
        fields = {"error": f"{type(exc).__name__}: {exc}", "cause": "error", "cost": {"seconds": time.perf_counter() - t0}}
    record = ResultRecord(
        strategy=sname, qid=q.id, question=q.question, **fields,
        answers=q.answers, gold_doc_ids=q.gold_doc_ids, metadata=_flat_metadata(q, categories),
    )  # fmt: skip
    return record, trace


def _flat_metadata(q: Question, categories: tuple[str, ...]) -> dict[str, Any]:
    """Only the scalar fields reports break down by (keeps results.jsonl small)."""
    return {k: q.metadata[k] for k in categories if k in q.metadata and isinstance(q.metadata[k], (str, int, float, bool))}
