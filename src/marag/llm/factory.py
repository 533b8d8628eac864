"""Choosing a backend by name: `LLMConfig` (JSON-serialisable, stored with every run)
and `make_llm`.

`LLM_BACKENDS` maps a backend name to a factory `(LLMConfig) -> LLM`. The built-in
factories import their backend module only when called, so listing backends is cheap.
Third-party backends register through the entry-point group `marag.llm_backends`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from marag.errors import LLMError, UnknownNameError
from marag.llm.base import LLM
from marag.registry import Registry

LLM_BACKENDS: Registry[Callable[[LLMConfig], LLM]] = Registry("llm_backends")


class LLMConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    backend: str = "llamacpp"
    # openai: the model name sent to the API; llamacpp: a catalogue model (`marag models
    # list`), the default one when neither it nor model_path is given
    model: str | None = None
    model_path: str | None = None  # llamacpp: a GGUF file instead of a catalogue model
    base_url: str | None = None  # openai: default https://api.openai.com/v1
    api_key_env: str = "OPENAI_API_KEY"  # name of the variable holding the key, never the key
    threads: int = 2
    n_ctx: int | None = None  # llamacpp: total context, split among the n_parallel slots (None: the model's per-slot context x n_parallel)
    # llamacpp: slots, each with its own context and prompt cache. Twice the 4 questions in
    # flight by default: a question's next call to a role finds that role's last prompt
    # still in a slot and evaluates only what is new (see marag.llm.llamacpp)
    n_parallel: int = 8
    verbosity: int = -1  # llamacpp: llama.cpp's log on stderr (-1 silent ... 3 chatty)
    # llamacpp: the same reply to the same request in every run (one slot, no prompt
    # cache); costs throughput. Part of a run's identity: its answers differ.
    deterministic: bool = False
    # llamacpp: how structured replies are laid out, "spaced", "compact" or "free" (see
    # marag.llm.llamacpp); None: the catalogue model's own (spaced for a file of yours)
    json_layout: Literal["spaced", "compact", "free"] | None = None
    lora: str | None = None  # llamacpp: a LoRA adapter GGUF applied to the model (marag train finetune)
    # llamacpp: the roles whose calls carry the adapter; None: the roles it was trained
    # for (its adapter.json), ["*"]: every call (see marag.llm.llamacpp)
    lora_roles: list[str] | None = None
    # llamacpp: host memory, in MB, for the states of prompts that left their slots (0:
    # none; see marag.llm.llamacpp.PROMPT_CACHE_MB)
    prompt_cache_mb: int | None = None
    timeout_s: float = 120.0
    max_retries: int = 2
    strict_schema: bool = True  # openai: ask the server to enforce the schema exactly
    cache_dir: str | None = None  # cache responses on disk (off when None)
    cache_sampled: bool = False  # also cache calls with temperature > 0

    # How a model runs, not what it answers: left out of an evaluation's fingerprint, so
    # changing them resumes a run instead of restarting it.
    RUNTIME_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"threads", "n_ctx", "n_parallel", "prompt_cache_mb", "verbosity", "timeout_s", "max_retries", "cache_dir", "cache_sampled", "api_key_env"}
    )

    def identity(self) -> dict[str, Any]:
        """The fields that decide what the model answers."""
        return self.model_dump(mode="json", exclude=set(self.RUNTIME_FIELDS))

    @field_validator("model_path", "cache_dir", mode="before")
    @classmethod
    def _path_to_str(cls, v: Any) -> Any:
        return os.fspath(v) if isinstance(v, os.PathLike) else v

    @model_validator(mode="before")
    @classmethod
    def _old_compact_json(cls, data: Any) -> Any:
        # configs written before json_layout (runs/<id>/config.json) said compact_json
        if isinstance(data, dict) and "compact_json" in data:
            data = dict(data)
            compact = data.pop("compact_json")
            data.setdefault("json_layout", "compact" if compact else "free")
        return data

    @model_validator(mode="after")
    def _default_local_model(self) -> LLMConfig:
        # Named, not left implicit: a run's recorded config says which model answered,
        # whatever marag's default is when it is read.
        if self.backend == "llamacpp" and self.model is None and self.model_path is None:
            from marag.llm.models import DEFAULT_MODEL

            self.model = DEFAULT_MODEL
        return self

    @classmethod
    def from_spec(cls, spec: str, **overrides: Any) -> LLMConfig:
        """`"llamacpp"` (the default model), `"qwen2.5-0.5b"` or `"llamacpp:qwen2.5-0.5b"`
        (a catalogue model), `"llamacpp:/path/model.gguf"`, `"openai:gpt-4o-mini"`,
        `"scripted"`. Overrides that are None (unset CLI options) are ignored."""
        from marag.llm.models import llm_names

        models = llm_names()  # not the embedder, which the catalogue also holds

        backend, _, arg = spec.partition(":")
        backend, arg = backend.strip(), arg.strip()
        if not arg and backend not in LLM_BACKENDS and backend in models:
            backend, arg = "llamacpp", backend
        if backend not in LLM_BACKENDS:
            raise UnknownNameError(
                f"unknown LLM {spec!r}",
                hint=f"a backend ({', '.join(LLM_BACKENDS.names())}; e.g. llamacpp:PATH.gguf, openai:MODEL) "
                f"or a catalogue model ({', '.join(models)}; see `marag models list`)",
            )
        fields: dict[str, Any] = {"backend": backend}
        if arg and backend == "llamacpp":
            fields["model" if arg in models else "model_path"] = arg
        elif arg:
            fields["model_path" if arg.endswith(".gguf") else "model"] = arg
        fields.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**fields)

    def cache_kwargs(self) -> dict[str, Any]:
        return {"cache": self.cache_dir, "cache_sampled": self.cache_sampled}


def make_llm(spec: str | LLMConfig, **overrides: Any) -> LLM:
    """An LLM from a spec string or a config, e.g. `make_llm("llamacpp", threads=2)`."""
    if isinstance(spec, str):
        cfg = LLMConfig.from_spec(spec, **overrides)
    else:
        cfg = LLMConfig.model_validate({**spec.model_dump(), **{k: v for k, v in overrides.items() if v is not None}})
    return LLM_BACKENDS.get(cfg.backend)(cfg)


@LLM_BACKENDS.register("llamacpp")
def _llamacpp(cfg: LLMConfig) -> LLM:
    from marag.llm.llamacpp import LlamaCppLLM

    return LlamaCppLLM(
        cfg.model_path or cfg.model,
        cfg.threads,
        cfg.n_ctx,
        cfg.n_parallel,
        cfg.verbosity,
        deterministic=cfg.deterministic,
        json_layout=cfg.json_layout,
        lora=cfg.lora,
        lora_roles=cfg.lora_roles,
        prompt_cache_mb=cfg.prompt_cache_mb,
        **cfg.cache_kwargs(),
    )


@LLM_BACKENDS.register("openai")
def _openai(cfg: LLMConfig) -> LLM:
    from marag.llm.openai_compat import OpenAICompatLLM

    if not cfg.model:
        raise LLMError("the openai backend needs a model name", hint="use openai:MODEL, e.g. --llm openai:gpt-4o-mini")
    return OpenAICompatLLM(
        cfg.model,
        cfg.base_url,
        cfg.api_key_env,
        cfg.timeout_s,
        cfg.max_retries,
        strict=cfg.strict_schema,
        **cfg.cache_kwargs(),
    )


@LLM_BACKENDS.register("scripted")
def _scripted(cfg: LLMConfig) -> LLM:
    """With no script to follow, it answers every call with a placeholder that fits the
    output model: a whole strategy runs end to end with no model (wiring smoke tests).
    Made to run for long (`marag serve --llm scripted`): it keeps no call log and lets
    other tasks run at each call (`ScriptedLLM`'s `record` and `pause`)."""
    from marag.llm.scripted import ScriptedLLM, placeholder_reply

    return ScriptedLLM(fn=placeholder_reply, model=cfg.model or "scripted", record=False, pause=True, **cfg.cache_kwargs())
