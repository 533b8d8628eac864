"""`marag train sample|reward|select|export|finetune`: the self-training loop's stages
as commands over one training directory (see `marag.train.loop`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from marag.cli_options import HELP_NAMES, DataDirOpt, LlmOpt, SetOpt, parse_set

train_app = typer.Typer(no_args_is_help=True, context_settings=HELP_NAMES, help="Self-training (sample, reward, select, export, fine-tune) and auto's router.")

DirOpt = Annotated[Path, typer.Option("--dir", help="The training directory (settings in train.json).")]


READER_RECORD = "reader.json"  # `train reader`'s runs and counts, the adapter's provenance


def _config(directory: Path):
    from marag.errors import MaragError
    from marag.train import TrainConfig

    path = directory / "train.json"
    if not path.exists():
        raise MaragError(f"no training settings in {directory}", hint="start with `marag train sample DATASET --dir DIR`")
    return TrainConfig.model_validate_json(path.read_text())


@train_app.command()
def sample(
    dataset: Annotated[str, typer.Argument(help="Dataset whose questions are sampled.")],
    directory: DirOpt,
    strategy: Annotated[str, typer.Option(help="Strategy whose agents are trained.")] = "mrag",
    limit: Annotated[int, typer.Option(help="Questions to sample (0 = all after --skip).")] = 20,
    skip: Annotated[int, typer.Option(help="Leave out the first N questions (held apart for evaluation).")] = 0,
    trajectories: Annotated[int, typer.Option(help="Trajectories per question (T).")] = 8,
    set_: SetOpt = None,
    llm: LlmOpt = "llamacpp",
    concurrency: Annotated[int, typer.Option(help="Trajectories sampled at once.")] = 4,
    index: Annotated[Optional[Path], typer.Option("--index", "-i", help="Index of a questions file's documents (e.g. the one `marag synth` drew from).")] = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Sample T trajectories per question (trainable roles at 0.7, the answer at 0.1).
    mrag trains its coordinator, planner, searcher, summarizer, reasoner and validator;
    unirag its planner and evidence reflector."""
    from marag.llm import LLMConfig
    from marag.train import TrainConfig
    from marag.train.loop import sample as run

    cfg = TrainConfig(dataset=dataset, strategy=strategy, limit=limit or None, skip=skip, trajectories=trajectories,
                      settings=dict(parse_set(s) for s in set_ or []), llm=LLMConfig.from_spec(llm), concurrency=concurrency,
                      index_path=str(index.resolve()) if index else None)  # fmt: skip
    typer.echo(f"trajectories: {asyncio.run(run(cfg, directory, data_dir))}")


def _pair(text: str | None, name: str) -> tuple[float, float] | None:
    from marag.errors import MaragError

    if text is None:
        return None
    try:
        a, b = (float(x) for x in text.split(","))
    except ValueError:
        raise MaragError(f"bad {name} {text!r}", hint=f"two numbers, e.g. {name} 2,1") from None
    if a < 0 or b < 0 or a + b <= 0:
        raise MaragError(f"bad {name} {text!r}", hint="weights are non-negative and not both 0")
    return a, b


@train_app.command()
def reward(
    directory: DirOpt,
    reward: Annotated[Optional[str], typer.Option("--reward", help="judge (the mRAG paper's: correctness 4 : faithfulness 1, judged), reference (gold answers and documents, no judge) or both (their mean). Default: as before in this directory, else judge.")] = None,
    judge: Annotated[Optional[str], typer.Option(help="Judge LLM spec, e.g. llamacpp:/path/larger.gguf (never the sampling model unless --allow-self-judge).")] = None,
    runs: Annotated[Optional[int], typer.Option(help="Judge runs averaged per reward (R; default 5).")] = None,
    allow_self_judge: Annotated[bool, typer.Option("--allow-self-judge", help="Let the sampling model judge its own trajectories.")] = False,
    weights: Annotated[Optional[str], typer.Option(help="Judged reward: correctness,faithfulness weights (default 4,1).")] = None,
    reference_weights: Annotated[Optional[str], typer.Option(help="Reference reward: correctness,gold-document-recall weights (default 2,1).")] = None,
    cost_weight: Annotated[Optional[float], typer.Option(help="Subtracted x the trajectory's cost, whole at 10k prompt-equivalent tokens (default 0.05: breaks ties toward the cheaper trajectory; 0: none).")] = None,
) -> None:
    """Reward each sampled trajectory; prints (and writes rewards.md) the spread of rewards
    per question and how many questions have a unique best."""
    from marag.errors import MaragError
    from marag.llm import LLMConfig
    from marag.train.loop import reward as run

    if reward is not None and reward not in ("judge", "reference", "both"):
        raise MaragError(f"unknown reward {reward!r}", hint="choose judge, reference or both")
    if cost_weight is not None and not 0 <= cost_weight <= 0.5:
        raise MaragError(f"bad --cost-weight {cost_weight:g}", hint="between 0 (no cost term) and 0.5; the default 0.05 only breaks ties")
    saved = _config(directory)
    update = {"reward": reward, "judge_runs": runs, "weights": _pair(weights, "--weights"), "cost_weight": cost_weight,
              "reference_weights": _pair(reference_weights, "--reference-weights"),
              "judge": LLMConfig.from_spec(judge) if judge else None}  # fmt: skip
    cfg = saved.model_copy(update={**{k: v for k, v in update.items() if v is not None}, "allow_self_judge": allow_self_judge})
    path = asyncio.run(run(cfg, directory))  # the judge: cfg.judge (else the sampling model, refused by default)
    typer.echo((directory / "rewards.md").read_text(encoding="utf-8"))
    typer.echo(f"rewards: {path}\nreport: {directory / 'rewards.md'}")


@train_app.command()
def select(
    directory: DirOpt,
    min_reward: Annotated[Optional[float], typer.Option(help="Leave out questions whose best reward is below this (default: keep every question's best).")] = None,
) -> None:
    """Keep each question's best trajectories (up to 3 on ties)."""
    from marag.train import select_file

    path = select_file(_config(directory), directory, min_reward)
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    typer.echo(f"selected: {path} ({len(rows)} trajectories of {len({r['qid'] for r in rows})} questions)")


@train_app.command()
def export(directory: DirOpt) -> None:
    """Write the chat examples of the trainable roles (sft.jsonl)."""
    from marag.train import export as run

    path = run(_config(directory), directory)
    typer.echo(f"examples: {path} ({sum(1 for _ in path.open())} lines)")


@train_app.command()
def finetune(
    directory: DirOpt,
    model: Annotated[Optional[Path], typer.Option(help="Base model: a GGUF file or a catalogue name (default: the model the trajectories were sampled with).")] = None,
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 40,
    rank: Annotated[int, typer.Option(help="LoRA rank.")] = 16,
    lr: Annotated[float, typer.Option(help="Learning rate.")] = 2e-4,
    batch: Annotated[int, typer.Option(help="Examples per step.")] = 4,
    max_len: Annotated[int, typer.Option("--max-len", help="Longest example in tokens (longer ones are left out).")] = 1024,
    save_every: Annotated[int, typer.Option(help="Checkpoint (adapter + optimizer state) every N steps.")] = 20,
    fresh: Annotated[bool, typer.Option(help="Delete the checkpoints of an earlier run instead of resuming it.")] = False,
) -> None:
    """LoRA on the exported examples, on the CPU (needs the `train` extra); resumes
    from the last checkpoint of the same run. Writes lora/adapter.gguf and adapter.json
    (the trainable roles: `marag eval --lora` applies the adapter to those only)."""
    from marag.errors import MaragError
    from marag.train.finetune import finetune as run
    from marag.train.loop import provenance

    if (directory / READER_RECORD).exists():  # reader examples (`train reader`): no sampling model, their own roles
        if model is None:
            raise MaragError("reader examples name no model to train", hint="give the reader's model: --model qwen2.5-1.5b")
        roles, record = None, json.loads((directory / READER_RECORD).read_text(encoding="utf-8"))
    else:
        cfg = _config(directory)
        if model is None and cfg.llm.backend == "llamacpp":  # the model the trajectories were sampled with
            model = cfg.llm.model_path or cfg.llm.model
        roles, record = cfg.trainable_roles, provenance(cfg)
    out = run(directory / "sft.jsonl", directory / "lora", model, steps=steps, rank=rank, lr=lr, batch=batch, max_len=max_len,
              save_every=save_every, fresh=fresh, roles=roles, provenance=record)  # fmt: skip
    typer.echo(json.dumps(out, indent=1))


@train_app.command()
def reader(
    runs: Annotated[list[Path], typer.Argument(help="Run directories (`marag eval` on training questions with short gold answers) or self-training directories (a teacher's trajectories: `marag train sample`, `marag train run`).")],
    directory: DirOpt,
) -> None:
    """Examples that teach the reader to read: each answered question's final read (its
    passages) with the gold answer as the reply, written to DIR/sft.jsonl; then `marag
    train finetune --dir DIR --model qwen2.5-1.5b` trains the reader's adapter."""
    from marag.train.reader import write_reader_examples

    path, tally = write_reader_examples(runs, directory / "sft.jsonl")
    record = {"data": "reader examples", "runs": [str(r) for r in runs], "counts": dict(tally)}
    (directory / READER_RECORD).write_text(json.dumps(record, indent=1), encoding="utf-8")
    typer.echo(", ".join(f"{n} {why}" for why, n in tally.most_common()))
    typer.echo(f"examples: {path}\nnext: marag train finetune --dir {directory} --model MODEL")


@train_app.command()
def router(
    runs: Annotated[list[Path], typer.Argument(help="Run directories (from `marag eval`) holding the first pass's answers, and the agent's for the default share.")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Where to write the router (JSON). Without it: only the report.")] = None,
    first: Annotated[str, typer.Option(help="The first pass's strategy in the runs.")] = "vanilla_rag_k5",
    agent: Annotated[str, typer.Option(help="The agent questions are sent on to (its answers in the runs choose the default share).")] = "unirag",
    metric: Annotated[str, typer.Option(help="The metric that says whether an answer is right.")] = "f1",
    right_at: Annotated[float, typer.Option(help="An answer is right when its metric is at least this.")] = 0.5,
    features: Annotated[Optional[str], typer.Option(help="Comma-separated signals to use (default: those whose AUROC alone is at least --min-auroc).")] = None,
    min_auroc: Annotated[float, typer.Option(help="A signal is used when it alone separates at least this well.")] = 0.55,
    escalate: Annotated[Optional[float], typer.Option(help="The default share sent on (default: the knee of the quality-cost curve).")] = None,
    check: Annotated[Optional[Path], typer.Option(help="Do not fit: report how this router file separates right from wrong first passes in the runs.")] = None,
    chart: Annotated[Optional[Path], typer.Option(help="Draw the quality-cost chart of the fit (PNG): first pass, agent, the knob's curve, the oracle router.")] = None,
) -> None:
    """Fit `auto`'s router (a logistic regression over the first pass's signals; needs
    scikit-learn) on the per-question results of run directories; write it as JSON."""
    from marag.errors import MaragError
    from marag.strategies.auto.router import Router
    from marag.train.router import check as check_router
    from marag.train.router import draw, examples, fit, report

    exs, summary = examples(runs, first=first, agent=agent, metric=metric, right_at=right_at)
    if not exs:
        raise MaragError(f"no answers of {first} with traces in {', '.join(map(str, runs))}",
                         hint=f"give run directories of `marag eval ... --strategies {first},{agent}`")  # fmt: skip
    if check is not None:
        if chart is not None:
            raise MaragError("--chart draws a fit's curve; --check fits nothing", hint="leave out --chart, or --check")
        res = check_router(Router.load(check), exs)
        typer.echo(f"{int(res['examples'])} first-pass answers, {int(res['right'])} right ({metric} >= {right_at}): "
                   f"router AUROC {res['router']:.3f}; best single signal {res['best_signal_name']} {res['best_signal']:.3f}")  # fmt: skip
        return
    if escalate is not None and not 0 <= escalate <= 1:
        raise MaragError(f"--escalate {escalate} is not a share", hint="give a number from 0 (send none on) to 1 (send all)")
    fitted = fit(exs, summary, features=[f.strip() for f in features.split(",") if f.strip()] if features else None, min_auroc=min_auroc, escalate=escalate,
                 label=f"{metric} >= {right_at}", first=first, agent=agent)  # fmt: skip
    typer.echo(report(fitted))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(fitted.router.model_dump(mode="json"), indent=1) + "\n", encoding="utf-8")
        tmp.replace(out)
        typer.echo(f"router: {out} (use it with --set auto.router={out})")
    if chart is not None:  # after the router is safe: a chart that cannot be drawn loses nothing
        chart.parent.mkdir(parents=True, exist_ok=True)
        try:
            typer.echo(f"chart: {chart}" if draw(fitted, chart, metric) else "no chart: matplotlib is not installed (pip install matplotlib)")
        except MaragError as e:
            typer.echo(f"no chart: {e}")


@train_app.command("run")
def run_plan(
    plan: Annotated[Path, typer.Argument(help="The plan: a TOML file (see docs/self-training.md).")],
    directory: Annotated[Optional[Path], typer.Option("--dir", help="Where the loop's stages write (default: runs/<plan name>).")] = None,
    data_dir: DataDirOpt = None,
) -> None:
    """The whole loop in one command: the teacher samples, rewards, selects and exports on
    the plan's training questions; the student's adapter is trained on them; teacher,
    base student and tuned student answer the held-back questions; a paired report.
    Started again, it resumes where it stopped."""
    from marag.train.plan import PlanRun, load_plan

    loaded = load_plan(plan)
    report = PlanRun(loaded, directory or Path("runs") / plan.stem, data_dir, echo=typer.echo).run()
    if report is not None:
        typer.echo(f"report: {report}")
