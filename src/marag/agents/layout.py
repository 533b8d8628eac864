"""How agent prompts are laid out, so that a question's calls share a long prefix.

llama.cpp (and vLLM, and hosted APIs) skip the part of a prompt that starts the same as
a prompt they processed recently; only the rest is evaluated. A question's calls are
many (mRAG makes 15-30) and most of what they send is the same, so every agent prompt
is ordered from the most stable to the most changing part:

    system   the strategy's preamble: identical for every role of the strategy
    user     Question: ...                   identical for every call of the question
             Documents: ...                  (readers only) changes only when S grows
             the role's task                 identical for every call of the role
             state lines                     what changed since the last call
             the request                     e.g. "Answer as JSON."

A role's task therefore follows the question instead of living in its own system
prompt: two roles of one question still share the preamble and the question, and
everything up to the documents for the agents that read them.
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
    preamble: str,
    question: str,
    task: str,
    state: Iterable[str] = (),
    ask: str = "Reply as JSON.",
    documents: str | None = None,
) -> list[Message]:
    """The messages for one call, stable parts first (module docstring). Empty state
    lines are left out."""
    user = f"Question: {question}\n\n"
    if documents is not None:
        user += f"Documents:\n\n{documents}\n\n"
    user += task.strip() + "\n"
    lines = [s.rstrip() for s in state if s and s.strip()]
    if lines:
        user += "\n" + "\n".join(lines) + "\n"
    user += "\n" + ask
    return [Message(role="system", content=preamble), Message(role="user", content=user)]
