"""What the commands of `marag` (cli.py, models_cli.py, train_cli.py) share: the LLM
options, `--set KEY=VALUE` parsing and `--data-dir`. Help texts go through Rich, so a
literal `[` is written `\\[`."""

from __future__ import annotations

import functools
import inspect
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any, Optional, get_type_hints

import typer

from marag.errors import MaragError


HELP_NAMES = {"help_option_names": ["-h", "--help"]}  # every command and subcommand takes -h


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


LLM_HELP = (
    "LLM: a catalogue model (default qwen2.5-1.5b; `marag models list`), llamacpp:FILE.gguf, "
    "openai:MODEL (with --llm-base-url for other servers), or scripted (no model: placeholder replies)."
)
LlmOpt = Annotated[str, typer.Option(help=LLM_HELP, envvar="MARAG_LLM")]  # $MARAG_LLM: your own default
LlmBaseUrlOpt = Annotated[Optional[str], typer.Option(help="Base URL of an OpenAI-compatible server (vLLM, llama.cpp server, Ollama).")]
ThreadsOpt = Annotated[int, typer.Option(help="CPU threads for the local model (default: the cores this process may use).")]
NCtxOpt = Annotated[
    Optional[int],
    typer.Option("--n-ctx", help="Local model: total context in tokens, shared by its 8 slots (default: the model's context a slot x 8; 8192 a slot for the Qwen models)."),
]
PromptCacheOpt = Annotated[
    Optional[int],
    typer.Option("--prompt-cache-mb", min=0, help="Local model: host memory in MB for the states of prompts that left their slots, restored when a later prompt starts the same way (default 0: none, so a long-running server keeps its size; llama.cpp's own is 8192; it saved ~4% of UniRAG's evaluated prompt tokens)."),
]
LoraOpt = Annotated[Optional[Path], typer.Option(help="Local model: a LoRA adapter GGUF applied to it (from `marag train finetune`).")]
LoraRolesOpt = Annotated[
    Optional[str],
    typer.Option(help="Roles whose calls carry the --lora adapter, comma-separated, as <strategy>.<role> (e.g. mrag.planner, unirag.reflector), or 'all' (default: the roles it was trained for, from its adapter.json; the answerer stays on the base weights)."),
]
ConcurrencyOpt = Annotated[int, typer.Option(help="Questions answered at once.")]
CacheDirOpt = Annotated[Optional[Path], typer.Option(help="Cache LLM responses in this directory (an unchanged request is not asked again).")]


@dataclass(frozen=True)
class LlmOptions:
    """The LLM options `marag ask` and `marag eval` share, declared once: each field is a
    typer option (its annotation) with its default. A command takes them as one value, a
    parameter `NAME: LlmOptions = LlmOptions()` that `with_llm_options` spreads into
    these options where it stands in the signature."""

    llm: LlmOpt = "llamacpp"
    llm_base_url: LlmBaseUrlOpt = None
    threads: ThreadsOpt = usable_cores()
    n_ctx: NCtxOpt = None
    prompt_cache_mb: PromptCacheOpt = None
    lora: LoraOpt = None
    lora_roles: LoraRolesOpt = None
    concurrency: ConcurrencyOpt = 4
    cache_dir: CacheDirOpt = None


def with_llm_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give `command` the `LlmOptions` fields as typer options, in place of its one
    `LlmOptions` parameter (typer reads `__signature__`), and call it with them gathered
    into that parameter's `LlmOptions`. Put it under `@app.command()`."""
    signature = inspect.signature(command, eval_str=True)
    [slot] = [p for p in signature.parameters.values() if p.annotation is LlmOptions]
    hints = get_type_hints(LlmOptions, include_extras=True)
    names = [f.name for f in fields(LlmOptions)]
    shared = [inspect.Parameter(f.name, slot.kind, default=f.default, annotation=hints[f.name]) for f in fields(LlmOptions)]
    params = list(signature.parameters.values())
    at = params.index(slot)
    spread = signature.replace(parameters=params[:at] + shared + params[at + 1 :])

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        bound = spread.bind(*args, **kwargs)
        bound.apply_defaults()
        given = dict(bound.arguments)
        options = LlmOptions(**{name: given.pop(name) for name in names})
        return command(**given, **{slot.name: options})

    run.__signature__ = spread  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in spread.parameters.values()} | {"return": signature.return_annotation}
    return run


DeterministicOpt = Annotated[
    bool, typer.Option(help="Identical answers in every run with the local model (one slot, no prompt cache, no deadline; slower).")
]
DataDirOpt = Annotated[
    Optional[Path], typer.Option("--data-dir", help="Benchmark data directory (default: $MARAG_DATA or ../shared/data).")
]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="Strategy setting KEY=VALUE (JSON value), repeatable.")]


def parse_set(item: str) -> tuple[str, object]:
    """`KEY=VALUE` from `--set`: the value as JSON when it parses, else the text."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise MaragError(f"bad --set {item!r}", hint="use KEY=VALUE, e.g. --set k=4")
    try:
        return key.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return key.strip(), raw
