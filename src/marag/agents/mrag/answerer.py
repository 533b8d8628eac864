"""mRAG's answerer: a response to the question grounded in the collected documents,
following the coordinator's guidance and using the team's notes (plan, summaries,
analyses).

It reuses the base answerer's output model and fallback (keep whatever text the model
produced, or a fixed "could not answer").
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.answerer import Answerer, AnswerOutput
from marag.agents.mrag._shared import Doc, render_docs, render_lines
from marag.llm.base import Message


class MRAGAnswerInput(BaseModel):
    question: str
    guidance: str = ""  # the coordinator's input
    notes: list[str] = Field(default_factory=list)
    documents: list[Doc] = Field(default_factory=list)


class MRAGAnswerer(Answerer):
    name = "answerer"
    Input = MRAGAnswerInput  # type: ignore[assignment]
    Output = AnswerOutput

    def messages(self, inp: MRAGAnswerInput) -> list[Message]:  # type: ignore[override]
        system = (
            f"You answer a question using only the numbered documents. {self.style.instruction} "
            "If the documents do not contain the answer, say that you do not know. Reply as JSON."
        )
        # The question comes last, right after the best document: what the model reads
        # last is what a small model answers (a trailing "Guidance:" line was echoed).
        user = ""
        if inp.guidance:
            user += f"Guidance: {inp.guidance}\n"
        if inp.notes:
            user += f"Notes:\n{render_lines(inp.notes)}\n"
        user += f"\nDocuments:\n\n{render_docs(inp.documents)}\n\nQuestion: {inp.question}\nAnswer as JSON."
        return [Message(role="system", content=system), Message(role="user", content=user.lstrip())]
