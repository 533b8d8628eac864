"""GINGER's shared system-prompt preamble."""

from __future__ import annotations

from collections.abc import Iterable

from marag.agents.layout import laid_out
from marag.llm.base import Message

PREAMBLE = "You help write a grounded, well-organised answer from retrieved passages."


def ginger_prompt(task: str, question: str, state: Iterable[str] = (), ask: str = "Reply as JSON.") -> list[Message]:
    return laid_out(f"{PREAMBLE}\n{task} Reply as JSON.", question, state, ask)
