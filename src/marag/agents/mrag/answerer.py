"""mRAG's answerer: a response to the question grounded in the collected documents,
following the coordinator's guidance and using the team's notes (plan, summaries,
analyses).

It reuses the base answerer's output model and fallback (keep whatever text the model
produced, or a fixed "could not answer").
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.answerer import Answerer
from marag.agents.mrag._shared import Doc, render_docs, render_lines, laid_out
from marag.llm.base import Message


class MRAGAnswerInput(BaseModel):
    question: str
    guidance: str = ""  # the coordinator's input
    notes: list[str] = Field(default_factory=list)
    documents: list[Doc] = Field(default_factory=list)


class MRAGAnswerer(Answerer):
    name = "answerer"
    Input = MRAGAnswerInput  # type: ignore[assignment]

    def messages(self, inp: MRAGAnswerInput) -> list[Message]:  # type: ignore[override]
        system = (
            f"You answer a question using only the numbered documents. {self.style.instruction} "
            "If the documents do not contain the answer, say that you do not know. Reply as JSON."
        )
        state = [f"Guidance: {inp.guidance}" if inp.guidance else "", f"Notes:\n{render_lines(inp.notes)}" if inp.notes else ""]
        # The question is asked again last: what a small model reads last is what it
        # answers (a trailing "Guidance:" line was echoed).
        return laid_out(
            system, inp.question, state, f"Question: {inp.question}\nAnswer as JSON.", render_docs(inp.documents)
        )
