"""What the mRAG agents share: the document view they read (`marag.agents.documents`),
the passage layout (`marag.agents.layout`) and small text helpers."""

from __future__ import annotations

from collections.abc import Sequence

from marag.agents.documents import Doc, doc_from_hit, pack_texts
from marag.agents.layout import clip, laid_out, numbered_passages

__all__ = ["Doc", "clip", "doc_from_hit", "laid_out", "pack_texts", "render_docs", "render_lines"]


def render_docs(docs: Sequence[Doc]) -> str:
    """Numbered documents, the first printed last (small models lean on what they read
    most recently, and the first is the most relevant); a document with a `found_for`
    shows the query that found it."""
    return numbered_passages(docs, newest_last=True, label=lambda d: f" (found for: {d.found_for})" if d.found_for else "")


def render_lines(items: Sequence[str], empty: str = "(none)") -> str:
    return "\n".join(f"- {x}" for x in items) if items else empty
