"""`marag train run PLAN.toml`: the whole self-training loop as one resumable command.

A teacher model samples a strategy's trajectories on training questions (one or more
sources: benchmark slices, or a questions file with the index it was written from), each
rewarded, the best kept and exported per source (`marag.train.loop`, one directory per
source); the examples of every source together train one LoRA adapter of the student
model (`marag.train.finetune`); then the teacher, the base student and the tuned student
answer the same held-back questions and a paired report compares them.

Each stage is recorded in `plan.json` beside its outputs with the settings it ran with
and its seconds. A killed run started again skips the stages that finished with the same
settings and resumes the one it was in (sampling, rewarding, fine-tuning and evaluation
each resume by themselves); a stage that finished with other settings is refused rather
than mixed, since its outputs feed every later stage.

    strategy = "unirag"
    teacher = "qwen2.5-1.5b"
    student = "qwen2.5-0.5b"
    trajectories = 4

    [[questions]]
    dataset = "hotpotqa_train100"
    limit = 40

    [finetune]
    steps = 60

    [evaluate]
    dataset = "hotpotqa_train100"
    skip = 80
    limit = 20
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from marag.errors import MaragError
from marag.llm import LLMConfig
from marag.train.loop import _lines  # a JSONL file's records (a torn last line skipped)


class Source(BaseModel):
    """Training questions: a benchmark's slice, or a questions file and its index."""

    model_config = ConfigDict(extra="forbid")
    dataset: str
    index: str | None = None
    skip: int = Field(default=0, ge=0)
    limit: int | None = Field(default=None, ge=1)

    @property
    def name(self) -> str:
        stem = Path(self.dataset).stem if self.dataset.endswith(".jsonl") else self.dataset
        return f"{stem}-{self.skip + 1}-{self.skip + self.limit if self.limit else 'end'}"

    def overlaps(self, other: Source) -> bool:
        """Whether the two take a question in common (same questions, intersecting slices)."""
        end = self.skip + self.limit if self.limit else math.inf
        other_end = other.skip + other.limit if other.limit else math.inf
        return self.dataset == other.dataset and max(self.skip, other.skip) < min(end, other_end)


class Finetune(BaseModel):
    model_config = ConfigDict(extra="forbid")
    steps: int = Field(default=60, ge=1)
    rank: int = Field(default=16, ge=1)
    lr: float = Field(default=2e-4, gt=0)
    batch: int = Field(default=4, ge=1)
    max_len: int = Field(default=1024, ge=64)
    save_every: int = Field(default=20, ge=1)


class Evaluate(Source):
    """Held-back questions the three models answer (the teacher, the student as it came,
    the student with the adapter)."""

    retriever: str | None = "hybrid"
    concurrency: int = Field(default=4, ge=1)


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    strategy: str = "unirag"
    teacher: str = "qwen2.5-1.5b"  # an --llm spec: a catalogue name, llamacpp:PATH, ...
    student: str = "qwen2.5-0.5b"
    trajectories: int = Field(default=4, ge=1)
    reward: Literal["reference", "judge", "both"] = "reference"
    # a question whose best trajectory rewards less gives no examples: its best is still a
    # failure, nothing to imitate (the reference reward's 2:1 weights give a wrong answer
    # with every gold page found 1/3, a right answer with none 2/3). None: every question's best
    min_reward: float | None = 0.5
    judge: str | None = None  # the judge's --llm spec (judged rewards; never the teacher unless allowed)
    allow_self_judge: bool = False
    settings: dict[str, Any] = Field(default_factory=dict)  # the strategy's, while sampling and evaluating
    concurrency: int = Field(default=4, ge=1)
    questions: list[Source] = Field(min_length=1)
    finetune: Finetune = Field(default_factory=Finetune)
    evaluate: Evaluate | None = None

    @model_validator(mode="after")
    def _held_back(self) -> Plan:
        # a question trained on and then evaluated on measures memory, not the student
        if self.evaluate is not None:
            for s in self.questions:
                if s.overlaps(self.evaluate):
                    raise ValueError(f"the evaluation questions of {s.dataset} overlap the training ones "
                                     f"({s.skip + 1}..{s.skip + s.limit if s.limit else 'end'}): give [evaluate] skip/limit outside them")  # fmt: skip
        return self


def load_plan(path: Path) -> Plan:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MaragError(f"no plan at {path}", hint="write one (see `marag train run --help` or docs/self-training.md)") from None
    except tomllib.TOMLDecodeError as exc:
        raise MaragError(f"{path} is not valid TOML: {exc}", hint="fix the line it names") from None
    try:
        return Plan.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "plan"
        raise MaragError(f"{path}: {where}: {first['msg']}", hint="see docs/self-training.md for a plan's keys") from None


def _fingerprint(settings: Any) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Ledger:
    """`plan.json`: each stage's settings, state and seconds, rewritten whole after every change."""

    def __init__(self, directory: Path):
        self.path = directory / "plan.json"
        self.stages: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            self.stages = json.loads(self.path.read_text(encoding="utf-8")).get("stages", {})

    def done(self, name: str, settings: Any, redo: bool = False) -> bool:
        """Whether the stage finished with these settings; one that finished with others
        is refused, or (`redo`: a stage that rewrites its outputs whole) run again."""
        rec = self.stages.get(name)
        if rec is None or rec.get("state") != "done":
            return False
        if rec.get("settings") != _fingerprint(settings):
            if redo:
                return False
            raise MaragError(f"stage {name} finished earlier with other settings",
                             hint=f"use another directory, or delete {self.path.parent} to start over")  # fmt: skip
        return True

    def record(self, name: str, settings: Any, state: str, seconds: float, **facts: Any) -> None:
        before = self.stages.get(name, {})
        spent = before.get("seconds", 0.0) if before.get("settings") == _fingerprint(settings) else 0.0
        self.stages[name] = {"state": state, "settings": _fingerprint(settings), "seconds": round(spent + seconds, 1), **facts}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"stages": self.stages}, indent=1), encoding="utf-8")
        tmp.replace(self.path)


class PlanRun:
    """The plan's stages over `directory`, in order; `make_llm` and `finetune` are the
    parts a test (or a user with another trainer) swaps."""

    def __init__(self, plan: Plan, directory: Path, data_dir: str | Path | None = None,
                 make_llm: Callable[[LLMConfig], Any] | None = None, finetune: Callable[..., dict] | None = None,
                 echo: Callable[[str], None] = print, progress: bool = True):  # fmt: skip
        from marag.llm import make_llm as real_make_llm
        from marag.train.finetune import finetune as real_finetune

        self.plan, self.dir, self.data_dir = plan, directory, data_dir
        self.make_llm, self.finetune_fn = make_llm or real_make_llm, finetune or real_finetune
        self.echo, self.progress = echo, progress
        directory.mkdir(parents=True, exist_ok=True)
        self.ledger = Ledger(directory)
        self._llms: dict[str, Any] = {}

    def llm(self, cfg: LLMConfig):
        """One model per configuration for the whole run (a local model loads once)."""
        key = cfg.model_dump_json()
        if key not in self._llms:
            self._llms[key] = self.make_llm(cfg)
        return self._llms[key]

    def close(self) -> None:
        for llm in self._llms.values():
            if hasattr(llm, "close"):
                llm.close()
        self._llms.clear()

    def stage(self, name: str, settings: Any, work: Callable[[], dict[str, Any] | None], redo: bool = False) -> None:
        if self.ledger.done(name, settings, redo):
            self.echo(f"[{name}] done earlier ({self.ledger.stages[name]['seconds']:.0f} s)")
            return
        self.echo(f"[{name}] ...")
        t0 = time.perf_counter()
        self.ledger.record(name, settings, "running", 0.0)
        try:
            facts = work() or {}
        except BaseException:
            self.ledger.record(name, settings, "interrupted", time.perf_counter() - t0)
            raise
        self.ledger.record(name, settings, "done", time.perf_counter() - t0, **facts)
        self.echo(f"[{name}] done in {self.ledger.stages[name]['seconds']:.0f} s")

    # -- the stages ------------------------------------------------------------------

    def train_config(self, source: Source):
        from marag.train import TrainConfig

        p = self.plan
        return TrainConfig(dataset=source.dataset, strategy=p.strategy, settings=p.settings, index_path=source.index,
                           limit=source.limit, skip=source.skip, trajectories=p.trajectories, reward=p.reward,
                           llm=LLMConfig.from_spec(p.teacher), judge=LLMConfig.from_spec(p.judge) if p.judge else None,
                           allow_self_judge=p.allow_self_judge, concurrency=p.concurrency)  # fmt: skip

    def examples_of(self, source: Source) -> Path:
        from marag.train import export
        from marag.train.loop import sample, sampling_settings

        cfg, where = self.train_config(source), self.dir / "sources" / source.name
        teacher = self.llm(cfg.llm)
        judge = self.llm(cfg.judge) if cfg.judge else None
        # sampling is the hours of the loop: another reward or selection must not redo it
        sampled = {**sampling_settings(cfg), "limit": cfg.limit}
        settings = cfg.model_dump(mode="json")
        chosen = {**settings, "min_reward": self.plan.min_reward}
        self.stage(f"sample {source.name}", sampled, lambda: {"trajectories": _count(
            asyncio.run(sample(cfg, where, self.data_dir, llm=teacher, progress=self.progress)))})  # fmt: skip
        self.stage(f"reward {source.name}", settings, lambda: self.reward(cfg, where, judge))
        # selection and export rewrite their files whole in seconds: another min_reward redoes them
        self.stage(f"select {source.name}", chosen, lambda: self.select(cfg, where, source), redo=True)
        self.stage(f"export {source.name}", chosen, lambda: {"examples": _count(export(cfg, where))}, redo=True)
        return where / "sft.jsonl"

    def reward(self, cfg, where: Path, judge) -> dict[str, Any]:
        """The rewards, and how well they tell a question's trajectories apart (the
        questions with a unique best, with and without the cost deciding)."""
        from marag.train.loop import reward, reward_spread

        rows = _lines(asyncio.run(reward(cfg, where, judge=judge, progress=self.progress)))
        spread = reward_spread(rows)
        return {"rewards": len(rows), "questions": len(spread), "unique_best": sum(q["unique_best"] for q in spread),
                "unique_by_quality": sum(q["unique_by_quality"] for q in spread)}  # fmt: skip

    def select(self, cfg, where: Path, source: Source) -> dict[str, Any]:
        from marag.train import select_file

        selected = _lines(select_file(cfg, where, self.plan.min_reward))
        if not selected:
            raise MaragError(f"no question of {source.name} has a trajectory rewarded {self.plan.min_reward} or more: "
                             "nothing the teacher did is worth imitating",
                             hint=f"see {where / 'rewards.md'}; give easier or more questions, more trajectories, "
                                  "or a lower min_reward in the plan")  # fmt: skip
        return {"selected": len(selected), "questions": len({r["qid"] for r in selected})}

    def merge(self, parts: list[Path]) -> Path:
        out = self.dir / "sft.jsonl"
        tmp = out.with_suffix(".tmp")
        tmp.write_text("".join(p.read_text(encoding="utf-8") for p in parts), encoding="utf-8")
        tmp.replace(out)
        return out

    def student_model(self) -> str:
        """The student as `finetune` takes it: a catalogue name or a GGUF path."""
        cfg = LLMConfig.from_spec(self.plan.student)
        if cfg.backend != "llamacpp":
            raise MaragError(f"the student must be a local model, not {self.plan.student!r}",
                             hint="a catalogue name (qwen2.5-0.5b) or llamacpp:PATH.gguf: LoRA trains local weights")  # fmt: skip
        return cfg.model_path or cfg.model or ""

    def adapter_dir(self) -> Path:
        # named by the model it applies to: an adapter is a delta of that model's weights
        return self.dir / "adapters" / Path(self.student_model()).name.removesuffix(".gguf")

    def train_student(self, sft: Path) -> None:
        from marag.train.loop import provenance

        ft, first = self.plan.finetune, self.train_config(self.plan.questions[0])
        record = {**provenance(first), "data": [s.model_dump() for s in self.plan.questions]}
        settings = {"finetune": ft.model_dump(), "student": self.plan.student,
                    "examples": hashlib.sha256(sft.read_bytes()).hexdigest()}  # fmt: skip

        def work() -> dict[str, Any]:
            out = self.finetune_fn(sft, self.adapter_dir(), self.student_model(), steps=ft.steps, rank=ft.rank, lr=ft.lr,
                                   batch=ft.batch, max_len=ft.max_len, save_every=ft.save_every, progress=self.progress,
                                   roles=first.trainable_roles, provenance=record)  # fmt: skip
            return {k: out.get(k) for k in ("examples", "first_loss", "last_loss", "adapter")}

        self.stage("finetune", settings, work)

    def contenders(self) -> dict[str, LLMConfig]:
        adapter = self.adapter_dir() / "adapter.gguf"
        student = LLMConfig.from_spec(self.plan.student)
        return {"teacher": LLMConfig.from_spec(self.plan.teacher), "student-base": student,
                "student-tuned": student.model_copy(update={"lora": str(adapter.resolve())})}  # fmt: skip

    def evaluate(self) -> Path | None:
        from marag.eval.answering import EvalConfig
        from marag.eval.report import build_report
        from marag.eval.runner import run_eval

        ev = self.plan.evaluate
        if ev is None:
            return None
        runs = []
        for label, llm_cfg in self.contenders().items():
            cfg = EvalConfig(dataset=ev.dataset, strategies=[self.plan.strategy], skip=ev.skip, limit=ev.limit,
                             index_path=ev.index, retriever=ev.retriever, concurrency=ev.concurrency, llm=llm_cfg,
                             strategy_configs={self.plan.strategy: self.plan.settings} if self.plan.settings else {})  # fmt: skip
            run_dir = self.dir / "eval" / label
            runs.append(run_dir)
            self.stage(f"evaluate {label}", cfg.model_dump(mode="json"), lambda cfg=cfg, run_dir=run_dir: {
                "run": str(asyncio.run(run_eval(cfg, run_dir, self.data_dir, progress=self.progress,
                                                 llm=self.llm(cfg.llm))))})  # fmt: skip
        out = self.dir / "report"
        out.mkdir(exist_ok=True)
        path = build_report(runs, out, plots=False, baseline=f"student-base:{self.plan.strategy}")
        return path

    def run(self) -> Path | None:
        try:
            parts = [self.examples_of(s) for s in self.plan.questions]
            sft = self.merge(parts)
            self.train_student(sft)
            report = self.evaluate()
        finally:
            self.close()
        self.echo(self.times())
        return report

    def times(self) -> str:
        rows = ["| stage | state | seconds |", "|---|---|---|"]
        rows += [f"| {name} | {rec['state']} | {rec['seconds']:,.0f} |" for name, rec in self.ledger.stages.items()]
        return "\n".join(rows)


def _count(path: Path) -> int:
    with path.open(encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())
