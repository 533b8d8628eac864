"""What the mRAG agents share: the document view they read and small text helpers.

Prompts must stay small (SmolLM2-135M has a 4k-token slot and reads best when little is
in front of it), so every piece of collected text reaches a prompt clipped.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from marag.index.base import Hit


class Doc(BaseModel):
    """A collected document as the agents see it (text already clipped)."""

    id: str  # chunk id: unique in the index, the key of the supporting set S
    title: str = ""
    text: str


def clip(text: str, limit: int) -> str:
    """`text` on one line, at most `limit` characters (an ellipsis marks a cut)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: max(0, limit - 1)].rstrip() + "…"


def doc_from_hit(hit: Hit, chars: int) -> Doc:
    return Doc(id=hit.chunk_id, title=hit.title, text=clip(hit.text, chars))


def render_docs(docs: Sequence[Doc]) -> str:
    """Numbered documents, the first one printed last: small models lean on what they
    read most recently, and the first collected document is usually the best ranked."""
    blocks = [f"[{i}] {d.title}".rstrip() + f"\n{d.text}" for i, d in enumerate(docs, 1)]
    return "\n\n".join(reversed(blocks)) if blocks else "(none)"


def render_lines(items: Sequence[str], empty: str = "(none)") -> str:
    return "\n".join(f"- {x}" for x in items) if items else empty
