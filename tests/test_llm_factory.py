from __future__ import annotations

from pathlib import Path

import pytest

from marag.errors import LLMError, UnknownNameError
from marag.llm import LLM, LLM_BACKENDS, LLMConfig, ScriptedLLM, make_llm
from marag.llm.llamacpp import LlamaCppLLM
from marag.llm.models import ModelStore
from marag.llm.openai_compat import DEFAULT_BASE_URL, OpenAICompatLLM


def test_builtin_backends_are_registered():
    assert {"llamacpp", "openai", "scripted"} <= set(LLM_BACKENDS.names())


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("llamacpp", {"backend": "llamacpp", "model": "qwen2.5-1.5b", "model_path": None}),
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
    assert "/no/such/model.gguf" in info.value.message and "qwen2.5-1.5b" in info.value.hint


def test_llamacpp_is_lazy_and_splits_context_among_slots(tmp_path, monkeypatch):
    monkeypatch.setenv("MARAG_HOME", str(tmp_path))
    store = ModelStore()
    path = store.path("qwen2.5-1.5b")
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:  # where a pull puts it, of its size: resolved without a download
        f.truncate(store.entry("qwen2.5-1.5b").size)
    llm = make_llm("llamacpp", threads=2, n_ctx=8192, n_parallel=4)
    assert isinstance(llm, LlamaCppLLM)
    assert llm.model == path.name and llm.model_path == path and Path(path).suffix == ".gguf"
    assert llm.ctx_per_slot == 2048
    assert llm._server is None  # nothing loaded until the first request
    # by default each slot gets the catalogue's context for the model
    assert make_llm("llamacpp", n_parallel=3).ctx_per_slot == 8192


def test_json_layout_defaults_to_the_models_own(tmp_path, monkeypatch):
    monkeypatch.setenv("MARAG_HOME", str(tmp_path))
    store = ModelStore()
    for name in ("qwen2.5-1.5b", "smollm2-135m"):
        path = store.path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            f.truncate(store.entry(name).size)
    # measured: the 1.5B writes sentences when no space is allowed after a colon;
    # SmolLM2 pretty-prints unless no whitespace is allowed
    assert make_llm("llamacpp").json_layout == "spaced"
    assert make_llm("smollm2-135m").json_layout == "compact"
    assert make_llm("smollm2-135m", json_layout="free").json_layout == "free"
    own = tmp_path / "own.gguf"
    own.write_bytes(b"GGUF")
    assert make_llm(f"llamacpp:{own}").json_layout == "spaced"
    # cached replies are kept apart by layout (compact keeps its earlier key)
    assert make_llm("llamacpp").cache_kind() == "llamacpp/spaced"
    assert make_llm("smollm2-135m").cache_kind() == "llamacpp"
    with pytest.raises(ValueError):
        LLMConfig(json_layout="pretty")


def test_configs_written_with_compact_json_still_load():
    assert LLMConfig.model_validate({"backend": "llamacpp", "compact_json": True}).json_layout == "compact"
    assert LLMConfig.model_validate({"backend": "llamacpp", "compact_json": False}).json_layout == "free"


def test_the_host_memory_prompt_cache_is_marags_bound_not_llamacpps(tmp_path, monkeypatch):
    """llama.cpp's server keeps left prompts' states in host memory up to 8 GB by default,
    and a server that runs for hours grows toward that (the default-model soak)."""
    import xllamacpp

    from marag.llm.llamacpp import PROMPT_CACHE_MB

    monkeypatch.setenv("MARAG_HOME", str(tmp_path))
    store = ModelStore()
    path = store.path("qwen2.5-1.5b")
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:
        f.truncate(store.entry("qwen2.5-1.5b").size)
    started: list = []

    class Server:  # stands in for llama.cpp: records what it was started with
        def __init__(self, params):
            started.append(params)

        def handle_chat_completions(self, request):
            return {}

    monkeypatch.setattr(xllamacpp, "Server", Server)
    for overrides, expected in (({}, PROMPT_CACHE_MB), ({"prompt_cache_mb": 0}, 0), ({"prompt_cache_mb": 256}, 256), ({"deterministic": True}, 0)):
        make_llm("llamacpp", **overrides).server()
        assert started[-1].cache_ram_mib == expected, overrides
    assert PROMPT_CACHE_MB < 8192
    assert "prompt_cache_mb" in LLMConfig.RUNTIME_FIELDS  # how much is kept, not what is answered
    with pytest.raises(LLMError, match="prompt_cache_mb"):
        make_llm("llamacpp", prompt_cache_mb=-1)
