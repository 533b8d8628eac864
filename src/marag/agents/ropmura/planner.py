"""RopMura's planner for multi-hop questions, round by round: the splitter proposes
sub-questions from the question and the records so far; the selector picks one that
differs from those already asked and refers to nothing ambiguous (or polishes the first,
filling in what earlier answers name); the router answers it; the judger says whether
the records now answer the question; the defender writes the final answer from them.

Fallbacks: splitter -> the question itself; selector -> the first candidate; judger ->
not answerable (the rounds go on to their limit); defender -> the last record's answer.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from marag.agents.answerer import AnswerOutput, AnswerStyle, Passage, StyledAnswer
from marag.agents.base import Agent
from marag.agents.layout import laid_out, numbered_lines, numbered_passages
from marag.agents.ropmura._shared import DONT_KNOW, PREAMBLE, Record, render_records
from marag.errors import StructuredOutputError
from marag.llm.base import Message

SubQuestion = Annotated[str, StringConstraints(max_length=160)]


class SplitInput(BaseModel):
    question: str
    records: list[Record] = Field(default_factory=list)


class SubQuestions(BaseModel):
    questions: list[SubQuestion] = Field(min_length=1, max_length=3)


class Splitter(Agent[SplitInput, SubQuestions]):
    name = "splitter"
    max_tokens = 140

    def messages(self, inp: SplitInput) -> list[Message]:
        task = (
            "You break a complex question into simple sub-questions, each asking for one fact. "
            "Given what has been answered so far, write the next 1 to 3 sub-questions still needed."
        )
        return laid_out(task + " Reply as JSON.", inp.question, [f"Answered so far:\n{render_records(inp.records)}"], "Sub-questions as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: SplitInput, error: StructuredOutputError) -> SubQuestions:
        return SubQuestions(questions=[inp.question[:160]])


class SelectInput(BaseModel):
    question: str
    candidates: list[str]
    records: list[Record] = Field(default_factory=list)


class Selection(BaseModel):
    choice: int = Field(ge=1, le=3)
    question: str = Field(max_length=160)  # the chosen sub-question, with references made explicit


class Selector(Agent[SelectInput, Selection]):
    name = "selector"
    max_tokens = 90

    def messages(self, inp: SelectInput) -> list[Message]:
        task = (
            "You choose the sub-question to ask next: one not asked before, that can be answered on its own. "
            "Rewrite it so it names everything it refers to (use the answers so far), and give its number."
        )
        cands = numbered_lines(inp.candidates)
        return laid_out(task + " Reply as JSON.", inp.question, [f"Answered so far:\n{render_records(inp.records)}", f"Candidates:\n{cands}"], "Choice as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: SelectInput, error: StructuredOutputError) -> Selection:
        return Selection(choice=1, question=inp.candidates[0][:160])


class JudgeInput(BaseModel):
    question: str
    records: list[Record]


class Judgment(BaseModel):
    justification: str = Field(max_length=150)
    answerable: bool


class Judger(Agent[JudgeInput, Judgment]):
    name = "judger"
    max_tokens = 70

    def messages(self, inp: JudgeInput) -> list[Message]:
        task = "You judge whether the answers gathered so far are enough to answer the question. Justify briefly."
        return laid_out(task + " Reply as JSON.", inp.question, [f"Answered so far:\n{render_records(inp.records)}"], "Judgment as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: JudgeInput, error: StructuredOutputError) -> Judgment:
        return Judgment(justification="fallback: no usable judgment", answerable=False)


class DefendInput(BaseModel):
    question: str
    records: list[Record]
    # the passages the records were answered from (`answer_from`, ours); none: the paper's
    # defender, which reads the records alone
    passages: list[Passage] = Field(default_factory=list)


class Defender(StyledAnswer, Agent[DefendInput, AnswerOutput]):
    """The final answer from the (sub-question, answer) records (the paper), from the
    passages read by the agents the router did not grade unhelpful, or from both. The
    passages come before the records, as documents do in every other role."""

    name = "defender"

    def __init__(self, style: AnswerStyle | None = None):
        self._set_style(style)

    def messages(self, inp: DefendInput) -> list[Message]:
        if not inp.passages:
            what, docs = "the answers gathered", None
        else:
            what, docs = "the passages found" + (" and the answers gathered" if inp.records else ""), numbered_passages(inp.passages)
        state = [f"Answered so far:\n{render_records(inp.records)}"] if inp.records or not inp.passages else []
        task = f"You write the final answer to the question from {what}. {self.style.instruction}"
        return laid_out(task + " Reply as JSON.", inp.question, state, f"Question: {inp.question}\nAnswer as JSON.", documents=docs, preamble=PREAMBLE)

    def fallback(self, inp: DefendInput, error: StructuredOutputError) -> AnswerOutput:
        last = next((r.answer for r in reversed(inp.records)), DONT_KNOW)
        return self.Output(answer=last[: self.style.max_chars])
