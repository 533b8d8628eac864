"""Self-training on a strategy's own best trajectories (as mRAG trains its agents, and
as Agent-UniRAG trains its planner and reflector):

1. `sample`: T trajectories per question (default 8), the trainable roles at a high
   temperature (0.7), the answer-writing role at a low one (0.1), each with its own
   seed; concurrent and resumable (`trajectories.jsonl`, one line per (question, t)).
   mRAG (`mrag*`: coordinator, planner, searcher's query writer, relevance judge and
   next move, summarizer, reasoner, validator) and UniRAG (`unirag*`: planner and
   evidence reflector) have trainable roles; the answer writers stay fixed (the papers
   keep the generator fixed). The questions are a dataset's, or a questions file (e.g.
   `marag synth --style synagent`) with the index they were drawn from (`index_path`).
2. `reward`: each trajectory's reward, one of
   - `judge` (the mRAG paper's): the final response's correctness against the reference
     aspects and its faithfulness to S (`mrag_correctness`, `mrag_faithfulness`), each
     averaged over R judge runs (default 5), weighted 4:1. The judge must not be the
     model that sampled (it grades itself, and a small model gives every answer the same
     labels): that is refused unless `allow_self_judge`; `train.json` names the judge;
   - `reference` (no judge): correctness from the gold answers (short answer style: the
     mean of token F1 and whether a gold answer is contained; long: token F1 against
     the reference answer) and the recall of the gold documents in S (the trajectory's
     sources), weighted `reference_weights` (2:1);
   - `both`: the mean of the two;
   each minus `cost_weight` (0.05) x the trajectory's cost (prompt tokens + 4x generated,
   whole at COST_SCALE = 10k): of trajectories that answer alike the cheapest wins, the
   one a student should imitate, while any real difference in the answer (>= 0.05)
   outweighs it. Without it most questions tie (8 HotpotQA questions x 4 UniRAG
   trajectories of the 1.5B: 1 unique best).
   Resumable (`rewards.jsonl`); `rewards.md` shows per question the spread of rewards
   across its trajectories and how many questions have a unique best (`reward_report`).
3. `select`: per question the highest-reward trajectory (up to 3 when they tie); the
   reward is normalized so the best is 1 and the others 0 (`selected.jsonl`).
4. `export`: every model call that trainable roles made in the selected trajectories
   becomes a chat example, one shared dataset for all roles (`sft.jsonl`):
   {"messages": [system, user, assistant], "role": ..., "qid": ...} (the qualified role,
   `mrag.planner`); each message has a `weight` (1 only on the agent's own reply), so
   the loss falls only on its turns
   (TRL reads `messages` with `assistant_only_loss`; axolotl reads the weights).

Files live in a training directory (`marag train ... --dir runs/train-X`), with the
settings in `train.json`; rerunning a stage continues it.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from marag.errors import MaragError
from marag.eval.datasets import load_dataset
from marag.eval.rundir import drop_torn_tail
from marag.llm import LLMConfig, make_llm
from marag.strategies import STRATEGIES, make_strategy
from marag.trace import Trace

# The roles trained by default, per strategy family (qualified: `mrag.planner`), as the
# strategies declare them (`Strategy.trains`): every agent that decides what is searched
# and read, never the one that writes the answer.
TRAINABLE_ROLES: dict[str, tuple[str, ...]] = {
    f: STRATEGIES.get(f).trainable_roles() for f in STRATEGIES.names() if STRATEGIES.get(f).variant_of is None and STRATEGIES.get(f).trainable_roles()
}  # fmt: skip
# Settings of the reward stage: `train reward` may set them after sampling.
REWARD_FIELDS = frozenset({"reward", "reference_weights", "judge_runs", "weights", "judge", "judged_by", "allow_self_judge", "max_ties",
                           "cost_weight"})  # fmt: skip
# A trajectory's cost in thousands of prompt-equivalent tokens (prompt tokens + 4x the
# generated ones, as `Trace.totals()` weighs them) at which the cost term is whole.
COST_SCALE = 10.0


def strategy_family(strategy: str) -> str | None:
    """`mrag` for mrag and its variants (mrag_paper), `unirag` for UniRAG's: a strategy
    with trainable roles; else None."""
    cls = STRATEGIES.get(strategy) if strategy in STRATEGIES else None
    return cls.family() if cls is not None and cls.trainable_roles() else None


def strategy_roles(strategy: str) -> tuple[str, ...]:
    """The roles the strategy calls itself, qualified (the keys of its per-role sampling
    temperatures), from the agents it declares; none without `role_temperatures`."""
    cls = STRATEGIES.get(strategy) if strategy in STRATEGIES else None
    return cls.roles(nested=False) if cls is not None and "role_temperatures" in cls.Config.model_fields else ()


def answer_roles(strategy: str) -> frozenset[str]:
    """The strategy's roles that write the answer (its `StyledAnswer` agents)."""
    from marag.agents.answerer import StyledAnswer

    cls = STRATEGIES.get(strategy) if strategy in STRATEGIES else None
    return frozenset(r for r, a in (cls.role_agents() if cls else {}).items() if issubclass(a, StyledAnswer))


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset: str
    strategy: str = "mrag"
    settings: dict[str, Any] = Field(default_factory=dict)
    index_path: str | None = None  # the index of a questions file's documents (marag synth --index)
    limit: int | None = None
    skip: int = 0  # leave the first N questions out (e.g. held apart for evaluation)
    trajectories: int = Field(default=8, ge=1)  # T
    temperature: float = 0.7  # trainable roles
    generator_temperature: float = 0.1  # roles that write the answer
    trainable_roles: list[str] = Field(default_factory=list)  # empty: the strategy's (TRAINABLE_ROLES)
    reward: Literal["judge", "reference", "both"] = "judge"
    judge_runs: int = Field(default=5, ge=1)  # R
    weights: tuple[float, float] = (4.0, 1.0)  # judged: correctness, faithfulness
    reference_weights: tuple[float, float] = (2.0, 1.0)  # reference: correctness, gold-document recall in S
    # subtracted from every reward in proportion to the trajectory's cost (whole at
    # COST_SCALE): of two trajectories that answer alike, the cheaper is the one to imitate
    cost_weight: float = Field(default=0.05, ge=0.0, le=0.5)
    allow_self_judge: bool = False  # let the sampling model judge its own trajectories
    max_ties: int = Field(default=3, ge=1)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    judge: LLMConfig | None = None
    judged_by: str | None = None  # the judge's model, as `train reward` ran it
    concurrency: int = 4
    seed: int = 0

    @model_validator(mode="after")
    def _roles(self) -> TrainConfig:
        cls = STRATEGIES.get(self.strategy) if self.strategy in STRATEGIES else None
        if not self.trainable_roles:
            if cls is None or not cls.trainable_roles():
                raise ValueError(f"no trainable roles known for strategy {self.strategy!r}: train mrag or unirag (or their variants), or set trainable_roles")  # fmt: skip
            self.trainable_roles = list(cls.trainable_roles())
        elif cls is not None:  # bare names (a train.json from before roles were qualified): qualified
            known, family = cls.roles(), cls.family()
            self.trainable_roles = [f"{family}.{r}" if r not in known and f"{family}.{r}" in known else r for r in self.trainable_roles]
        return self


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


def sampling_settings(cfg: TrainConfig) -> dict[str, Any]:
    """The settings that decide what was sampled (not how fast, not how it is rewarded)."""
    return cfg.model_dump(exclude={"concurrency", "limit", *REWARD_FIELDS})


def prepare(cfg: TrainConfig, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    saved = directory / "train.json"
    if saved.exists():
        old = TrainConfig.model_validate_json(saved.read_text())
        if sampling_settings(old) != sampling_settings(cfg):
            raise MaragError(f"{directory} holds training data made with other settings", hint="use another --dir")
        cfg = cfg.model_copy(update={k: getattr(old, k) for k in REWARD_FIELDS})  # the reward stage's own settings stay
    saved.write_text(cfg.model_dump_json(indent=2))


async def sample(cfg: TrainConfig, directory: Path, data_dir=None, retriever=None, llm=None, progress: bool = True) -> Path:
    from tqdm.auto import tqdm

    from marag.eval.answering import EvalConfig, prepare_retrieval

    ds = load_dataset(cfg.dataset, data_dir)
    cls = STRATEGIES.get(cfg.strategy)
    if retriever is None and cls.needs_retriever and not ds.documents and not cfg.index_path:
        # before prepare(): a dataset that cannot be sampled leaves no training directory behind
        raise MaragError(f"{cfg.dataset} has questions but no documents to search",
                         hint="give the index its questions were made from: --index IDX")  # fmt: skip
    prepare(cfg, directory)
    questions = ds.questions[cfg.skip :][: cfg.limit] if cfg.limit else ds.questions[cfg.skip :]
    path = directory / "trajectories.jsonl"
    drop_torn_tail(path)  # an interrupted write: cut it off, it is sampled again
    done = {(r["qid"], r["t"]) for r in _lines(path)}
    todo = [(q, t) for q in questions for t in range(cfg.trajectories) if (q.id, t) not in done]
    if retriever is None and cls.needs_retriever:
        ecfg = EvalConfig(dataset=cfg.dataset, strategies=[cfg.strategy], index_path=cfg.index_path)
        retriever, _ = prepare_retrieval(ecfg, ds, Path(".marag/indexes"), progress)
    llm = llm or make_llm(cfg.llm)
    writers = answer_roles(cfg.strategy)
    roles = {r: (cfg.generator_temperature if r in writers else cfg.temperature) for r in strategy_roles(cfg.strategy)}
    # the dataset's answer style unless the settings give one, as `marag eval` does
    style = cfg.settings.get("answer_style", ds.answer_style)
    fixed = {"answer_style": style} if "answer_style" in cls.Config.model_fields else {}
    gate, lock = asyncio.Semaphore(cfg.concurrency), asyncio.Lock()
    bar = tqdm(total=len(todo), desc="sample", unit="traj", disable=not progress)

    async def one(q, t: int) -> None:
        settings = {**fixed, **cfg.settings, "seed": cfg.seed * 1000 + t, "temperature": cfg.temperature}
        if "role_temperatures" in cls.Config.model_fields:
            settings["role_temperatures"] = roles
        strategy = make_strategy(cfg.strategy, llm, retriever, settings)
        async with gate:
            answer = await strategy.run(q.question)
        record = {"qid": q.id, "t": t, "question": q.question, "answer": answer.answer, "answers": q.answers,
                  "reference": q.metadata.get("reference_answer") or (q.answers[0] if q.answers else ""),
                  "answer_style": style, "gold_doc_ids": q.gold_doc_ids, "sources": [s.text for s in answer.sources],
                  "source_doc_ids": list(dict.fromkeys(s.doc_id for s in answer.sources)),
                  "trace": answer.trace.model_dump(mode="json")}  # fmt: skip
        async with lock:
            _append(path, record)
            bar.update(1)

    try:
        await asyncio.gather(*(one(q, t) for q, t in todo))
    finally:
        bar.close()
    return path


# -- rewards -----------------------------------------------------------------------------


def reference_reward(r: dict[str, Any], weights: tuple[float, float] = (2.0, 1.0)) -> dict[str, Any]:
    """The reference-anchored reward of one trajectory (no judge): correctness from the
    gold answers (short style: the mean of the best token F1 and whether a gold answer
    is contained (a yes/no gold: as the first word), so an exact answer scores 1, the answer inside a longer reply about
    0.5-0.9, a partial overlap less; long style: token F1 against the reference answer)
    and the recall of the gold documents among the trajectory's sources S, weighted
    `weights`. A question without gold documents is scored on correctness alone."""
    from marag.eval.metrics.lexical import gives_answer, max_token_f1

    golds = [a for a in r.get("answers") or [] if a.strip()]
    if r.get("answer_style", "short") == "long":
        refs = [x for x in [r.get("reference") or "", *golds] if x.strip()]
        correctness = max_token_f1(r["answer"], refs)
    else:
        correctness = (max_token_f1(r["answer"], golds) + gives_answer(r["answer"], golds)) / 2
    gold_docs = set(r.get("gold_doc_ids") or [])
    recall = len(gold_docs & set(r["source_doc_ids"])) / len(gold_docs) if gold_docs else None
    wc, wr = weights
    value = correctness if recall is None else (wc * correctness + wr * recall) / (wc + wr)
    return {"reference_correctness": correctness, "gold_recall": recall, "reference_reward": value}


def _base_name(model: str | None) -> str:
    return (model or "").split("+")[0]  # "base.gguf+adapter.gguf": the same base model


def same_model(a: LLMConfig, b: LLMConfig) -> bool:
    """Whether two LLM configs run the same model (whatever the runtime settings)."""
    def where(c: LLMConfig) -> str | None:
        if c.backend != "llamacpp":
            return None
        if c.model_path:
            return str(Path(c.model_path).expanduser().resolve())
        from marag.llm.models import ModelStore, llm_names

        return str(ModelStore().path(c.model).resolve()) if c.model in llm_names() else c.model

    if a.backend == b.backend == "llamacpp":  # a catalogue name and its file's path are one model
        return where(a) == where(b)
    return (a.backend, a.model, a.base_url, a.model_path) == (b.backend, b.model, b.base_url, b.model_path)


def _self_judging(cfg: TrainConfig, judge, trajectories: list[dict[str, Any]], configured: bool) -> str | None:
    """Why the judge is the model that sampled the trajectories (None when it is not):
    by configuration (`configured=False`: the judge would be made from cfg.judge, else
    cfg.llm), or by the judge's model name among the models the trajectories called."""
    if not configured:
        if cfg.judge is None:
            return "no judge was given, so the model that sampled the trajectories would judge them"
        if same_model(cfg.judge, cfg.llm):
            return f"the judge ({cfg.judge.backend}:{cfg.judge.model_path or cfg.judge.model or 'default'}) is the model that sampled the trajectories"
        return None
    sampled = {_base_name(c.get("model")) for r in trajectories for s in r["trace"]["steps"] for c in s.get("llm_calls", [])}
    if _base_name(getattr(judge, "model", None)) in sampled:
        return f"the judge {judge.model} is the model that sampled the trajectories"
    return None


def _signature(cfg: TrainConfig, judge_name: str | None) -> dict[str, Any]:
    """What makes two rewards comparable: selection compares them across a question's
    trajectories, so one file holds rewards of one kind and one setting only."""
    sig: dict[str, Any] = {"kind": cfg.reward}
    if cfg.reward in ("judge", "both"):
        sig |= {"judge": judge_name, "weights": list(cfg.weights)}
    if cfg.reward in ("reference", "both"):
        sig |= {"reference_weights": list(cfg.reference_weights)}
    if cfg.cost_weight:  # rewards written before the cost term had none, and compare as before
        sig |= {"cost_weight": cfg.cost_weight, "cost_scale": COST_SCALE}
    return sig


def _comparable(row: dict[str, Any], sig: dict[str, Any]) -> bool:
    stored = row.get("signature")
    if stored is None:  # written before rewards were signed: a judged reward (the only kind there was)
        return sig["kind"] == "judge"
    return stored == sig


async def reward(cfg: TrainConfig, directory: Path, judge=None, progress: bool = True) -> Path:
    """Every sampled trajectory's reward (`cfg.reward`: judge, reference or both), and
    the reward settings (with the judge's name) saved to train.json."""
    from tqdm.auto import tqdm

    path = directory / "rewards.jsonl"
    drop_torn_tail(path)
    rows = _lines(path)
    trajectories = _lines(directory / "trajectories.jsonl")
    if not trajectories:
        raise MaragError(f"no trajectories in {directory}", hint="sample first: `marag train sample DATASET --dir DIR`")
    judged, referenced = cfg.reward in ("judge", "both"), cfg.reward in ("reference", "both")
    if referenced:
        if missing := [r["qid"] for r in trajectories if not any(a.strip() for a in r.get("answers") or [])]:
            raise MaragError(f"question {missing[0]} has no gold answer: the reference reward needs one for every question",
                             hint="use --reward judge (with --judge SPEC) for questions without gold answers")  # fmt: skip
        if any("source_doc_ids" not in r for r in trajectories):
            raise MaragError("these trajectories were sampled before sources were recorded by document id",
                             hint="sample them again (a new --dir), or use --reward judge")  # fmt: skip
    judge_name = None
    if judged:
        configured = judge is not None
        # the configured judge is checked before it is made (making a local model loads nothing
        # yet, but a missing one would fail first), the judge itself after
        why = None if configured else _self_judging(cfg, None, [], configured=False)
        if why is None:
            judge = judge or make_llm(cfg.judge or cfg.llm)
            why = _self_judging(cfg, judge, trajectories, configured=True)
        if why and not cfg.allow_self_judge:
            raise MaragError(f"refusing to let a model judge its own trajectories: {why}",
                             hint="give another judge (--judge SPEC, e.g. a larger model), use --reward reference "
                                  "(gold answers and documents, no judge), or pass --allow-self-judge")  # fmt: skip
        judge = judge or make_llm(cfg.judge or cfg.llm)
        judge_name = getattr(judge, "model", None) or "judge"
        if other := sorted({r.get("judge_runs") for r in rows if "judge_runs" in r} - {cfg.judge_runs}, key=str):
            # Rewards averaged over different numbers of runs are not comparable, and
            # selection compares them across a question's trajectories.
            raise MaragError(f"{path} holds rewards averaged over {other} judge runs, not {cfg.judge_runs}",
                             hint=f"resume with --runs {other[0]}, or move {path.name} away to score everything again")  # fmt: skip
    sig = _signature(cfg, judge_name)
    if other_sigs := [r.get("signature", {"kind": "judge"}) for r in rows if not _comparable(r, sig)]:
        raise MaragError(f"{path} holds rewards of other settings ({json.dumps(other_sigs[0])}), not {json.dumps(sig)}",
                         hint=f"resume with those settings, or move {path.name} away to score everything again")  # fmt: skip
    cfg = cfg.model_copy(update={"judged_by": judge_name})
    (directory / "train.json").write_text(cfg.model_dump_json(indent=2))  # names the judge and the reward used
    done = {(r["qid"], r["t"]) for r in rows}
    todo = [r for r in trajectories if (r["qid"], r["t"]) not in done]
    gate, lock = asyncio.Semaphore(cfg.concurrency), asyncio.Lock()
    bar = tqdm(total=len(todo), desc="reward", unit="traj", disable=not progress)

    async def one(r: dict[str, Any]) -> None:
        row: dict[str, Any] = {"qid": r["qid"], "t": r["t"]}
        parts = []
        if referenced:
            row |= reference_reward(r, cfg.reference_weights)
            parts.append(row["reference_reward"])
        if judged:
            async with gate:
                row |= await _judged(cfg, r, judge)
            parts.append(row["judged_reward"])
        quality, cost = sum(parts) / len(parts), trajectory_cost(r)
        value = quality - cfg.cost_weight * min(1.0, cost / COST_SCALE)
        async with lock:
            _append(path, {**row, "quality": quality, "cost_units": cost, "reward": value, "signature": sig})
            bar.update(1)

    try:
        await asyncio.gather(*(one(r) for r in todo))
    finally:
        bar.close()
    order = {q: i for i, q in enumerate(dict.fromkeys(r["qid"] for r in trajectories))}  # the questions in the dataset's order
    ranked = sorted(_lines(path), key=lambda r: (order.get(r["qid"], len(order)), r["t"]))
    (directory / "rewards.md").write_text(reward_report(ranked, cfg), encoding="utf-8")
    return path


def trajectory_cost(r: dict[str, Any]) -> float:
    """Thousands of prompt-equivalent tokens the trajectory's model calls took: its prompt
    tokens (reused or not: reuse depends on what the server held, not on the trajectory)
    plus 4x its generated tokens."""
    totals = Trace.model_validate(r["trace"]).totals()
    return (totals["prompt_tokens"] + 4 * totals["completion_tokens"]) / 1000


async def _judged(cfg: TrainConfig, r: dict[str, Any], judge) -> dict[str, Any]:
    """The mRAG paper's reward: correctness and faithfulness averaged over R judge runs."""
    from marag.corpus.models import Question
    from marag.eval.metrics import EvalExample, score_example

    q = Question(id=r["qid"], question=r["question"], answers=r["answers"], gold_doc_ids=r["gold_doc_ids"],
                 metadata={"reference_answer": r["reference"]})  # fmt: skip
    ex = EvalExample(question=q, prediction=r["answer"], retrieved_texts=r["sources"])
    scores: dict[str, list[float]] = {"mrag_correctness": [], "mrag_faithfulness": []}
    for run in range(cfg.judge_runs):
        res = await score_example(ex, list(scores), judge=judge, seed=cfg.seed + run, temperature=0.5 if cfg.judge_runs > 1 else 0.0)
        for name in scores:
            scores[name].append(res[name].value if name in res else 0.0)
    c = sum(scores["mrag_correctness"]) / cfg.judge_runs
    f = sum(scores["mrag_faithfulness"]) / cfg.judge_runs
    return {"correctness": c, "faithfulness": f, "judged_reward": combine(c, f, *cfg.weights), "judge_runs": cfg.judge_runs}


def reward_spread(rows: list[dict[str, Any]], tol: float = 1e-9) -> list[dict[str, Any]]:
    """Per question: its trajectories' rewards (by t), their spread (max - min), the best
    trajectories and whether one alone is best (selection then has a real choice)."""
    by_q: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_q.setdefault(r["qid"], []).append(r)
    out = []
    for qid, rs in by_q.items():
        rs = sorted(rs, key=lambda r: r["t"])
        values = [r["reward"] for r in rs]
        best = max(values)
        top = [r["t"] for r in rs if r["reward"] >= best - tol]
        # the same without the cost term (rewards written before it: the reward itself)
        quality = [r.get("quality", r["reward"]) for r in rs]
        unique_by_quality = sum(q >= max(quality) - tol for q in quality) == 1
        out.append({"qid": qid, "rewards": values, "spread": best - min(values), "best": top, "unique_best": len(top) == 1,
                    "unique_by_quality": unique_by_quality, "alike": max(quality) - min(quality) <= tol})  # fmt: skip
    return out


def reward_report(rows: list[dict[str, Any]], cfg: TrainConfig | None = None) -> str:
    """Markdown: how well the rewards tell each question's trajectories apart."""
    spread = reward_spread(rows)
    unique = sum(q["unique_best"] for q in spread)
    by_quality = sum(q["unique_by_quality"] for q in spread)
    flat = sum(q["alike"] for q in spread)
    lines = ["# Rewards", ""]
    if cfg is not None:
        what = {"judge": f"judged (correctness {cfg.weights[0]:g} : faithfulness {cfg.weights[1]:g}, R={cfg.judge_runs}, judge {cfg.judged_by})",
                "reference": f"reference (gold-answer correctness {cfg.reference_weights[0]:g} : gold-document recall in S {cfg.reference_weights[1]:g})",
                "both": "the mean of the judged and the reference rewards"}[cfg.reward]  # fmt: skip
        cost = f", minus {cfg.cost_weight:g} x the trajectory's cost (whole at {COST_SCALE:g}k prompt-equivalent tokens)" if cfg.cost_weight else ""
        lines += [f"Reward: {what}{cost}.", ""]
    if spread:
        lines += [f"**{unique} of {len(spread)} questions have a unique best trajectory** ({by_quality} by the answer and "
                  f"its sources alone, the cost deciding the rest); {flat} have every answer rewarded alike (no signal but the cost); "
                  f"mean spread {statistics.fmean(q['spread'] for q in spread):.3f}.", ""]  # fmt: skip
    lines += ["| question | trajectories | rewards (t = 0, 1, ...) | spread | best t | unique |", "|---|---|---|---|---|---|"]
    for q in spread:
        rewards = " ".join(f"{v:.3f}" for v in q["rewards"])
        best = ",".join(str(t) for t in q["best"])
        lines.append(f"| {q['qid']} | {len(q['rewards'])} | {rewards} | {q['spread']:.3f} | {best} | {'yes' if q['unique_best'] else 'no'} |")
    return "\n".join(lines) + "\n"


def combine(correctness: float, faithfulness: float, wc: float = 4.0, wf: float = 1.0) -> float:
    """The weighted mean of the two rewards (4:1 by default)."""
    return (wc * correctness + wf * faithfulness) / (wc + wf)


def select(rewards: list[dict[str, Any]], max_ties: int = 3, tol: float = 1e-9, min_reward: float | None = None) -> list[dict[str, Any]]:
    """Per question the best trajectories (ties up to `max_ties`, lowest t first), each
    with `normalized` = 1; the others are not returned (their normalized reward is 0).
    With `min_reward`, a question whose best reward is below it gives none (its best
    trajectory is still a failure: nothing worth imitating)."""
    by_q: dict[str, list[dict[str, Any]]] = {}
    for r in rewards:
        by_q.setdefault(r["qid"], []).append(r)
    out = []
    for qid, rs in by_q.items():
        best = max(r["reward"] for r in rs)
        if min_reward is not None and best < min_reward - tol:
            continue
        top = sorted((r for r in rs if r["reward"] >= best - tol), key=lambda r: r["t"])[:max_ties]
        out += [{**r, "normalized": 1.0} for r in top]
    return out


def select_file(cfg: TrainConfig, directory: Path, min_reward: float | None = None) -> Path:
    path = directory / "selected.jsonl"
    rows = select(_lines(directory / "rewards.jsonl"), cfg.max_ties, min_reward=min_reward)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def examples(trace: Trace | dict[str, Any], trainable: list[str]) -> list[dict[str, Any]]:
    """Chat examples from one trajectory: every model call a trainable role made, the
    prompt turns weighted 0 and the agent's own reply 1."""
    t = trace if isinstance(trace, Trace) else Trace.model_validate(trace)
    family = STRATEGIES.get(t.strategy).family() if t.strategy in STRATEGIES else ""
    out = []
    for step in t.steps:
        role = f"{family}.{step.agent}" if family else step.agent  # qualified: mrag.planner
        if (role not in trainable and step.agent not in trainable) or step.status in ("fallback", "skipped"):
            continue  # a fallback's reply was unusable: not something to learn
        for call in step.llm_calls:
            if call.error or not call.response:
                continue
            messages = [{**m, "weight": 0} for m in call.messages] + [{"role": "assistant", "content": call.response, "weight": 1}]
            out.append({"messages": messages, "role": role})
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


def provenance(cfg: TrainConfig) -> dict[str, Any]:
    """What an adapter trained from this directory was taught with, for its adapter.json:
    the teacher (the sampling model), the strategy and roles, the questions and the reward."""
    teacher = cfg.llm.model_path or cfg.llm.model or cfg.llm.backend
    return {"teacher": str(teacher), "strategy": cfg.strategy,
            "data": {"dataset": cfg.dataset, "skip": cfg.skip, "limit": cfg.limit, "trajectories": cfg.trajectories,
                     "index": cfg.index_path},
            "reward": cfg.reward}  # fmt: skip
