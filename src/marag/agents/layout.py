"""How agent prompts are laid out, so that a question's calls share a long prefix.

llama.cpp (and vLLM, and hosted APIs) skip the part of a prompt that starts the same as
a prompt they processed recently; only the rest is evaluated. A question's calls are
many (mRAG makes 15-30, most of them the same few roles), so every agent prompt is
ordered from the most stable to the most changing part:

    system   the role's instructions             identical for every call of the role
    user     Question: ...                       identical for every call of the question
             Documents: ...                      (readers only) changes only when S grows
             state lines, stable ones first     e.g. a history that only grows
             the request                         e.g. "Answer as JSON."

Two calls of one role for one question then share everything up to their first
changed state line. (A single preamble shared by all roles, with each role's task
after the question, would share a little more across roles, but small models follow
instructions in the system prompt much better: SmolLM2-135M's coordinator, query
writer and planner degenerated when their task moved into the user message.)
"""

from __future__ import annotations

from collections.abc import Iterable

from marag.llm.base import Message


def clip(text: str, limit: int | None) -> str:
    """`text` on one line, at most `limit` characters (an ellipsis marks a cut; None
    keeps it whole)."""
    flat = " ".join(str(text).split())
    return flat if limit is None or len(flat) <= limit else flat[: max(0, limit - 1)].rstrip() + "…"


def laid_out(
    system: str,
    question: str,
    state: Iterable[str] = (),
    ask: str = "Reply as JSON.",
    documents: str | None = None,
) -> list[Message]:
    """The messages for one call, stable parts first (module docstring). Empty state
    lines are left out."""
    user = f"Question: {question}\n"
    if documents is not None:
        user += f"\nDocuments:\n\n{documents}\n"
    lines = [s.rstrip() for s in state if s and s.strip()]
    if lines:
        user += "\n" + "\n".join(lines) + "\n"
    user += "\n" + ask
    return [Message(role="system", content=system), Message(role="user", content=user)]
