"""What the mRAG agents share: the prompt preamble, the document view they read
(`marag.agents.documents`) and small text helpers."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from marag.agents.documents import Doc, doc_from_hit, pack_texts
from marag.agents.layout import clip, laid_out
from marag.llm.base import Message

__all__ = ["Doc", "clip", "doc_from_hit", "pack_texts", "render_docs", "render_lines", "team_prompt"]

def team_prompt(
    system: str, question: str, state: Iterable[str] = (), ask: str = "Reply as JSON.", documents: str | None = None
) -> list[Message]:
    """An mRAG role's messages, laid out for prefix reuse (`marag.agents.layout`)."""
    return laid_out(system, question, state, ask, documents)


def render_docs(docs: Sequence[Doc]) -> str:
    """Numbered documents, the first one printed last: small models lean on what they
    read most recently, and the first document is the most relevant."""
    blocks = []
    for i, d in enumerate(docs, 1):
        head = f"[{i}] {d.title}".rstrip() + (f" (found for: {d.found_for})" if d.found_for else "")
        blocks.append(f"{head}\n{d.text}")
    return "\n\n".join(reversed(blocks)) if blocks else "(none)"


def render_lines(items: Sequence[str], empty: str = "(none)") -> str:
    return "\n".join(f"- {x}" for x in items) if items else empty
