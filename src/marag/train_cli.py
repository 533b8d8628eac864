"""`marag train sample|reward|select|export|finetune`: the self-training loop's stages
as commands over one training directory (see `marag.train.loop`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Optional

import typer

train_app = typer.Typer(no_args_is_help=True, help="Self-training: sample, reward, select, export, fine-tune.")

DirOpt = Annotated[Path, typer.Option("--dir", help="The training directory (settings in train.json).")]


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
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Strategy setting KEY=VALUE, repeatable.")] = None,
    llm: Annotated[str, typer.Option(help="LLM spec.")] = "llamacpp",
    concurrency: Annotated[int, typer.Option(help="Trajectories sampled at once.")] = 4,
    data_dir: Annotated[Optional[Path], typer.Option("--data-dir", help="Benchmark data directory.")] = None,
) -> None:
    """Sample T trajectories per question (trainable roles at 0.7, the answer at 0.1)."""
    from marag.cli import _parse_set
    from marag.llm import LLMConfig
    from marag.train import TrainConfig
    from marag.train.loop import sample as run

    cfg = TrainConfig(dataset=dataset, strategy=strategy, limit=limit or None, skip=skip, trajectories=trajectories,
                      settings=dict(_parse_set(s) for s in set_ or []), llm=LLMConfig.from_spec(llm), concurrency=concurrency)  # fmt: skip
    typer.echo(f"trajectories: {asyncio.run(run(cfg, directory, data_dir))}")


@train_app.command()
def reward(
    directory: DirOpt,
    judge: Annotated[Optional[str], typer.Option(help="Judge LLM spec (default: the sampling model).")] = None,
    runs: Annotated[int, typer.Option(help="Judge runs averaged per reward (R).")] = 5,
) -> None:
    """Score each sampled response: correctness and faithfulness, weighted 4:1."""
    from marag.llm import LLMConfig, make_llm
    from marag.train.loop import reward as run

    cfg = _config(directory).model_copy(update={"judge_runs": runs})
    typer.echo(f"rewards: {asyncio.run(run(cfg, directory, judge=make_llm(LLMConfig.from_spec(judge)) if judge else None))}")


@train_app.command()
def select(directory: DirOpt) -> None:
    """Keep each question's best trajectories (up to 3 on ties)."""
    from marag.train import select_file

    typer.echo(f"selected: {select_file(_config(directory), directory)}")


@train_app.command()
def export(directory: DirOpt) -> None:
    """Write the chat examples of the trainable roles (sft.jsonl)."""
    from marag.train import export as run

    path = run(_config(directory), directory)
    typer.echo(f"examples: {path} ({sum(1 for _ in path.open())} lines)")


@train_app.command()
def finetune(
    directory: DirOpt,
    model: Annotated[Optional[Path], typer.Option(help="Base GGUF model (default: the installed SmolLM2-135M).")] = None,
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 40,
    rank: Annotated[int, typer.Option(help="LoRA rank.")] = 16,
    lr: Annotated[float, typer.Option(help="Learning rate.")] = 2e-4,
    fresh: Annotated[bool, typer.Option(help="Delete the checkpoints of an earlier run instead of resuming it.")] = False,
) -> None:
    """LoRA on the exported examples, on the CPU (needs the `train` extra); resumes
    from the last checkpoint of the same run."""
    from marag.train.finetune import finetune as run

    out = run(directory / "sft.jsonl", directory / "lora", model, steps=steps, rank=rank, lr=lr, fresh=fresh)
    typer.echo(json.dumps(out, indent=1))
