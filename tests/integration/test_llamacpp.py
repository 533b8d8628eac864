"""The smallest real local model (SmolLM2-135M through llama.cpp) answering NQ questions from
their gold passage, sequentially, concurrently and through its own HTTP endpoint."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel, Field

from marag.errors import LLMError
from marag.llm import LLMResponse, Message, make_llm

pytestmark = pytest.mark.integration

N_QUESTIONS = 5


class ShortAnswer(BaseModel):
    answer: str = Field(max_length=100)


@pytest.fixture(scope="session")
def llm(smoke_llm):
    return smoke_llm


@pytest.fixture(scope="session")
def nq(data_dir) -> list[dict]:
    path = data_dir / "nq_open_oracle" / "nq_open_oracle_dev600.jsonl"
    with path.open(encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(N_QUESTIONS), f)]
    for row in rows:
        row["gold"] = next(c for c in row["ctxs"] if c.get("isgold"))
    return rows


def prompt(row: dict) -> list[Message]:
    gold = row["gold"]
    return [
        Message(role="system", content="Answer the question from the passage with a few words. Reply in JSON."),
        Message(role="user", content=f"Passage ({gold['title']}): {gold['text']}\n\nQuestion: {row['question']}?"),
    ]


def check(responses: list[LLMResponse], rows: list[dict]) -> int:
    hits = 0
    for r, row in zip(responses, rows):
        assert isinstance(r.parsed, ShortAnswer) and r.parsed.answer.strip()
        assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
        hits += any(a.lower() in r.parsed.answer.lower() for a in row["answers"])
    return hits


def test_answers_validate_sequentially(llm, nq):
    async def run():
        return [await llm.generate(prompt(row), output=ShortAnswer, max_tokens=128) for row in nq]

    responses = asyncio.run(run())
    hits = check(responses, nq)
    print(f"\nsequential: {hits}/{len(nq)} answers contain a gold answer:")
    for r, row in zip(responses, nq):
        print(f"  {row['question']!r} -> {r.parsed.answer!r} (gold {row['answers']})")
    assert hits >= 1


def test_answers_validate_concurrently(llm, nq):
    async def run():
        return await asyncio.gather(*(llm.generate(prompt(row), output=ShortAnswer, max_tokens=128) for row in nq))

    responses = asyncio.run(run())
    hits = check(responses, nq)
    print(f"\nconcurrent: {hits}/{len(nq)} contain a gold answer")
    # every reply validated against the schema, was not cut off, and was counted
    assert all(isinstance(r.parsed, ShortAnswer) and r.parsed.answer.strip() for r in responses)
    assert all(r.usage.prompt_tokens > 20 and 0 < r.usage.completion_tokens < 128 for r in responses)
    assert hits >= 1


def test_prompt_longer_than_a_slot_is_a_clear_error(llm):
    too_long = [Message(role="user", content="word " * (llm.ctx_per_slot + 100))]
    with pytest.raises(LLMError) as info:
        asyncio.run(llm.generate(too_long, max_tokens=8))
    assert "n_ctx" in info.value.message and "--n-ctx" in info.value.hint


def test_cancelled_request_stops_early_and_frees_its_slot(smoke_model):
    """One slot: a cancelled 3,000-token essay must stop at once, or the next request
    would wait for it (~50 s of generation here; the timeout leaves a 10x margin for a
    busy machine)."""
    single = make_llm(f"llamacpp:{smoke_model}", threads=2, n_parallel=1)
    essay = [Message(role="user", content="Write a very long essay about the history of the sea.")]

    async def run():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(single.generate(essay, max_tokens=3000), timeout=0.5)
        return await asyncio.wait_for(single.generate([Message(role="user", content="Say hi.")], max_tokens=4), timeout=30)

    try:
        r = asyncio.run(run())
    finally:
        single.close()
    assert 0 < r.usage.completion_tokens <= 4


def outside_strings(text: str) -> str:
    """The characters of a JSON text that are not inside string literals."""
    out, in_string, escaped = [], False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        else:
            out.append(ch)
    return "".join(out)


def test_structured_replies_are_compact_json(llm, nq):
    """The grammar admits no whitespace between JSON tokens."""
    async def run():
        return await asyncio.gather(*(llm.generate(prompt(row), output=ShortAnswer, max_tokens=128) for row in nq))

    responses = asyncio.run(run())
    for r in responses:
        assert r.text.startswith('{"answer":"') and not any(c.isspace() for c in outside_strings(r.text)), r.text
    assert outside_strings('{"a": "b c", "d":1}') == "{: , :1}"


def test_deterministic_mode_repeats_itself(nq, smoke_model):
    """Two runs of the same concurrent requests give byte-identical replies (one slot,
    no prompt cache); parallel slots do not promise that."""

    async def twice(model):
        first = await asyncio.gather(*(model.generate(prompt(row), output=ShortAnswer, max_tokens=64) for row in nq))
        second = await asyncio.gather(*(model.generate(prompt(row), output=ShortAnswer, max_tokens=64) for row in nq))
        return [r.text for r in first], [r.text for r in second]

    det = make_llm(f"llamacpp:{smoke_model}", threads=2, deterministic=True)
    try:
        a, b = asyncio.run(twice(det))
    finally:
        det.close()
    assert a == b and det.n_parallel == 1


def test_openai_backend_against_the_local_http_endpoint(llm, nq, monkeypatch):
    base_url = llm.http_base_url
    if not base_url:
        pytest.skip("xllamacpp did not start its HTTP listener")
    remote = make_llm("openai:smollm2", base_url=base_url, api_key_env="MARAG_TEST_LOCAL_KEY", timeout_s=60)
    monkeypatch.delenv("MARAG_TEST_LOCAL_KEY", raising=False)
    with pytest.raises(LLMError) as info:  # the local endpoint is not open to anyone
        asyncio.run(remote.generate(prompt(nq[0]), max_tokens=4))
    assert "401" in info.value.message and "MARAG_TEST_LOCAL_KEY" in info.value.hint
    monkeypatch.setenv("MARAG_TEST_LOCAL_KEY", llm.http_api_key)
    r = asyncio.run(remote.generate(prompt(nq[0]), output=ShortAnswer, max_tokens=128))
    check([r], nq[:1])


def test_answer_tokens_carry_the_models_log_probabilities(llm, nq):
    """Asked for them, llama.cpp gives each generated token's log-probability from the
    model's own distribution (before the JSON grammar), and the best other token's."""
    r = asyncio.run(llm.generate(prompt(nq[0]), output=ShortAnswer, max_tokens=64, logprobs=True))
    assert r.logprobs and "".join(t.token for t in r.logprobs) == r.text
    assert all(t.logprob <= 0.0 for t in r.logprobs) and any(t.runner_up is not None for t in r.logprobs)
    plain = asyncio.run(llm.generate(prompt(nq[0]), output=ShortAnswer, max_tokens=64))
    assert plain.logprobs is None  # only when asked
