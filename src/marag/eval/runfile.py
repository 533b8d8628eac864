"""Run files: an evaluation (or a question session) written down, to replay it.

`marag eval --config run.toml` reads every field of `EvalConfig` from a TOML file
(`dataset`, `strategies`, `limit`, `metrics`, `seed`, `retriever`, the tables `[llm]`,
`[judge]` and `[index]`, and `[strategy_configs.NAME]` for each strategy's settings,
per-role LLMs included); `marag eval --config runs/X/config.json` replays the run that
wrote it. Unknown keys are errors that name the key.

    dataset = "hotpotqa_train100"
    strategies = ["vanilla_rag", "mrag"]
    limit = 30
    [llm]
    backend = "llamacpp"
    [strategy_configs.mrag]
    max_agent_calls = 12

A cluster setup is the same file with where things run: a shared index (`index_path`,
a directory or an index URI), a model server, and a Ray cluster. Credentials stay in
environment variables ($MARAG_MILVUS_TOKEN, the model's `api_key_env`), never in the file:

    dataset = "hotpotqa_train100"
    strategies = ["vanilla_rag", "mrag"]
    index_path = "milvus://milvus.internal:19530/hotpot"
    executor = "ray"
    ray_address = "ray://ray-head:10001"
    [llm]
    backend = "openai"
    model = "qwen2.5-7b-instruct"
    base_url = "http://vllm.internal:8000/v1"

Without an `[index]` table, a file that names `index_path` takes that index's own
settings (what `marag eval --index` does), so both give the same run.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from marag.errors import MaragError


def read_table(path: str | Path) -> dict[str, Any]:
    """A TOML or JSON file as a dict; a run directory's config.json gives its "config"."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise MaragError(f"cannot read {p}: {exc.strerror or exc}", hint="give a .toml run file or a run's config.json") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise MaragError(f"{p} is not valid {'JSON' if p.suffix == '.json' else 'TOML'}: {exc}") from None
    if p.suffix == ".json" and isinstance(data.get("config"), dict) and "fingerprint" in data:
        data = data["config"]  # a run directory's record: the config that made it
    return data


def validated(model: type[BaseModel], data: dict[str, Any], path: str | Path) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(x) for x in err.get("loc", ()))
        if err.get("type") == "extra_forbidden":
            raise MaragError(f"{path}: unknown key {key!r}", hint=f"valid keys: {', '.join(sorted(model.model_fields))}") from None
        raise MaragError(f"{path}: {key}: {err.get('msg')}") from None


def eval_config(path: str | Path):
    from marag.eval.answering import EvalConfig

    data = read_table(path)
    if isinstance(data.get("index_path"), str) and "index" not in data:
        from marag.index.uri import opened_index

        with opened_index(data["index_path"]) as idx:
            data["index"] = idx.config.model_dump(mode="json")
    return validated(EvalConfig, data, path)


class AskFile(BaseModel):
    """What `marag ask --config FILE` reads."""

    model_config = ConfigDict(extra="forbid")

    strategy: str = "vanilla_rag"
    index: str | None = None
    retriever: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    llm: dict[str, Any] = Field(default_factory=dict)  # LLMConfig fields


def ask_config(path: str | Path) -> AskFile:
    return validated(AskFile, read_table(path), path)
