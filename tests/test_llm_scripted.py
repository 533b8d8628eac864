from __future__ import annotations

import asyncio
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from marag.errors import StructuredOutputError
from marag.llm import LLM, Message, ScriptedLLM, ScriptExhausted, make_llm


class Plan(BaseModel):
    action: Literal["search", "answer"]
    query: str = Field(max_length=80)


def ask(llm, text, output=None):
    return asyncio.run(llm.generate([Message(role="user", content=text)], output=output))


def test_satisfies_the_llm_protocol_and_records_usage():
    llm = ScriptedLLM(["hello there"])
    assert isinstance(llm, LLM)  # usable wherever the port is expected
    r = ask(llm, "say hello")
    assert r.text == "hello there" and r.parsed is None and r.model == llm.model
    # token counts are whitespace words, so control-flow tests can assert budgets
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (2, 2)


def test_responses_are_consumed_in_order_and_accept_models_dicts_strings():
    llm = ScriptedLLM([Plan(action="search", query="q1"), {"action": "answer", "query": ""}, "free text"])
    assert ask(llm, "a", Plan).parsed.query == "q1"
    assert ask(llm, "b", Plan).parsed.action == "answer"
    assert ask(llm, "c").text == "free text"
    assert [c.messages[-1]["content"] for c in llm.calls] == ["a", "b", "c"]


def test_rules_match_last_user_message_before_the_queue():
    llm = ScriptedLLM(
        ["queued"],
        rules=[("weather", "sunny"), (lambda text: text.startswith("Q:"), "predicate hit")],
    )
    assert ask(llm, "what is the weather?").text == "sunny"
    assert ask(llm, "Q: anything").text == "predicate hit"
    assert ask(llm, "what is the weather today?").text == "sunny"  # rules are reusable
    assert ask(llm, "other").text == "queued"


def test_fn_gets_messages_and_output_model():
    seen = []

    def fn(messages, output):
        seen.append(output)
        return {"action": "search", "query": messages[-1]["content"]} if output else "plain"

    llm = ScriptedLLM(fn=fn)
    assert ask(llm, "find x", Plan).parsed.query == "find x"
    assert ask(llm, "hi").text == "plain"
    assert seen == [Plan, None]


def test_repair_path_consumes_the_next_reply():
    llm = ScriptedLLM(['{"action": "dance", "query": "x"}', {"action": "answer", "query": "x"}])
    assert ask(llm, "go", Plan).parsed.action == "answer"
    assert len(llm.calls) == 2
    with pytest.raises(StructuredOutputError):
        ask(ScriptedLLM(["nope", "nope again"]), "go", Plan)


def test_running_out_says_which_call_and_message():
    llm = ScriptedLLM(["only one"])
    ask(llm, "first")
    with pytest.raises(ScriptExhausted) as info:
        ask(llm, "the second question")
    assert "#2" in info.value.message and "the second question" in info.value.message


def test_make_llm_scripted_fabricates_valid_placeholders():
    class Deep(BaseModel):
        plan: Plan
        tags: list[str]
        score: int = Field(ge=1)
        note: str | None

    llm = make_llm("scripted")
    r = ask(llm, "anything", Deep)
    assert isinstance(r.parsed, Deep) and r.parsed.score == 1 and r.parsed.plan.action == "search"
    assert ask(llm, "anything").text


def test_the_made_scripted_model_keeps_no_calls_and_lets_others_run_at_each_call():
    """`make_llm("scripted")` is what `marag serve --llm scripted` answers with: it grew by
    every prompt it saw, and a question's calls never gave the event loop back, so an
    evaluation held the server for its whole run (benchmarks/soak.py)."""
    llm = make_llm("scripted")
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async def scenario():
        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        for _ in range(20):
            await llm.generate([Message(role="user", content="q")])
        task.cancel()
        return ticks - before

    assert asyncio.run(scenario()) >= 20
    assert llm.calls == [] and llm.n_calls == 20
    recorded = ScriptedLLM(["a"])
    ask(recorded, "q")
    assert len(recorded.calls) == 1  # a test's own one records, as before
