"""What the mRAG agents share: the document view they read and small text helpers.

Prompts must fit the model's context (SmolLM2-135M has a 4k-token slot), so the
collected documents are packed into a character budget (`pack_texts`): every document
is shown, most relevant first, and when they do not fit whole the longest ones are
clipped to an equal share of the budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from marag.agents.layout import laid_out
from marag.index.base import Hit
from marag.llm.base import Message

# The system prompt of every mRAG role: one text, so a question's calls share it (and
# the question after it) as a cached prefix; each role's task follows the question.
PREAMBLE = (
    "You are one agent of a team that answers questions from a document collection. "
    "Do only the task you are given, and reply with JSON only."
)


def team_prompt(
    question: str, task: str, state: Iterable[str] = (), ask: str = "Reply as JSON.", documents: str | None = None
) -> list[Message]:
    """An mRAG role's messages, laid out for prefix reuse (`marag.agents.layout`)."""
    return laid_out(PREAMBLE, question, task, state, ask, documents)


class Doc(BaseModel):
    """A collected document as the agents see it (text already clipped)."""

    id: str  # chunk id: unique in the index, the key of the supporting set S
    title: str = ""
    text: str
    found_for: str = ""  # the search query it was judged relevant for


def clip(text: str, limit: int | None) -> str:
    """`text` on one line, at most `limit` characters (an ellipsis marks a cut; None
    keeps it whole)."""
    flat = " ".join(str(text).split())
    return flat if limit is None or len(flat) <= limit else flat[: max(0, limit - 1)].rstrip() + "…"


def doc_from_hit(hit: Hit, chars: int | None, found_for: str = "") -> Doc:
    return Doc(id=hit.chunk_id, title=hit.title, text=clip(hit.text, chars), found_for=found_for)


def pack_texts(lengths: Sequence[int], budget: int | None, floor: int = 200) -> list[int]:
    """How many characters of each text to show so that all fit in `budget`
    (water-filling: texts shorter than an equal share stay whole, what they leave goes
    to the longer ones, which are clipped to one common cap). When even `floor`
    characters each would not fit, the texts at the end of the list (the least
    relevant) are left out: their allowance is 0."""
    if budget is None or sum(lengths) <= budget:
        return list(lengths)
    shown = min(len(lengths), max(1, budget // floor))
    remaining, left, cap = budget, shown, budget
    for n in sorted(lengths[:shown]):
        share = remaining // left
        if n > share:
            cap = share
            break
        remaining, left = remaining - n, left - 1
    return [min(n, cap) for n in lengths[:shown]] + [0] * (len(lengths) - shown)


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
