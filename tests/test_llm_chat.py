"""ChatModel.generate: structured output, repair, usage, trace and cache (no model)."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel, Field

from marag.errors import LLMError, StructuredOutputError
from marag.llm import ChatModel, Completion, LLMCache, Message, ScriptedLLM, cache_key, parse_output
from marag.llm.chat import first_json_object
from marag.trace import Trace, activate, step


class Answer(BaseModel):
    answer: str = Field(max_length=100)
    confident: bool


USER = [Message(role="system", content="be brief"), Message(role="user", content="capital of France?")]


def run(coro):
    return asyncio.run(coro)


def test_plain_text_generation_counts_usage():
    llm = ScriptedLLM(["Paris is the capital"])
    r = run(llm.generate(USER))
    assert r.text == "Paris is the capital" and r.parsed is None
    assert r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 4
    assert r.usage.latency_s >= 0 and r.model == "scripted" and not r.cached


def test_structured_output_success_sends_schema():
    llm = ScriptedLLM([{"answer": "Paris", "confident": True}])
    r = run(llm.generate(USER, output=Answer))
    assert r.parsed == Answer(answer="Paris", confident=True)
    call = llm.calls[0]
    assert call.output_model is Answer
    assert call.json_schema["additionalProperties"] is False
    assert call.json_schema["properties"]["answer"]["maxLength"] == 100


def test_code_fenced_json_is_repaired_locally():
    fenced = 'Sure! Here it is:\n```json\n{"answer": "Paris", "confident": true}\n```\nAnything else?'
    llm = ScriptedLLM([fenced])
    r = run(llm.generate(USER, output=Answer))
    assert r.parsed.answer == "Paris"
    assert len(llm.calls) == 1  # no round trip to the model was needed


@pytest.mark.parametrize(
    "text",
    [
        'The answer: {"answer": "a {curly} one", "confident": false} -- done',
        '{"answer": "quote \\" and } brace", "confident": false}',
    ],
)
def test_first_json_object_in_prose(text):
    parsed, error = parse_output(text, Answer)
    assert parsed is not None and not error
    assert first_json_object("no object {here") is None


def test_invalid_then_valid_is_repaired_by_the_model():
    llm = ScriptedLLM(['{"answer": "Paris"}', {"answer": "Paris", "confident": True}])
    with activate(Trace()) as trace:
        r = run(llm.generate(USER, output=Answer))
    assert r.parsed.confident is True
    repair_msgs = llm.calls[1].messages
    assert repair_msgs[:2] == [m.model_dump() for m in USER]
    assert repair_msgs[2] == {"role": "assistant", "content": '{"answer": "Paris"}'}
    assert "confident" in repair_msgs[3]["content"]  # the validation error is quoted
    # usage is summed over both round trips
    assert r.usage.prompt_tokens == 5 + sum(len(m["content"].split()) for m in repair_msgs)
    assert r.usage.completion_tokens == 2 + 4
    (call,) = trace.llm_calls()
    assert call.repaired and call.error is None and call.schema_name == "Answer"


def test_still_invalid_after_repair_raises_with_raw_text():
    llm = ScriptedLLM(["I don't know", "still no JSON"])
    with activate(Trace()) as trace, pytest.raises(StructuredOutputError) as info:
        run(llm.generate(USER, output=Answer))
    assert info.value.raw == "still no JSON"
    assert "Answer" in info.value.message and info.value.hint
    (call,) = trace.llm_calls()
    assert call.repaired and call.error.startswith("StructuredOutputError")
    assert call.response == "still no JSON" and call.completion_tokens == 3 + 3


def test_truncated_output_hint_mentions_max_tokens():
    class Truncating(ChatModel):
        async def _complete(self, messages, json_schema, temperature, max_tokens, seed):
            return Completion('{"answer": "Par', 5, max_tokens, finish_reason="length")

    with pytest.raises(StructuredOutputError) as info:
        run(Truncating("t").generate(USER, output=Answer, max_tokens=7))
    assert "max_tokens=7" in info.value.hint


def test_trace_records_calls_inside_the_current_step():
    llm = ScriptedLLM(["one", "two words"])
    with activate(Trace()) as trace, step("answerer", question="q"):
        run(llm.generate(USER, temperature=0.0))
        run(llm.generate(USER))
    (s,) = trace.steps
    assert s.agent == "answerer"
    assert [c.response for c in s.llm_calls] == ["one", "two words"]
    assert s.llm_calls[0].messages[1] == {"role": "user", "content": "capital of France?"}
    assert trace.totals()["completion_tokens"] == 3


def test_backend_failure_is_traced_and_propagates():
    class Down(ChatModel):
        async def _complete(self, *args):
            raise LLMError("connection refused", hint="start it")

    with activate(Trace()) as trace, pytest.raises(LLMError):
        run(Down("down").generate(USER))
    (call,) = trace.llm_calls()
    assert call.error == "LLMError: connection refused"


def test_cache_hit_skips_backend(tmp_path):
    llm = ScriptedLLM([{"answer": "Paris", "confident": True}], cache=tmp_path)
    first = run(llm.generate(USER, output=Answer, seed=1))
    with activate(Trace()) as trace:
        second = run(llm.generate(USER, output=Answer, seed=1))  # the script is empty now
    assert second.cached and not first.cached
    assert second.parsed == first.parsed and second.usage.completion_tokens == first.usage.completion_tokens
    assert len(llm.calls) == 1
    assert next(trace.llm_calls()).cached
    assert len(list(tmp_path.rglob("*.json"))) == 1


def test_cache_skipped_for_sampling_unless_asked(tmp_path):
    llm = ScriptedLLM(["a", "b"], cache=tmp_path)
    assert run(llm.generate(USER, temperature=0.7)).text == "a"
    assert run(llm.generate(USER, temperature=0.7)).text == "b"
    sampled = ScriptedLLM(["c"], cache=tmp_path, cache_sampled=True)
    run(sampled.generate(USER, temperature=0.7))
    assert run(sampled.generate(USER, temperature=0.7)).cached


def test_cache_key_depends_on_request_only():
    msgs = [{"role": "user", "content": "q"}]
    base = cache_key("openai", "m", msgs, None, 0.0, 512, None)
    assert base == cache_key("openai", "m", [dict(msgs[0])], None, 0, 512, None)
    variants = [
        cache_key("llamacpp", "m", msgs, None, 0.0, 512, None),
        cache_key("openai", "m2", msgs, None, 0.0, 512, None),
        cache_key("openai", "m", [{"role": "user", "content": "q2"}], None, 0.0, 512, None),
        cache_key("openai", "m", msgs, {"type": "object"}, 0.0, 512, None),
        cache_key("openai", "m", msgs, None, 0.5, 512, None),
        cache_key("openai", "m", msgs, None, 0.0, 256, None),
        cache_key("openai", "m", msgs, None, 0.0, 512, 7),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_cache_never_stores_api_keys(tmp_path, monkeypatch):
    from marag.llm.openai_compat import OpenAICompatLLM

    class Canned(OpenAICompatLLM):
        async def _post(self, path, body):
            self.headers_seen = self._headers()
            return {"choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}

    keys = []
    for secret in ("sk-first-secret", "sk-second-secret"):
        monkeypatch.setenv("MARAG_TEST_KEY", secret)
        llm = Canned("gpt-x", base_url="http://127.0.0.1:9/v1", api_key_env="MARAG_TEST_KEY", cache=tmp_path / secret)
        run(llm.generate(USER))
        assert llm.headers_seen == {"Authorization": f"Bearer {secret}"}
        (entry,) = (tmp_path / secret).rglob("*.json")
        assert secret not in entry.read_text() and "Bearer" not in entry.read_text()
        keys.append(entry.stem)
    assert keys[0] == keys[1]  # the key does not depend on the API key


def test_damaged_cache_entry_is_a_miss(tmp_path):
    cache = LLMCache(tmp_path)
    cache.put("ab" + "0" * 62, {"text": "x"})
    path = next(tmp_path.rglob("*.json"))
    path.write_text("{not json")
    assert cache.get("ab" + "0" * 62) is None
    assert cache.get("cd" + "0" * 62) is None  # never written


def test_malformed_token_log_probabilities_keep_their_place_at_the_floor():
    from marag.llm.chat import LOGPROB_FLOOR, openai_logprobs

    tokens = openai_logprobs([
        {"token": '{"', "logprob": -0.1, "top_logprobs": [{"token": '{"', "logprob": -0.1}, {"token": "{", "logprob": -2.5}]},
        {"token": "answer", "logprob": None},
        {"token": '":', "logprob": float("-inf"), "top_logprobs": [{"token": "x", "logprob": float("nan")}]},
        "not an entry",
        {"token": 5, "logprob": 0.3},
    ])
    assert [t.token for t in tokens] == ['{"', "answer", '":', ""]  # every entry keeps its place
    assert tokens[0].runner_up == -2.5 and tokens[1].logprob == LOGPROB_FLOOR and tokens[2].logprob == LOGPROB_FLOOR
    assert tokens[2].runner_up == LOGPROB_FLOOR and tokens[3].logprob == 0.0  # (above 0 is clamped to 0)


def test_cached_replies_keep_their_log_probabilities(tmp_path):
    from pydantic import BaseModel

    from marag.llm import Message, ScriptedLLM

    class Out(BaseModel):
        answer: str

    llm = ScriptedLLM(rules=[("q", {"answer": "Tux"})], logprob=-0.5, cache=tmp_path)
    ask = lambda **kw: asyncio.run(llm.generate([Message(role="user", content="q")], output=Out, **kw))  # noqa: E731
    plain = ask()  # cached without them
    assert plain.logprobs is None and len(llm.calls) == 1
    fresh = ask(logprobs=True)  # an entry without them is a miss for a call that wants them
    assert len(llm.calls) == 2 and fresh.logprobs and not fresh.cached
    again = ask(logprobs=True)
    assert again.cached and len(llm.calls) == 2 and [t.logprob for t in again.logprobs] == [t.logprob for t in fresh.logprobs]
