"""What Agent-UniRAG's roles share: the preamble of every prompt and the working memory
(the question plus one (thought, action, evidence) record per step), rendered as the
readable chain the paper's examples show."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field


PREAMBLE = (
    "You are a research agent that answers questions by searching a document collection, "
    "one step at a time. Reply with JSON only."
)
NO_INFORMATION = "No information found"


class Evidence(BaseModel):
    source: str  # chunk id of the document it comes from
    text: str


class MemoryStep(BaseModel):
    thought: str
    action: str  # "search" | "final_answer"
    query: str = ""
    evidence: list[Evidence] = Field(default_factory=list)  # empty: "No information found"


def render_memory(steps: Sequence[MemoryStep], empty: str = "(nothing yet)") -> str:
    """The working memory as the chain of steps: Thought / Search / Evidence."""
    if not steps:
        return empty
    blocks = []
    for i, s in enumerate(steps, 1):
        lines = [f"Step {i}"] + ([f"Thought: {s.thought}"] if s.thought else [])  # (a step we took has none)
        if s.action == "search":
            lines.append(f"Search: {s.query}")
            lines += [f"Evidence: {e.text} [{e.source}]" for e in s.evidence] or [f"Evidence: {NO_INFORMATION}"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
