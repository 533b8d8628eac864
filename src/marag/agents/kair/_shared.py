"""The KAIR roles' shared prompt preamble and passage rendering."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from marag.agents.documents import Doc
from marag.agents.layout import laid_out
from marag.llm.base import Message

PREAMBLE = (
    "You are one agent of a retrieval team that gathers the evidence a question needs from a "
    "document collection, keeping track of what is known and what is still required. Reply with JSON only."
)


def render_numbered(docs: Sequence[Doc]) -> str:
    return "\n\n".join(f"[{i}] {d.title}\n{d.text}" for i, d in enumerate(docs, 1)) or "(none)"


def numbered(items: Sequence[str], empty: str = "(none)") -> str:
    return "\n".join(f"{i}. {x}" for i, x in enumerate(items, 1)) or empty


def kair_prompt(question: str, task: str, state: Iterable[str] = (), ask: str = "Reply as JSON.") -> list[Message]:
    return laid_out(f"{PREAMBLE}\n{task}", question, state, ask)  # the role's task in its system prompt
