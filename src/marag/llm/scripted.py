"""`ScriptedLLM`: a deterministic stand-in for a model, for testing control flow.

Replies come from (checked in this order for every round trip):
1. `rules`: `(match, reply)` pairs; `match` is a substring of, or a predicate on, the
   last user message. Rules are reusable.
2. `responses`: a queue consumed in order, one per round trip.
3. `fn(messages, output_model) -> reply`: computes a reply.
A reply is a string (sent as is), a dict or list (sent as JSON) or a pydantic object.
Structured replies go through the same validation and repair path as a real model's, so
a script `["not json", {"answer": "x"}]` exercises the repair round trip.

`logprob`: a number, or a function of the reply's text giving one, makes it a backend
with `supports_logprobs`: every token of a reply (its words, spaces and punctuation,
split by `scripted_tokens`) gets that log-probability, so a test can script a sure or
an unsure reader.

    llm = ScriptedLLM(["not json", {"answer": "Paris"}])
    r = asyncio.run(llm.generate([Message(role="user", content="capital?")], output=Answer))
    assert r.parsed.answer == "Paris" and len(llm.calls) == 2
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from marag.errors import MaragError
from marag.llm.chat import ChatModel, Completion, current_output_model
from marag.trace import TokenLogprob

Reply = str | dict | list | BaseModel
Match = str | Callable[[str], bool]


class ScriptExhausted(MaragError):
    """The script has no reply for a call. Deliberately not an `LLMError`, so agents'
    fallbacks don't hide a test that is missing replies."""


@dataclass
class ScriptedCall:
    messages: list[dict[str, str]]
    json_schema: dict[str, Any] | None
    output_model: type[BaseModel] | None
    response: str


class ScriptedLLM(ChatModel):
    kind = "scripted"

    def __init__(
        self,
        responses: Iterable[Reply] = (),
        rules: Iterable[tuple[Match, Reply]] = (),
        fn: Callable[[list[dict[str, str]], type[BaseModel] | None], Reply] | None = None,
        model: str = "scripted",
        logprob: float | Callable[[str], float] | None = None,
        record: bool = True,
        pause: bool = False,
        **kwargs: Any,
    ):
        super().__init__(model, **kwargs)
        self.responses: deque[Reply] = deque(responses)
        self.rules = list(rules)
        self.fn = fn
        self.logprob = logprob
        self.supports_logprobs = logprob is not None  # (an instance's capability: scripted per test)
        # every round trip, for a test to read; `record=False` keeps none: one made by
        # `make_llm` (`marag serve --llm scripted`, where nothing reads them) grew by its
        # prompts with every call, ~3 KB an answer (benchmarks/soak.py)
        self.record = record
        self.calls: list[ScriptedCall] = []
        self.n_calls = 0
        # `pause`: each call lets the event loop run other tasks once, as a real backend
        # does while it waits for its model. Without it a call never suspends, so an
        # evaluation's answers all run in one turn of the loop: `marag serve --llm
        # scripted` answered nothing else while one ran (seconds; benchmarks/soak.py).
        # Off for scripts: the order of concurrent questions' calls stays as written.
        self.pause = pause

    async def _complete(self, messages, json_schema, temperature, max_tokens, seed, logprobs: bool = False) -> Completion:
        if self.pause:
            await asyncio.sleep(0)
        output = current_output_model()
        last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        reply = self._next_reply(messages, output, last_user)
        text = _to_text(reply)
        self.n_calls += 1
        if self.record:
            self.calls.append(ScriptedCall(messages, json_schema, output, text))
        return Completion(
            text=text,
            prompt_tokens=sum(len(m["content"].split()) for m in messages),
            completion_tokens=len(text.split()),
            finish_reason="stop",
            logprobs=self._logprobs(text) if logprobs else None,
        )

    def _logprobs(self, text: str) -> list[TokenLogprob] | None:
        if self.logprob is None:
            return None
        value = float(self.logprob(text) if callable(self.logprob) else self.logprob)
        return [TokenLogprob(token=t, logprob=value, runner_up=None) for t in scripted_tokens(text)]

    def _next_reply(self, messages, output, last_user: str) -> Reply:
        for match, reply in self.rules:
            if (match in last_user) if isinstance(match, str) else match(last_user):
                return reply
        if self.responses:
            return self.responses.popleft()
        if self.fn is not None:
            return self.fn(messages, output)
        raise ScriptExhausted(
            f"scripted LLM has no reply for call #{self.n_calls + 1} (last user message: {last_user[:200]!r})",
            hint="add a response, a rule matching this message, or an fn to the ScriptedLLM",
        )


def scripted_tokens(text: str) -> list[str]:
    """A reply cut into tokens as a scripted model writes them: runs of word
    characters, runs of spaces and single other characters (together, the text)."""
    return re.findall(r"\w+|\s+|[^\w\s]", text)


def placeholder_reply(messages: list[dict[str, str]], output: type[BaseModel] | None) -> Reply:
    """A minimal valid-looking reply: lets `--llm scripted` run a whole strategy with no
    model (smoke tests of wiring, traces and reports)."""
    if output is None:
        return "scripted reply"
    from marag.llm.schema import output_schema

    return _placeholder(output_schema(output))


def _placeholder(schema: dict[str, Any]) -> Any:
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = [o for o in schema.get(key, []) if o.get("type") != "null"]
        if options:
            return _placeholder(options[0])
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return {k: _placeholder(v) for k, v in schema.get("properties", {}).items()}
    if kind == "array":
        return [_placeholder(schema["items"])] * schema.get("minItems", 0) if "items" in schema else []
    if kind == "string":
        return "scripted"[: schema.get("maxLength", 8)].ljust(schema.get("minLength", 0), "x")
    return {"integer": schema.get("minimum", 0), "number": schema.get("minimum", 0.0), "boolean": False}.get(kind)


def _to_text(reply: Reply) -> str:
    if isinstance(reply, BaseModel):
        return reply.model_dump_json()
    if isinstance(reply, (dict, list)):
        return json.dumps(reply, ensure_ascii=False)
    return str(reply)
