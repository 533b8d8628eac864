"""UniRAG's final-answer step: the answer written from the evidence in the working
memory only (no raw documents), in the strategy's answer style (the paper's); or, ours,
from the documents the evidence came from, read as one-shot RAG reads its passages.

Fallback: the answer text the model produced, else "I could not produce an answer."
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.answerer import Answerer, AnswerOutput, AnswerStyle, StyledAnswer
from marag.agents.base import Agent
from marag.agents.layout import laid_out
from marag.agents.unirag._shared import PREAMBLE, MemoryStep, render_memory
from marag.errors import StructuredOutputError
from marag.llm.base import Message


class FinalInput(BaseModel):
    question: str
    memory: list[MemoryStep] = Field(default_factory=list)


class FinalAnswer(StyledAnswer, Agent[FinalInput, AnswerOutput]):
    name = "final_answer"

    def __init__(self, style: AnswerStyle | None = None):
        self._set_style(style)

    def messages(self, inp: FinalInput) -> list[Message]:
        task = (
            f"Your task: answer the question from the evidence in the working memory only. {self.style.instruction} "
            "If the evidence does not answer it, say that you do not know."
        )
        state = [f"Working memory:\n{render_memory(inp.memory)}"]
        return laid_out(task, inp.question, state, f"Question: {inp.question}\nAnswer as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: FinalInput, error: StructuredOutputError) -> AnswerOutput:
        return self.salvage(error)


class SourcesAnswer(Answerer):
    """The final answer from the evidence's source documents, whole, with the one-shot
    answerer's prompt (`answer_from="sources"`, ours). The working memory also holds the
    planner's thoughts, and a small model's first thought guesses an answer before any
    search ("written by the Japanese singer ..."), which its final answer then repeats;
    the documents hold what was found, and they are read with the prompt `vanilla_rag`
    reads its passages with (issue 24: an agent holding the gold documents must not
    answer worse than one retrieval with them)."""

    name = "final_answer"
