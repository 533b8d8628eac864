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
instructions in the system prompt much better. Measured with the default model,
Qwen2.5-Coder-1.5B, on mRAG's coordinator in 12 probe states: a sensible next agent in
12 of 12 with its task in the system prompt, 5 of 12 with the task moved to the end of
the user message; SmolLM2-135M's coordinator, query writer and planner degenerated.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from marag.llm.base import Message


def clip(text: str, limit: int | None) -> str:
    """`text` on one line, at most `limit` characters (an ellipsis marks a cut; None
    keeps it whole)."""
    flat = " ".join(str(text).split())
    return flat if limit is None or len(flat) <= limit else flat[: max(0, limit - 1)].rstrip() + "…"


def laid_out(
    system: str,
    question: str | None,
    state: Iterable[str] = (),
    ask: str = "Reply as JSON.",
    documents: str | None = None,
    preamble: str = "",
    gap: str = "\n\n",
) -> list[Message]:
    """The messages for one call, stable parts first (module docstring). The user
    message is its parts joined by `gap` (a blank line by default): "Question: ..."
    (left out when `question` is None, for a role that is not asked about a question),
    the documents, the state lines (one per line; empty ones are left out, and each
    loses its trailing whitespace), and `ask`, which is kept verbatim (so a value that
    may be empty, e.g. "Response: " for an empty response, belongs in `ask`).
    `preamble`: what every role of a strategy says first (its system prompt is the
    preamble, then the role's own instructions in `system`)."""
    if preamble:
        system = f"{preamble}\n{system}"
    parts = [] if question is None else [f"Question: {question}"]
    if documents is not None:
        parts.append(f"Documents:\n\n{documents}")
    lines = [s.rstrip() for s in state if s and s.strip()]
    if lines:
        parts.append("\n".join(lines))
    parts.append(ask)
    return [Message(role="system", content=system), Message(role="user", content=gap.join(parts))]


def numbered_passages(docs: Sequence[Any], newest_last: bool = False, label: Callable[[Any], str] | None = None) -> str:
    """Passages as every reading role sees them: "[i] title" then the text, numbered
    from 1 in relevance order; the number is how the model cites one. `docs` are
    anything with `title` and `text` (a `Doc`, a `Passage`, a `Hit`), or plain strings.
    `newest_last`: the first (most relevant) passage is printed last, right before the
    request (small models lean on what they read most recently). `label`: extra text
    after the title (mRAG: the query a document was found for)."""
    blocks = []
    for i, d in enumerate(docs, 1):
        if isinstance(d, str):
            blocks.append(f"[{i}] {d}")
            continue
        head = f"[{i}] {getattr(d, 'title', '')}".rstrip() + (label(d) if label else "")
        blocks.append(f"{head}\n{d.text}")
    if newest_last:
        blocks.reverse()
    return "\n\n".join(blocks) or "(none)"


def numbered_lines(items: Sequence[str], empty: str = "(none)") -> str:
    """A numbered list, "1. x" per line (facts, gaps, candidates the model refers to by number)."""
    return "\n".join(f"{i}. {x}" for i, x in enumerate(items, 1)) or empty
