"""A LoRA adapter applied to some roles only (`lora_roles`): one llama.cpp server, each
request saying whether the adapter applies (llama.cpp's per-request adapter scale).
Scripted: a stand-in for the xllamacpp server records every request and answers from a
script, so the check runs the real backend's request path without a model."""

from __future__ import annotations

import asyncio
import json

import pytest

from marag.errors import LLMError, MaragError
from marag.llm import LLMConfig, make_llm
from marag.llm.llamacpp import LlamaCppLLM, resolve_lora_roles
from marag.strategies import make_strategy
from twohop import QUESTION, bm25_retriever, mrag_replies

TRAINED = ["mrag.coordinator", "mrag.planner", "mrag.searcher", "mrag.searcher.query", "mrag.searcher.judge", "mrag.searcher.next",
           "mrag.summarizer", "mrag.reasoner", "mrag.validator"]  # fmt: skip


def mrag_reply(name: str) -> dict:
    return mrag_replies().get(name, {})


class FakeServer:
    """Answers like xllamacpp's server (streamed chunks), from the schema's title; keeps
    each request's messages and adapter scale."""

    def __init__(self):
        self.requests: list[dict] = []

    def handle_chat_completions(self, request, on_chunk=None):
        self.requests.append(request)
        schema = json.loads(request["grammar"].split("%json ", 1)[1])
        name = schema.get("title", "")
        if name == "PageJudgement":  # one judgement per document of the page
            reply = {"judgements": [mrag_reply("Judgement")] * schema["properties"]["judgements"]["minItems"]}
        else:
            reply = mrag_reply(name)
        text = json.dumps(reply)
        chunk = {"choices": [{"delta": {"content": text}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
        on_chunk(chunk)


@pytest.fixture
def files(tmp_path):
    base, adapter = tmp_path / "base.gguf", tmp_path / "adapter.gguf"
    base.write_bytes(b"GGUF")  # never loaded: the server is a stand-in
    adapter.write_bytes(b"GGUF")
    adapter.with_suffix(".json").write_text(json.dumps({"roles": TRAINED}))  # as `marag train finetune` writes it
    return base, adapter


def run_mrag(llm: LlamaCppLLM, tmp_path) -> tuple[list[tuple[str, str, float | None]], FakeServer]:
    """(role, recorded model, adapter scale sent) of every call an mRAG run made."""
    server = FakeServer()
    llm._server = server
    tmp_path.mkdir(parents=True, exist_ok=True)
    ans = asyncio.run(make_strategy("mrag", llm, bm25_retriever(tmp_path), {"max_agent_calls": 6}).run(QUESTION))
    sent = {json.dumps(r["messages"]): (r["lora"][0]["scale"] if "lora" in r else None) for r in server.requests}
    calls = [(s.agent, c.model, sent[json.dumps(c.messages)]) for s in ans.trace.steps for c in s.llm_calls]
    assert len(calls) == len(server.requests) > 3
    return calls, server


def test_the_adapter_goes_only_to_the_roles_it_was_trained_for(files, tmp_path):
    base, adapter = files
    llm = make_llm(LLMConfig(model_path=str(base), lora=str(adapter)))  # lora_roles unset: the adapter's adapter.json
    calls, _ = run_mrag(llm, tmp_path)
    roles = {role for role, _, _ in calls}
    assert {"coordinator", "searcher.query", "answerer"} <= roles
    for role, model, scale in calls:
        if f"mrag.{role}" in TRAINED:
            assert (model, scale) == ("base.gguf+adapter.gguf", 1.0), role
        else:  # the answerer: base weights, recorded under the base model's name
            assert (model, scale) == ("base.gguf", 0.0), role


def test_named_roles_and_all(files, tmp_path):
    base, adapter = files
    calls, _ = run_mrag(LlamaCppLLM(base, lora=adapter, lora_roles=["mrag.answerer"]), tmp_path / "a")
    assert {(r, s) for r, _, s in calls if r == "answerer"} == {("answerer", 1.0)}
    assert {s for r, _, s in calls if r != "answerer"} == {0.0}
    calls, _ = run_mrag(LlamaCppLLM(base, lora=adapter, lora_roles=["*"]), tmp_path / "b")
    assert {s for _, _, s in calls} == {1.0} and {m for _, m, _ in calls} == {"base.gguf+adapter.gguf"}
    calls, _ = run_mrag(LlamaCppLLM(base), tmp_path / "c")  # no adapter: nothing is sent about one
    assert {s for _, _, s in calls} == {None} and {m for _, m, _ in calls} == {"base.gguf"}


def test_roles_default_to_the_adapter_description(files, tmp_path):
    base, adapter = files
    assert resolve_lora_roles(adapter, None) == TRAINED
    assert resolve_lora_roles(adapter, ["all"]) == ["*"] and resolve_lora_roles(adapter, ["answerer"]) == ["answerer"]
    plain = tmp_path / "other.gguf"
    plain.write_bytes(b"GGUF")
    assert resolve_lora_roles(plain, None) is None  # an adapter from elsewhere: every call
    assert resolve_lora_roles(None, ["x"]) is None


def test_the_command_line_records_the_roles(files):
    """`--lora` alone resolves the roles from adapter.json into the run's LLM config."""
    from marag import cli

    base, adapter = files
    assert cli._lora(adapter, None) == {"lora": str(adapter.resolve()), "lora_roles": TRAINED}
    assert cli._lora(adapter, "mrag.coordinator,mrag.planner")["lora_roles"] == ["mrag.coordinator", "mrag.planner"]
    assert cli._lora(adapter, "all")["lora_roles"] == ["*"]
    with pytest.raises(MaragError, match="needs --lora"):
        cli._lora(None, "coordinator")


def test_qualified_roles_tell_strategies_apart_and_bare_names_still_work(files, tmp_path):
    """`vanilla_rag.answerer` is not mRAG's answerer; a bare `answerer` (an older
    adapter.json or --lora-roles) still means every strategy's answerer, and the command
    line warns."""
    from marag import cli
    from marag.strategies.base import RoleNameWarning

    base, adapter = files
    calls, _ = run_mrag(LlamaCppLLM(base, lora=adapter, lora_roles=["vanilla_rag.answerer", "unirag.coordinator"]), tmp_path / "a")
    assert {s for _, _, s in calls} == {0.0}
    calls, _ = run_mrag(LlamaCppLLM(base, lora=adapter, lora_roles=["mrag.answerer"]), tmp_path / "b")
    assert {r for r, _, s in calls if s == 1.0} == {"answerer"}
    calls, _ = run_mrag(LlamaCppLLM(base, lora=adapter, lora_roles=["answerer", "searcher.query"]), tmp_path / "c")
    assert {r for r, _, s in calls if s == 1.0} == {"answerer", "searcher.query"}
    with pytest.warns(RoleNameWarning, match="'planner': bare role names are deprecated, write mrag.planner or unirag.planner"):
        assert cli._lora(adapter, "planner")["lora_roles"] == ["planner"]  # kept as written: the run's config is unchanged


def test_an_adapter_for_another_base_model_is_refused(files, tmp_path):
    """An adapter names the model it was trained on (adapter.json's base_file and
    catalogue name): run on another model it is refused with one line saying which."""
    from marag import cli

    base, adapter = files
    adapter.with_suffix(".json").write_text(json.dumps({"roles": TRAINED, "base_file": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                                                        "model": "qwen2.5-1.5b"}))  # fmt: skip
    with pytest.raises(LLMError) as info:
        LlamaCppLLM(base, lora=adapter)
    assert "trained for qwen2.5-1.5b, not base.gguf" in info.value.message and "\n" not in info.value.message
    assert "--llm qwen2.5-1.5b" in info.value.hint
    # the same adapter on its own base (by file name) loads, and its folder names it too
    own = tmp_path / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    own.write_bytes(b"GGUF")
    assert LlamaCppLLM(own, lora=adapter.parent).lora == adapter
    assert cli._lora(adapter.parent, None)["lora"] == str(adapter.resolve())


def test_an_older_adapter_names_its_base_by_path(files, tmp_path):
    base, adapter = files
    adapter.with_suffix(".json").write_text(json.dumps({"roles": TRAINED, "base_model": "/models/other.gguf"}))
    with pytest.raises(LLMError, match="trained for other.gguf"):
        LlamaCppLLM(base, lora=adapter)
