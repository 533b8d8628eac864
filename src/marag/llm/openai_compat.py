"""Any OpenAI-compatible `/v1/chat/completions` endpoint: hosted APIs, vLLM, Ollama,
llama.cpp's server. Structured output uses `response_format: json_schema` (strict)."""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

import httpx

from marag.errors import LLMError
from marag.llm.chat import LOGPROB_ALTERNATIVES, ChatModel, Completion, openai_logprobs

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_RETRY_STATUS = {429, 500, 502, 503, 504}


class OpenAICompatLLM(ChatModel):
    kind = "openai"
    # the chat API's `logprobs` (OpenAI, vLLM, llama.cpp's server; a server without it
    # answers without them, and the caller's signal is then missing, not wrong)
    supports_logprobs = True

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 120.0,
        max_retries: int = 2,
        retry_backoff_s: float = 1.0,
        strict: bool = True,
        **kwargs: Any,
    ):
        super().__init__(model, **kwargs)
        # Servers that enforce strict schemas by grammar (vLLM, llama.cpp) honour maxLength
        # and friends; some hosted strict modes reject those keywords. strict=False makes
        # the schema a hint there, and our own validation + repair still apply.
        self.strict = strict
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.api_key_env = api_key_env  # the variable's name; the key is read per request
        self.timeout_s, self.max_retries, self.retry_backoff_s = timeout_s, max_retries, retry_backoff_s
        self._refuses_logprobs = False  # learned from the server's first refusal (see _complete)

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.api_key_env)
        return {"Authorization": f"Bearer {key}"} if key else {}  # local servers need none

    async def _complete(self, messages, json_schema, temperature, max_tokens, seed, logprobs: bool = False) -> Completion:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": temperature,
            "max_tokens": max_tokens,
        }
        if seed is not None:
            body["seed"] = seed
        logprobs = logprobs and not self._refuses_logprobs
        if logprobs:
            body.update(logprobs=True, top_logprobs=LOGPROB_ALTERNATIVES)
        if json_schema is not None:
            name = re.sub(r"[^a-zA-Z0-9_-]", "_", str(json_schema.get("title", "output")))[:64]
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": json_schema, "strict": self.strict},
            }
        try:
            data = await self._post("/chat/completions", body)
        except LLMError as exc:
            # some hosted models refuse the parameter (a 400 naming it): answer without
            # it, now and from then on; the signals it feeds are then missing, not wrong
            if not logprobs or "logprob" not in exc.message.lower():
                raise
            self._refuses_logprobs, logprobs = True, False
            body.pop("logprobs", None), body.pop("top_logprobs", None)
            data = await self._post("/chat/completions", body)
        try:
            choice = data["choices"][0]
            usage = data.get("usage") or {}
            return Completion(
                text=choice["message"].get("content") or "",
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                finish_reason=choice.get("finish_reason"),
                # servers that cache prompt prefixes (llama.cpp, vLLM, OpenAI) report it here
                reused_prompt_tokens=int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0),
                logprobs=openai_logprobs((choice.get("logprobs") or {}).get("content")) if logprobs else None,
            )
        except (KeyError, IndexError, TypeError, AttributeError, ValueError):
            raise LLMError(
                f"unexpected reply from {self.base_url}: {str(data)[:200]}",
                hint="check that --llm-base-url points at an OpenAI-compatible /v1 endpoint",
            ) from None

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        url = self.base_url + path
        # a client per call: an AsyncClient is tied to the event loop it was made in, and
        # callers may run several loops (one asyncio.run per CLI command)
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            for attempt in range(self.max_retries + 1):
                last = attempt == self.max_retries
                try:
                    resp = await client.post(url, json=body, headers=self._headers())
                except httpx.ConnectError as exc:
                    raise LLMError(
                        f"cannot connect to {url}: {exc}",
                        hint="start the server or fix --llm-base-url (e.g. http://127.0.0.1:8080/v1)",
                    ) from None
                except httpx.TransportError as exc:  # timeouts, dropped connections
                    if last:
                        raise LLMError(
                            f"no reply from {url} after {attempt + 1} attempts: {type(exc).__name__}",
                            hint="the server may be overloaded: raise timeout_s or lower --concurrency",
                        ) from None
                    await asyncio.sleep(self.retry_backoff_s * 2**attempt)
                    continue
                if resp.status_code in _RETRY_STATUS and not last:
                    await asyncio.sleep(self._retry_delay(resp, attempt))
                    continue
                return self._decode(resp, url)
        raise AssertionError("unreachable")

    def _retry_delay(self, resp: httpx.Response, attempt: int) -> float:
        try:  # a rate limiter's own advice, within reason
            return min(float(resp.headers["retry-after"]), 30.0)
        except (KeyError, ValueError):
            return self.retry_backoff_s * 2**attempt

    def _decode(self, resp: httpx.Response, url: str) -> Any:
        if resp.status_code in (401, 403):
            raise LLMError(
                f"{url} refused the request ({resp.status_code}): {resp.text[:200]}",
                hint=f"set the API key in ${self.api_key_env} (or choose the variable with api_key_env)",
            )
        if resp.status_code >= 400:
            raise LLMError(
                f"{url} answered {resp.status_code}: {resp.text[:300]}",
                hint="server errors persisted after retries; check the server log"
                if resp.status_code >= 500
                else "the server rejected the request: check the model name; if it rejects schema keywords "
                "(maxLength, maxItems, ...), use strict_schema=false",
            )
        try:
            return resp.json()
        except ValueError:
            raise LLMError(
                f"{url} returned something that is not JSON: {resp.text[:200]!r}",
                hint="check that --llm-base-url points at an OpenAI-compatible /v1 endpoint",
            ) from None
