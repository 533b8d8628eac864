"""The LLM port and its backends.

    from marag.llm import make_llm, Message
    llm = make_llm("llamacpp")                     # in-process llama.cpp, the default model (pulled once)
    llm = make_llm("qwen2.5-0.5b")                 # a catalogue model by name (`marag models list`)
    llm = make_llm("openai:gpt-4o-mini")           # any OpenAI-compatible endpoint
    r = asyncio.run(llm.generate([Message(role="user", content="...")], output=MyModel))

Backends subclass `ChatModel` and implement one coroutine, `_complete`.
"""

from marag.llm.base import LLM, LLMResponse, Message, Usage
from marag.llm.cache import LLMCache, cache_key
from marag.llm.chat import ChatModel, Completion, parse_output
from marag.llm.factory import LLM_BACKENDS, LLMConfig, make_llm
from marag.llm.schema import bounded_schema, output_schema
from marag.llm.scripted import ScriptedLLM, ScriptExhausted

__all__ = [
    "LLM",
    "LLM_BACKENDS",
    "ChatModel",
    "Completion",
    "LLMCache",
    "LLMConfig",
    "LLMResponse",
    "Message",
    "ScriptExhausted",
    "ScriptedLLM",
    "Usage",
    "bounded_schema",
    "cache_key",
    "make_llm",
    "output_schema",
    "parse_output",
]
