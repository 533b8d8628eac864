"""Self-training on a strategy's own best trajectories (as mRAG trains its agents):

1. `sample`: T trajectories per question (default 8), the trainable roles at a high
   temperature (0.7), the answer-writing role at a low one (0.1), each with its own
   seed; concurrent and resumable (`trajectories.jsonl`, one line per (question, t)).
2. `reward`: each final response scored by correctness and faithfulness (the mRAG
   paper's rewards, `mrag_correctness` and `mrag_faithfulness`), each averaged over R
   judge runs (default 5), combined with weights 4:1; resumable (`rewards.jsonl`).
3. `select`: per question the highest-reward trajectory (up to 3 when they tie); the
   reward is normalized so the best is 1 and the others 0 (`selected.jsonl`).
4. `export`: every model call that trainable roles made in the selected trajectories
   becomes a chat example, one shared dataset for all roles (`sft.jsonl`):
   {"messages": [system, user, assistant], "role": ..., "qid": ...}; each message has a
   `weight` (1 only on the agent's own reply), so the loss falls only on its turns
   (TRL reads `messages` with `assistant_only_loss`; axolotl reads the weights).

Files live in a training directory (`marag train ... --dir runs/train-X`), with the
settings in `train.json`; rerunning a stage continues it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from marag.errors import MaragError
from marag.eval.datasets import load_dataset
from marag.eval.runner import drop_torn_tail
from marag.llm import LLMConfig, make_llm
from marag.strategies import STRATEGIES, make_strategy
from marag.trace import Trace

GENERATOR_ROLES = ("answerer", "reviser", "final_answer", "generator", "defender", "router.answer")


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset: str
    strategy: str = "mrag"
    settings: dict[str, Any] = Field(default_factory=dict)
    limit: int | None = None
    skip: int = 0  # leave the first N questions out (e.g. held apart for evaluation)
    trajectories: int = Field(default=8, ge=1)  # T
    temperature: float = 0.7  # trainable roles
    generator_temperature: float = 0.1  # roles that write the answer
    trainable_roles: list[str] = Field(default_factory=lambda: ["coordinator", "planner", "searcher", "searcher.query",
                                                                 "searcher.judge", "searcher.next", "summarizer", "reasoner", "validator"])  # fmt: skip
    judge_runs: int = Field(default=5, ge=1)  # R
    weights: tuple[float, float] = (4.0, 1.0)  # correctness, faithfulness
    max_ties: int = Field(default=3, ge=1)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    judge: LLMConfig | None = None
    concurrency: int = 4
    seed: int = 0


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a torn last line from an interrupted run
    return out


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")


def prepare(cfg: TrainConfig, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    saved = directory / "train.json"
    if saved.exists():
        old = TrainConfig.model_validate_json(saved.read_text())
        if old.model_dump(exclude={"concurrency", "limit"}) != cfg.model_dump(exclude={"concurrency", "limit"}):
            raise MaragError(f"{directory} holds training data made with other settings", hint="use another --dir")
    saved.write_text(cfg.model_dump_json(indent=2))


async def sample(cfg: TrainConfig, directory: Path, data_dir=None, retriever=None, llm=None, progress: bool = True) -> Path:
    from tqdm.auto import tqdm

    from marag.eval.runner import prepare_retrieval

    prepare(cfg, directory)
    ds = load_dataset(cfg.dataset, data_dir)
    questions = ds.questions[cfg.skip :][: cfg.limit] if cfg.limit else ds.questions[cfg.skip :]
    path = directory / "trajectories.jsonl"
    drop_torn_tail(path)  # an interrupted write: cut it off, it is sampled again
    done = {(r["qid"], r["t"]) for r in _lines(path)}
    todo = [(q, t) for q in questions for t in range(cfg.trajectories) if (q.id, t) not in done]
    if retriever is None and STRATEGIES.get(cfg.strategy).needs_retriever:
        from marag.eval.runner import EvalConfig

        retriever, _ = prepare_retrieval(EvalConfig(dataset=cfg.dataset, strategies=[cfg.strategy]), ds, Path(".marag/indexes"), progress)
    llm = llm or make_llm(cfg.llm)
    roles = {r: (cfg.generator_temperature if r in GENERATOR_ROLES else cfg.temperature) for r in _roles(cfg)}
    gate, lock = asyncio.Semaphore(cfg.concurrency), asyncio.Lock()
    bar = tqdm(total=len(todo), desc="sample", unit="traj", disable=not progress)

    async def one(q, t: int) -> None:
        settings = {**cfg.settings, "seed": cfg.seed * 1000 + t, "temperature": cfg.temperature}
        if "role_temperatures" in STRATEGIES.get(cfg.strategy).Config.model_fields:
            settings["role_temperatures"] = roles
        strategy = make_strategy(cfg.strategy, llm, retriever, settings)
        async with gate:
            answer = await strategy.run(q.question)
        record = {"qid": q.id, "t": t, "question": q.question, "answer": answer.answer, "answers": q.answers,
                  "reference": q.metadata.get("reference_answer") or (q.answers[0] if q.answers else ""),
                  "gold_doc_ids": q.gold_doc_ids, "sources": [s.text for s in answer.sources],
                  "trace": answer.trace.model_dump(mode="json")}  # fmt: skip
        async with lock:
            _append(path, record)
            bar.update(1)

    try:
        await asyncio.gather(*(one(q, t) for q, t in todo))
    finally:
        bar.close()
    return path


def _roles(cfg: TrainConfig) -> list[str]:
    from marag.strategies.mrag import ROLES

    return list(ROLES) if cfg.strategy.startswith("mrag") else []


async def reward(cfg: TrainConfig, directory: Path, judge=None, progress: bool = True) -> Path:
    """Correctness and faithfulness of every sampled response, averaged over R runs."""
    from tqdm.auto import tqdm

    from marag.corpus.models import Question
    from marag.eval.metrics import EvalExample, score_example

    path = directory / "rewards.jsonl"
    drop_torn_tail(path)
    rows = _lines(path)
    if other := sorted({r.get("judge_runs") for r in rows} - {cfg.judge_runs}, key=str):
        # Rewards averaged over different numbers of runs are not comparable, and
        # selection compares them across a question's trajectories.
        raise MaragError(f"{path} holds rewards averaged over {other} judge runs, not {cfg.judge_runs}",
                         hint=f"resume with --runs {other[0]}, or move {path.name} away to score everything again")  # fmt: skip
    done = {(r["qid"], r["t"]) for r in rows}
    todo = [r for r in _lines(directory / "trajectories.jsonl") if (r["qid"], r["t"]) not in done]
    judge = judge or make_llm(cfg.judge or cfg.llm)
    gate, lock = asyncio.Semaphore(cfg.concurrency), asyncio.Lock()
    bar = tqdm(total=len(todo), desc="reward", unit="traj", disable=not progress)
    wc, wf = cfg.weights

    async def one(r: dict[str, Any]) -> None:
        q = Question(id=r["qid"], question=r["question"], answers=r["answers"], gold_doc_ids=r["gold_doc_ids"],
                     metadata={"reference_answer": r["reference"]})  # fmt: skip
        ex = EvalExample(question=q, prediction=r["answer"], retrieved_texts=r["sources"])
        scores: dict[str, list[float]] = {"mrag_correctness": [], "mrag_faithfulness": []}
        async with gate:
            for run in range(cfg.judge_runs):
                res = await score_example(ex, list(scores), judge=judge, seed=cfg.seed + run, temperature=0.5 if cfg.judge_runs > 1 else 0.0)
                for name in scores:
                    scores[name].append(res[name].value if name in res else 0.0)
        c = sum(scores["mrag_correctness"]) / cfg.judge_runs
        f = sum(scores["mrag_faithfulness"]) / cfg.judge_runs
        async with lock:
            _append(path, {"qid": r["qid"], "t": r["t"], "correctness": c, "faithfulness": f, "reward": combine(c, f, wc, wf),
                          "judge_runs": cfg.judge_runs})  # fmt: skip
            bar.update(1)

    try:
        await asyncio.gather(*(one(r) for r in todo))
    finally:
        bar.close()
    return path


def combine(correctness: float, faithfulness: float, wc: float = 4.0, wf: float = 1.0) -> float:
    """The weighted mean of the two rewards (4:1 by default)."""
    return (wc * correctness + wf * faithfulness) / (wc + wf)


def select(rewards: list[dict[str, Any]], max_ties: int = 3, tol: float = 1e-9) -> list[dict[str, Any]]:
    """Per question the best trajectories (ties up to `max_ties`, lowest t first), each
    with `normalized` = 1; the others are not returned (their normalized reward is 0)."""
    by_q: dict[str, list[dict[str, Any]]] = {}
    for r in rewards:
        by_q.setdefault(r["qid"], []).append(r)
    out = []
    for qid, rs in by_q.items():
        best = max(r["reward"] for r in rs)
        top = sorted((r for r in rs if r["reward"] >= best - tol), key=lambda r: r["t"])[:max_ties]
        out += [{**r, "normalized": 1.0} for r in top]
    return out


def select_file(cfg: TrainConfig, directory: Path) -> Path:
    path = directory / "selected.jsonl"
    rows = select(_lines(directory / "rewards.jsonl"), cfg.max_ties)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def examples(trace: Trace | dict[str, Any], trainable: list[str]) -> list[dict[str, Any]]:
    """Chat examples from one trajectory: every model call a trainable role made, the
    prompt turns weighted 0 and the agent's own reply 1."""
    t = trace if isinstance(trace, Trace) else Trace.model_validate(trace)
    out = []
    for step in t.steps:
        if step.agent not in trainable or step.status in ("fallback", "skipped"):
            continue  # a fallback's reply was unusable: not something to learn
        for call in step.llm_calls:
            if call.error or not call.response:
                continue
            messages = [{**m, "weight": 0} for m in call.messages] + [{"role": "assistant", "content": call.response, "weight": 1}]
            out.append({"messages": messages, "role": step.agent})
    return out


def export(cfg: TrainConfig, directory: Path) -> Path:
    chosen = {(r["qid"], r["t"]) for r in _lines(directory / "selected.jsonl")}
    path = directory / "sft.jsonl"
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for r in _lines(directory / "trajectories.jsonl"):
            if (r["qid"], r["t"]) in chosen:
                for ex in examples(r["trace"], cfg.trainable_roles):
                    f.write(json.dumps({**ex, "qid": r["qid"], "t": r["t"]}, ensure_ascii=False) + "\n")
                    n += 1
    if n == 0:
        raise MaragError("no training examples: no selected trajectory has a usable call by a trainable role",
                         hint="sample more trajectories (--trajectories) or check the trainable roles")  # fmt: skip
    return path
