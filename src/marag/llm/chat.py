"""`ChatModel`: everything every backend shares, around one backend method.

A backend implements `_complete` (messages in, text and token counts out, optionally
constrained to a JSON schema). `generate` adds the rest of the `LLM` port contract:
the output model's schema, validation, local clean-ups, one repair round trip, usage
accounting, the trace record and the optional disk cache.
"""

from __future__ import annotations

import contextvars
import json
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from marag.errors import MaragError, StructuredOutputError
from marag.llm.base import LLMResponse, Message, Usage
from marag.llm.budget import current_budget
from marag.llm.cache import LLMCache, cache_key
from marag.llm.schema import output_schema
from marag.trace import LLMCall, TokenLogprob, record_llm_call


@dataclass
class Completion:
    """What a backend returns for one round trip."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None  # "length" means max_tokens cut the reply
    reused_prompt_tokens: int = 0  # prompt prefix the server had cached (not evaluated)
    logprobs: list[TokenLogprob] | None = None  # per token, when asked for and given


# The output model of the generate() call in progress (a context variable, so concurrent
# questions never see each other's). Only backends that fabricate replies need it.
_output_model: contextvars.ContextVar[type[BaseModel] | None] = contextvars.ContextVar(
    "marag_output_model", default=None
)


def current_output_model() -> type[BaseModel] | None:
    return _output_model.get()


# The repair turn names the problem and the expected shape in one line (`outline`),
# not the whole schema: the backend constrains decoding to the schema anyway, and
# resending it would cost hundreds of prompt tokens per repair.
REPAIR_PROMPT = (
    "Your last reply could not be read as the requested JSON ({error}). "
    "Reply again with only a JSON object of this shape: {outline}"
)


class ChatModel(ABC):
    """Base class of the built-in backends; implements the `LLM` protocol."""

    kind: ClassVar[str] = "chat"  # backend name; part of the cache key
    inline_refs: ClassVar[bool] = True  # send schemas without $defs references
    # whether `_complete(..., logprobs=True)` returns each token's log-probability (a
    # capability flag: callers ask only backends that have it)
    supports_logprobs: ClassVar[bool] = False

    def __init__(self, model: str, cache: LLMCache | str | Path | None = None, cache_sampled: bool = False):
        self.model = model
        self.cache = LLMCache(cache) if isinstance(cache, (str, Path)) else cache
        self.cache_sampled = cache_sampled

    def call_model(self) -> str:
        """The model that answers the call about to be made, as traces and the cache name
        it (a backend that applies an adapter to some calls only names it on those)."""
        return self.model

    def cache_kind(self) -> str:
        """The backend part of the cache key: its name, plus whatever else of its own
        settings decides the replies (a subclass says)."""
        return self.kind

    @abstractmethod
    async def _complete(
        self,
        messages: list[dict[str, str]],
        json_schema: dict[str, Any] | None,
        temperature: float,
        max_tokens: int,
        seed: int | None,
        logprobs: bool = False,
    ) -> Completion:
        """One round trip to the model. Raise `LLMError` (with a hint) when it fails.
        `logprobs` is only ever True for a backend with `supports_logprobs`."""

    async def generate(
        self,
        messages: Sequence[Message | dict[str, str]],
        output: type[BaseModel] | None = None,
        temperature: float = 0.0,
        max_tokens: int = 512,
        seed: int | None = None,
        logprobs: bool = False,
    ) -> LLMResponse:
        msgs = [_as_dict(m) for m in messages]
        want = _Request(temperature, max_tokens, seed, logprobs and self.supports_logprobs)
        budget = current_budget()
        if budget is None:
            return await self._generate(msgs, output, want, None)
        # a spent budget skips the call: no round trip, no record
        with budget.reserve(sum(len(m["content"]) for m in msgs) // 4 + max_tokens):
            return await self._generate(msgs, output, want, budget)

    async def _generate(self, msgs, output, want: "_Request", budget) -> LLMResponse:
        schema = output_schema(output, inline=self.inline_refs) if output is not None else None
        key, model = None, self.call_model()
        # (whether log-probabilities were asked for is not part of the key: they describe
        # the same reply; an entry keeps them when they were given, and one without them
        # is a miss for a call that wants them)
        if self.cache is not None and (want.temperature <= 0 or self.cache_sampled):
            key = cache_key(self.cache_kind(), model, msgs, schema, want.temperature, want.max_tokens, want.seed)
        rec = LLMCall(
            model=model, messages=msgs, response="", schema_name=output.__name__ if output else None, started=round(time.time(), 4)
        )
        t0 = time.perf_counter()
        token = _output_model.set(output)
        try:
            parsed = await self._answer(rec, key, msgs, output, schema, want)
        except BaseException as exc:  # cancellations (timeouts, Ctrl-C) are recorded too
            rec.error = f"{type(exc).__name__}: {exc.message if isinstance(exc, MaragError) else exc}"
            raise
        finally:
            _output_model.reset(token)
            rec.latency_s = round(time.perf_counter() - t0, 4)
            record_llm_call(rec)  # failed and cached calls are part of the record too
            if budget is not None:
                spent = (0, 0) if rec.cached else (rec.prompt_tokens, rec.completion_tokens)
                budget.charge(*spent)
        usage = Usage(prompt_tokens=rec.prompt_tokens, completion_tokens=rec.completion_tokens, latency_s=rec.latency_s)
        return LLMResponse(text=rec.response, parsed=parsed, usage=usage, model=model, cached=rec.cached, logprobs=rec.logprobs)

    async def _answer(self, rec: LLMCall, key: str | None, msgs, output, schema, want: "_Request") -> Any:
        """The parsed output (None without an output model). Fills `rec` as it goes so
        that a failure still leaves an accurate trace record."""
        hit = self.cache.get(key) if key is not None else None
        if want.logprobs and isinstance(hit, dict) and not isinstance(hit.get("logprobs"), list):
            hit = None  # an entry written without them: ask again (the new entry keeps them)
        if isinstance(hit, dict) and isinstance(hit.get("text"), str):
            parsed, _ = parse_output(hit["text"], output) if output else (None, "")
            if output is None or parsed is not None:
                # tokens are those the answer cost when it was made; `cached` tells
                # cost accounting that nothing was spent this time
                rec.response, rec.cached, rec.repaired = hit["text"], True, hit.get("repaired", False)
                rec.prompt_tokens, rec.completion_tokens = hit.get("prompt_tokens", 0), hit.get("completion_tokens", 0)
                rec.logprobs = _cached_logprobs(hit) if want.logprobs else None
                return parsed

        comp = await self._round_trip(rec, msgs, schema, want)
        parsed = None
        if output is not None:
            parsed, error = parse_output(comp.text, output)
            if parsed is None:
                budget = current_budget()
                if budget is not None and not budget.room(rec.prompt_tokens + rec.completion_tokens):
                    raise StructuredOutputError(
                        f"{self.model} gave no valid {output.__name__}, and the question's token budget has no room for a repair: {error}",
                        raw=comp.text,
                        hint="raise max_tokens in the strategy's config (--set)",
                    )
                rec.repaired = True
                retry = msgs + [
                    {"role": "assistant", "content": comp.text},
                    {"role": "user", "content": REPAIR_PROMPT.format(error=error, outline=outline(schema))},
                ]
                comp = await self._round_trip(rec, retry, schema, want)
                parsed, error = parse_output(comp.text, output)
                if parsed is None:
                    raise StructuredOutputError(
                        f"{self.model} gave no valid {output.__name__} even after a repair attempt: {error}",
                        raw=comp.text,
                        hint=_failure_hint(comp, want.max_tokens),
                    )
        if key is not None:
            self.cache.put(
                key,
                {
                    "text": rec.response,
                    "prompt_tokens": rec.prompt_tokens,
                    "completion_tokens": rec.completion_tokens,
                    "repaired": rec.repaired,
                    **({"logprobs": [t.model_dump() for t in rec.logprobs]} if rec.logprobs is not None else {}),
                },
            )
        return parsed

    async def _round_trip(self, rec: LLMCall, msgs, schema, want: "_Request") -> Completion:
        extra = {"logprobs": True} if want.logprobs else {}  # (backends without the capability need no such argument)
        comp = await self._complete(msgs, schema, want.temperature, want.max_tokens, want.seed, **extra)
        rec.response = comp.text
        rec.logprobs = comp.logprobs  # the last round trip's: the reply that stands
        rec.prompt_tokens += comp.prompt_tokens
        rec.completion_tokens += comp.completion_tokens
        rec.reused_prompt_tokens += comp.reused_prompt_tokens
        return comp


@dataclass(frozen=True)
class _Request:
    """How one `generate` call asks: its sampling settings, and whether it wants each
    token's log-probability (only ever True for a backend that gives them)."""

    temperature: float
    max_tokens: int
    seed: int | None
    logprobs: bool = False


LOGPROB_ALTERNATIVES = 2  # top tokens asked for per position: the chosen one and the best other


LOGPROB_FLOOR = -30.0  # what a missing, infinite or absurd log-probability counts as: "very unsure"


def _logprob(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # (NaN)
        return LOGPROB_FLOOR
    return min(0.0, max(LOGPROB_FLOOR, float(value)))


def openai_logprobs(content: Any) -> list[TokenLogprob]:
    """Tokens in the OpenAI chat format (`choices[].logprobs.content`: token, logprob,
    top_logprobs), which llama.cpp's server speaks too, as `TokenLogprob`s. A server's
    reply is not ours to trust: every entry keeps its place (so the tokens still spell
    the reply), and a value that is missing, infinite or not a number counts as the
    floor, -30 (very unsure), as do values below it."""
    out: list[TokenLogprob] = []
    for entry in content if isinstance(content, list) else []:
        if not isinstance(entry, dict):
            continue
        token = entry.get("token")
        token = token if isinstance(token, str) else ""
        top = entry.get("top_logprobs")
        others = [_logprob(t.get("logprob")) for t in (top if isinstance(top, list) else []) if isinstance(t, dict) and t.get("token") != token]
        out.append(TokenLogprob(token=token, logprob=_logprob(entry.get("logprob")), runner_up=max(others) if others else None))
    return out


def _cached_logprobs(entry: dict[str, Any]) -> list[TokenLogprob] | None:
    """The log-probabilities a cache entry kept (entries written without them, or
    damaged, have none: the reply still stands)."""
    raw = entry.get("logprobs")
    if not isinstance(raw, list):
        return None
    try:
        return [TokenLogprob.model_validate(t) for t in raw]
    except ValidationError:
        return None


# -- parsing -------------------------------------------------------------------------

_FENCE = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)```", re.DOTALL)


def parse_output(text: str, output: type[BaseModel]) -> tuple[BaseModel | None, str]:
    """Validate `text` as `output`, trying cheap clean-ups (code fences, prose around
    the object) before giving up. Returns (object, "") or (None, what went wrong)."""
    error = "the reply is empty"
    for candidate in _candidates(text):
        try:
            return output.model_validate_json(candidate), ""
        except ValidationError as exc:
            error = _describe(exc)  # the most cleaned-up candidate's error is the most useful
    return None, error


def _candidates(text: str) -> list[str]:
    found = [text.strip()]
    if fence := _FENCE.search(text):
        found.append(fence.group(1).strip())
    if block := first_json_object(text):
        found.append(block)
    return [c for i, c in enumerate(found) if c and c not in found[:i]]


def first_json_object(text: str) -> str | None:
    """The first balanced `{...}` in `text` (braces inside strings don't count)."""
    start = text.find("{")
    if start < 0:
        return None
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return None


def _describe(exc: ValidationError, limit: int = 500) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        parts.append(f"{loc}: {err.get('msg', '')}")
    return "; ".join(parts)[:limit]


def _failure_hint(comp: Completion, max_tokens: int) -> str:
    if comp.finish_reason == "length":
        return (
            f"the reply was cut off at max_tokens={max_tokens}: raise max_tokens or bound the "
            "output model's strings and lists (Field(max_length=...))"
        )
    return "agents fall back to their default here; a larger model or a simpler output model helps"


def outline(schema: dict[str, Any] | None) -> str:
    """A one-line sketch of the JSON a schema asks for, e.g.
    `{"agent": "planner"|"searcher", "input": string(<=200), "ok": true|false}`."""
    if not schema:
        return "{}"

    def shape(node: dict[str, Any]) -> str:
        if "enum" in node:
            return "|".join(json.dumps(v, ensure_ascii=False) for v in node["enum"])
        if "const" in node:
            return json.dumps(node["const"], ensure_ascii=False)
        for key in ("anyOf", "oneOf"):
            if key in node:
                return "|".join(shape(o) for o in node[key])
        kind = node.get("type")
        if kind == "object" or "properties" in node:
            return "{" + ", ".join(f"{json.dumps(k)}: {shape(v)}" for k, v in node.get("properties", {}).items()) + "}"
        if kind == "array":
            inner = shape(node.get("items", {}))
            return f"[{inner}, ...]" + (f"(<={node['maxItems']})" if "maxItems" in node else "")
        if kind == "string":
            return f"string(<={node['maxLength']})" if "maxLength" in node else "string"
        if kind == "boolean":
            return "true|false"
        return str(kind or "value")

    return shape(schema)


def _as_dict(m: Message | dict[str, str]) -> dict[str, str]:
    if isinstance(m, Message):
        return {"role": m.role, "content": m.content}
    return {"role": m["role"], "content": m["content"]}
