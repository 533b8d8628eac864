"""In-process llama.cpp (through the `xllamacpp` package): the embedded default backend.

The server object runs llama.cpp's own scheduler in a background thread with
`n_parallel` slots and continuous batching. Its request call blocks (without holding
the GIL), so each request runs in a worker thread: concurrent questions fill the slots
and share every forward pass, which is where CPU throughput comes from.

The model: a GGUF path, or a name from marag's catalogue (`marag.llm.models`), pulled
and sha256-checked once; none means the catalogue's default (Qwen2.5-Coder-1.5B-Instruct).

Context size: `n_ctx` is the whole KV cache, split evenly among the slots, so every
single request (prompt + reply) must fit in `n_ctx // n_parallel` tokens. By default each
slot gets the catalogue entry's `ctx_per_slot` (8192 for the Qwen models, 4096 for
SmolLM2), or for another file its GGUF's training context up to 8192.

Prefix reuse: each slot keeps the tokens of its last prompt, and llama.cpp hands a new
request to the idle slot whose cached prompt shares the longest prefix with it (above
`slot_prompt_similarity`), evaluating only the rest; prompts that start with what is
stable (agents lay them out that way) cost only their new tail. The reused part is
recorded per call (`LLMCall.reused_prompt_tokens`). There are 8 slots by default for the
4 questions usually in flight: with as many slots as questions, an agent's roles took
each other's slots (UniRAG's planner found its last prompt in a slot for 63% of its prompt
tokens, its reflector 16%), and every lost prefix is evaluated again. An idle slot costs
memory (its share of the KV cache: ~0.9 GB for 4 slots of 8,192 tokens with the 1.5B),
not time. A prompt pushed out of its slot is dropped, not kept in host memory as
llama.cpp's server does by default (`prompt_cache_mb`, `PROMPT_CACHE_MB`): that cache
grew a long-running server by gigabytes for a few percent of prompt tokens.

Structured output: the schema goes to llama.cpp's llguidance engine as a grammar, with
one of three layouts (`json_layout`; by default the catalogue entry's, "spaced" for a
file of your own):
- "spaced": `{"a": 1, "b": [2, 3]}`, one space after each colon and comma and no other
  whitespace, the layout most models write unprompted. The default for the Qwen models:
  with "compact" the 1.5B wrote sentences where it otherwise gives a span (vanilla_rag,
  NQ 101-140: F1 .423 compact, .739 with any whitespace allowed; on the demo it answered
  the Curie question with `:[` in every run, and right with either of the other two).
- "compact": no whitespace at all. A model that pretty-prints pays a token for every
  newline and indent (SmolLM2's replies shrink by about a third): SmolLM2's default.
- "free": any whitespace (the schema goes as llama.cpp's `response_format`).

LoRA adapters per role: `lora=PATH` loads a llama.cpp adapter GGUF (e.g. from `marag
train finetune`) once, and each request says whether it applies (llama.cpp's
per-request adapter scale, 1 or 0; a request at scale 0 is the base model's, and one
server serves both). It applies to the calls of the roles in `lora_roles`: qualified
role names (`mrag.planner`: the strategy running and the agent name of the trace step
the call is made in, `marag.trace.current_role`), which are the names training exports
by; a bare agent name (`planner`, from before roles were qualified, or an older
adapter.json) still matches that agent in every strategy; `None` means the roles the adapter was trained for (`adapter.json` beside it, written
by `marag train finetune`), or every call for an adapter without one; `["*"]` every
call. A call that carried the adapter is recorded (and cached) under the model name
`base.gguf+adapter.gguf`, one on the base weights under `base.gguf`.

`deterministic=True` gives the same reply to the same request in every run: one slot
(parallel slots batch requests together, and the batch changes the arithmetic) and no
prompt cache (a reused prefix was computed in a different batch). It costs throughput.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from marag.errors import ContextOverflowError, LLMError
from marag.llm.chat import LOGPROB_ALTERNATIVES, ChatModel, Completion, openai_logprobs
from marag.trace import current_role, current_step

# llama.cpp's server keeps the states of prompts that left their slots in host memory
# and restores one when a later prompt starts the same way. Its own bound is 8,192 MB,
# and a long-running process grows toward it (~28 KB a token with the 1.5B, ~40 MB a
# prompt): the default-model soak's server rose 3.8 -> 4.4 GB in 5 minutes and kept
# rising. What it saves is small beside the slots' own prefix reuse: UniRAG on 12
# questions (hotpotqa_train100 21-32, 1.5B, 4 in flight) evaluated 4.0% fewer prompt
# tokens with it (18,813 against 19,588; ~3% of a question's machine time, same F1) and
# peaked 0.73 GB higher (4.92 against 4.18 GB). Off by default; `prompt_cache_mb` buys
# it back.
PROMPT_CACHE_MB = 0


def adapter_file(lora: str | Path) -> Path:
    """The adapter GGUF a user named: the file itself, or a directory `marag train
    finetune` wrote (its `adapter.gguf`)."""
    path = Path(lora).expanduser()
    return path / "adapter.gguf" if path.is_dir() else path


def adapter_description(lora: str | Path) -> dict[str, Any]:
    """The `adapter.json` beside an adapter ({} when there is none)."""
    sidecar = adapter_file(lora).with_suffix(".json")
    if not sidecar.is_file():
        return {}
    try:
        data = json.loads(sidecar.read_text(encoding="utf-8"))
    except ValueError:
        raise LLMError(f"unreadable adapter description {sidecar}", hint="rewrite it (marag train finetune) or delete it") from None
    return data if isinstance(data, dict) else {}


def check_adapter_base(lora: str | Path, model_file: Path) -> None:
    """Refuse an adapter trained on another base model: its low-rank weights are deltas
    of that model's matrices, and on another model's they give fluent nonsense, not an error."""
    described = adapter_description(lora)
    made_for = described.get("base_file") or Path(str(described.get("base_model", ""))).name
    if made_for and made_for != model_file.name:
        name = described.get("model") or made_for
        raise LLMError(f"the adapter {adapter_file(lora)} was trained for {name}, not {model_file.name}",
                       hint=f"run it with --llm {name}, or train one for this model (marag train finetune --model ...)")  # fmt: skip


def adapter_roles(lora: str | Path) -> list[str] | None:
    """The roles an adapter is for, from the `adapter.json` that `marag train finetune`
    writes beside `adapter.gguf` (None when there is none)."""
    roles = adapter_description(lora).get("roles")
    return [str(r) for r in roles] if isinstance(roles, list) else None


def resolve_lora_roles(lora: str | Path | None, given: list[str] | None) -> list[str] | None:
    """The roles an adapter applies to: `given` when set (`["*"]`: every call), else the
    adapter's own roles (`adapter_roles`), else None (every call)."""
    if lora is None:
        return None
    if given:
        return ["*"] if "*" in given or "all" in given else list(given)
    return adapter_roles(lora)


class LlamaCppLLM(ChatModel):
    kind = "llamacpp"
    # llama.cpp reports each token's probability from the model's own distribution
    # (before the JSON grammar narrows it), which is what a reader's confidence is
    supports_logprobs = True

    def __init__(
        self,
        model_path: str | Path | None = None,  # a GGUF file or a catalogue name; None: the default model
        threads: int = 2,
        n_ctx: int | None = None,  # the whole KV cache; None: the model's context per slot x n_parallel
        n_parallel: int = 8,  # slots; twice the questions usually in flight (module docstring)
        verbosity: int = -1,  # llama.cpp's own log on stderr: -1 silent, 3 chatty
        deterministic: bool = False,
        slot_prompt_similarity: float = 0.1,
        json_layout: str | None = None,  # "spaced", "compact" or "free" (module docstring); None: the model's
        lora: str | Path | None = None,  # a llama.cpp LoRA adapter GGUF (e.g. from `marag train finetune`)
        lora_roles: list[str] | None = None,  # roles whose calls carry it (module docstring)
        prompt_cache_mb: int | None = None,  # host-memory prompt cache (module docstring); 0: none; None: PROMPT_CACHE_MB
        **kwargs: Any,
    ):
        from marag.llm.models import ctx_per_slot, resolve_model_file

        path = resolve_model_file(model_path)
        super().__init__(path.name, **kwargs)  # the file name, so caches survive a move
        self.model_path = path
        self.deterministic = deterministic
        self.json_layout = json_layout or default_json_layout(path)
        if self.json_layout not in JSON_LAYOUTS:
            raise LLMError(f"unknown JSON layout {self.json_layout!r}", hint=f"choose one of: {', '.join(JSON_LAYOUTS)}")
        self.lora = adapter_file(lora) if lora else None
        if self.lora is not None and not self.lora.is_file():
            raise LLMError(f"LoRA adapter not found: {self.lora}", hint="give the adapter.gguf (or its folder) that `marag train finetune` wrote")
        if self.lora is not None:
            check_adapter_base(self.lora, path)
        self.base_model = path.name
        self.lora_roles: frozenset[str] | None = None  # None: every call
        if self.lora is not None:
            self.model = f"{path.name}+{self.lora.name}"  # a different model: caches and reports tell them apart
            roles = resolve_lora_roles(self.lora, lora_roles)
            self.lora_roles = None if roles is None or "*" in roles else frozenset(roles)
        n_parallel = 1 if deterministic else n_parallel
        n_ctx = n_ctx or ctx_per_slot(path) * n_parallel
        self.threads, self.n_ctx, self.n_parallel, self.verbosity = threads, n_ctx, n_parallel, verbosity
        self.slot_prompt_similarity = slot_prompt_similarity
        prompt_cache_mb = PROMPT_CACHE_MB if prompt_cache_mb is None else prompt_cache_mb
        if prompt_cache_mb < 0:
            raise LLMError(f"prompt_cache_mb must be 0 or more, not {prompt_cache_mb}", hint="0 turns the host-memory prompt cache off")
        self.prompt_cache_mb = prompt_cache_mb
        self._server: Any = None
        self._lock = threading.Lock()
        # llama.cpp also serves HTTP on 127.0.0.1 (random port); without a key any local
        # process or web page could use it. In-process requests don't need the key.
        self.http_api_key = secrets.token_urlsafe(24)
        # one worker per slot (threads start on demand): extra requests wait here
        # instead of occupying threads of asyncio's shared default pool
        self._executor = ThreadPoolExecutor(n_parallel, thread_name_prefix="marag-llamacpp")

    def adapter_applies(self) -> bool:
        """Whether the call made now (in the current trace step) carries the adapter."""
        if self.lora is None:
            return False
        if self.lora_roles is None:
            return True
        s = current_step()  # its qualified role, or (a bare name given) its agent in any strategy
        return s is not None and (current_role() in self.lora_roles or s.agent in self.lora_roles)

    def cache_kind(self) -> str:
        # the layout decides the replies; "compact" keeps the key replies were cached
        # under before layouts were a setting
        return self.kind if self.json_layout == "compact" else f"{self.kind}/{self.json_layout}"

    def call_model(self) -> str:
        return self.model if self.adapter_applies() else self.base_model

    @property
    def ctx_per_slot(self) -> int:
        return self.n_ctx // self.n_parallel

    def server(self) -> Any:
        """The xllamacpp server, loaded on first use (loading takes about a second)."""
        with self._lock:
            if self._server is None:
                self._server = self._start()
            return self._server

    def _start(self) -> Any:
        try:
            import xllamacpp
        except ImportError as exc:
            raise LLMError(f"cannot import xllamacpp: {exc}", hint="pip install xllamacpp") from None
        p = xllamacpp.CommonParams()
        p.model.path = str(self.model_path)
        p.n_ctx = self.n_ctx
        p.n_parallel = self.n_parallel
        p.cpuparams.n_threads = self.threads
        p.cpuparams_batch.n_threads = self.threads
        p.verbosity = self.verbosity
        p.slot_prompt_similarity = self.slot_prompt_similarity
        if self.lora is not None:
            adapter = xllamacpp.CommonAdapterLoraInfo()
            adapter.path, adapter.scale = str(self.lora), 1.0
            p.lora_adapters = [adapter]
        p.cache_prompt = not self.deterministic
        p.cache_ram_mib = 0 if self.deterministic else self.prompt_cache_mb
        p.api_keys = [self.http_api_key]
        try:
            server = xllamacpp.Server(p)
        except RuntimeError as exc:
            raise LLMError(
                f"llama.cpp could not load {self.model_path}: {exc}",
                hint="check that the file is a GGUF model this llama.cpp supports and that n_ctx fits in memory",
            ) from None
        # The constructor returns before the scheduler loop runs, and a server destroyed
        # in that window never stops (its destructor waits forever). One tiny request
        # returns only once the loop is up, so close() and interpreter exit are safe.
        server.handle_chat_completions({"messages": [{"role": "user", "content": "ok"}], "max_tokens": 1})
        return server

    @property
    def http_base_url(self) -> str | None:
        """The OpenAI-compatible endpoint the in-process server also listens on; requests
        need `Authorization: Bearer <http_api_key>`."""
        address = self.server().listening_address
        return f"{address}/v1" if address else None

    def close(self) -> None:
        """Stop the server. xllamacpp has no stop call: dropping the last reference runs
        its destructor, which ends the scheduler thread. The next request restarts it."""
        with self._lock:
            self._server = None

    async def _complete(self, messages, json_schema, temperature, max_tokens, seed, logprobs: bool = False) -> Completion:
        request: dict[str, Any] = {
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": True,  # streamed only so that a cancelled request can stop early
            "stream_options": {"include_usage": True},
        }
        if seed is not None:
            request["seed"] = seed
        if logprobs:
            request.update(logprobs=True, top_logprobs=LOGPROB_ALTERNATIVES)
        if self.lora is not None:  # adapter 0 at full scale, or off (the base model)
            request["lora"] = [{"id": 0, "scale": 1.0 if self.adapter_applies() else 0.0}]
        if self.deterministic:
            request["cache_prompt"] = False
        if json_schema is not None and JSON_LAYOUTS[self.json_layout] is not None:
            request["grammar"] = json_grammar(json_schema, self.json_layout)
        elif json_schema is not None:
            request["response_format"] = {"type": "json_object", "schema": json_schema}
        stop = threading.Event()
        future = asyncio.get_running_loop().run_in_executor(self._executor, self._request, request, stop)
        try:
            chunks = await future
        except asyncio.CancelledError:
            # a blocked worker thread cannot be cancelled, but llama.cpp drops the request
            # at its next token; without this, Ctrl-C (or a timeout) would wait for the
            # whole reply, and interpreter exit would hang on the worker thread
            stop.set()
            raise
        return self._completion(chunks)

    def _request(self, request: dict[str, Any], stop: threading.Event) -> list[dict[str, Any]]:
        chunks: list[dict[str, Any]] = []

        def on_chunk(chunk: dict[str, Any]) -> bool:  # returning True ends the request
            chunks.append(chunk)
            return stop.is_set()

        try:
            self.server().handle_chat_completions(request, on_chunk)
        except (ValueError, RuntimeError) as exc:
            raise LLMError(
                f"llama.cpp rejected the request: {exc}", hint="this is likely a bug in the caller"
            ) from None
        return chunks

    def _completion(self, chunks: list[dict[str, Any]]) -> Completion:
        text, finish, usage, tokens = [], None, {}, []
        for chunk in chunks:
            if "error" in chunk or "choices" not in chunk:
                error = chunk.get("error", chunk)
                raise self._error(error if isinstance(error, dict) else {"message": str(error)})
            for choice in chunk["choices"]:
                text.append(choice.get("delta", {}).get("content") or "")
                finish = choice.get("finish_reason") or finish
                tokens += (choice.get("logprobs") or {}).get("content") or []
            usage = chunk.get("usage") or usage
        return Completion(
            text="".join(text),
            prompt_tokens=usage.get("prompt_tokens", 0),
            completion_tokens=usage.get("completion_tokens", 0),
            finish_reason=finish,
            reused_prompt_tokens=(usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
            logprobs=openai_logprobs(tokens) if tokens else None,
        )

    def _error(self, error: dict[str, Any]) -> LLMError:
        if error.get("type") == "exceed_context_size_error":
            return ContextOverflowError(
                f"prompt of {error.get('n_prompt_tokens', '?')} tokens does not fit the context of one slot "
                f"({self.ctx_per_slot} tokens = n_ctx {self.n_ctx} / n_parallel {self.n_parallel})",
                hint="send fewer or shorter documents (smaller chunk size, lower k), or raise the context: "
                f"--n-ctx {2 * self.n_ctx} (every one of the {self.n_parallel} slots gets a share)",
            )
        return LLMError(
            f"llama.cpp error: {error.get('message', error)}",
            hint="see the message above; rerun with verbosity=3 for llama.cpp's log",
        )


# The llguidance options of each layout (module docstring); None: llama.cpp's own
# response_format, which allows any whitespace.
JSON_LAYOUTS: dict[str, dict[str, Any] | None] = {
    "spaced": {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "},
    "compact": {"whitespace_flexible": False},
    "free": None,
}


def default_json_layout(path: Path) -> str:
    from marag.llm.models import catalogue_entry_for

    entry = catalogue_entry_for(path)
    return entry.json_layout if entry else "spaced"


def json_grammar(schema: dict[str, Any], layout: str = "spaced") -> str:
    """An llguidance grammar for `schema` in one of the fixed layouts. (llama.cpp's
    `response_format` path ignores llguidance's `x-guidance` options, a grammar of our
    own carries them.)"""
    options = JSON_LAYOUTS[layout]
    if options is None:
        raise ValueError(f"layout {layout!r} has no grammar of its own: send the schema as response_format")
    return "%llguidance {}\nstart: %json " + json.dumps({"x-guidance": options, **schema}, ensure_ascii=False)
