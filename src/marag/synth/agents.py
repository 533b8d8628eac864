"""The synthetic-data roles: a question writer (DataMorgana-style categories, or
SynAgent's single- and multi-hop questions), a teacher that annotates a solution
(thought, search query and evidence per step, final answer), and a verifier that scores
a question with its answer and solution 0-5. Built on the agent primitive; prompts are
ours.

Fallbacks: no question (the draw is skipped), no solution, score 0 (dropped).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.documents import Doc
from marag.agents.layout import laid_out, numbered_passages
from marag.errors import StructuredOutputError
from marag.llm.base import Message


class WriteInput(BaseModel):
    documents: list[Doc]
    categories: list[str] = Field(default_factory=list)  # "field: category - description"
    hops: int = 1  # SynAgent: 2 = the question needs both documents, through what links them


class QA(BaseModel):
    question: str = Field(max_length=400)
    answer: str = Field(max_length=1200)


class QuestionWriter(Agent[WriteInput, QA]):
    name = "synth.question"
    max_tokens = 450

    def messages(self, inp: WriteInput) -> list[Message]:
        if inp.categories:
            task = (
                "You write one question a real user could ask, answerable from the documents below, and its answer "
                "taken from them. The question must have every property listed. Reply as JSON."
            )
            state = ["Properties:\n" + "\n".join(f"- {c}" for c in inp.categories)]
        elif inp.hops > 1:
            task = (
                "You write one question that needs both documents: the answer is in the second, and finding it needs a "
                "fact from the first (the entity that links them). Give the short answer. Reply as JSON."
            )
            state = []
        else:
            task = "You write one question answerable from the document, and its short answer. Reply as JSON."
            state = []
        # Built by hand, not with laid_out: the properties come before the documents, all
        # parts apart by a blank line, whereas laid_out puts documents first, joins state
        # lines by one newline and strips them (a category or a document may end in
        # whitespace); only an all-verbatim `ask` would keep every prompt as it is.
        lines = state + [f"Documents:\n{numbered_passages(inp.documents)}", "Question and answer as JSON."]
        return [Message(role="system", content=task), Message(role="user", content="\n\n".join(lines))]

    def fallback(self, inp: WriteInput, error: StructuredOutputError) -> QA:
        return QA(question="", answer="")


class SolveInput(BaseModel):
    question: str
    answer: str
    documents: list[Doc]


class SolutionStep(BaseModel):
    thought: str = Field(max_length=200)
    query: str = Field(max_length=120)
    evidence: str = Field(max_length=250)


class Solution(BaseModel):
    steps: list[SolutionStep] = Field(min_length=1, max_length=3)
    final_answer: str = Field(max_length=300)


class SolutionAnnotator(Agent[SolveInput, Solution]):
    name = "synth.solution"
    max_tokens = 500

    def messages(self, inp: SolveInput) -> list[Message]:
        task = (
            "You show how an agent with a search engine would answer the question: for each step a thought, the search "
            "query it would run, and the evidence the documents give; then the final answer. Reply as JSON."
        )
        return laid_out(task, inp.question, [f"Expected answer: {inp.answer}", f"Documents:\n{numbered_passages(inp.documents)}"], "Solution as JSON.")

    def fallback(self, inp: SolveInput, error: StructuredOutputError) -> Solution:
        return Solution(steps=[SolutionStep(thought="fallback", query=inp.question[:120], evidence="")], final_answer="")


class VerifyInput(BaseModel):
    question: str
    answer: str
    documents: list[Doc]
    solution: str = ""


class Verdict(BaseModel):
    reason: str = Field(max_length=200)
    score: int = Field(ge=0, le=5)


class Verifier(Agent[VerifyInput, Verdict]):
    name = "synth.verify"
    max_tokens = 90

    def messages(self, inp: VerifyInput) -> list[Message]:
        task = (
            "You rate a generated question with its answer from 0 to 5: 5 = clear, answerable from the documents, "
            "answer correct and complete (and the solution sound); 0 = unanswerable or wrong. Reply as JSON."
        )
        state = [f"Answer: {inp.answer}", f"Solution: {inp.solution}" if inp.solution else "", f"Documents:\n{numbered_passages(inp.documents)}"]
        return laid_out(task, inp.question, state, "Rating as JSON.")

    def fallback(self, inp: VerifyInput, error: StructuredOutputError) -> Verdict:
        return Verdict(reason="fallback: no usable rating", score=0)
