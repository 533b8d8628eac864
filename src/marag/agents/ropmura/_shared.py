"""What RopMura's roles share: the system-prompt preamble, and how knowledge agents'
responses and the planner's records are shown to the router's roles."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel


PREAMBLE = "You are part of a system of specialist agents that answer questions from their own document collections."
DONT_KNOW = "I don't know"


class Response(BaseModel):
    """One knowledge agent's reply as the router sees it: never its documents."""

    agent: str
    analysis: str
    answer: str


class Record(BaseModel):
    """One round of the planner: a sub-question and the answer the router gave it."""

    question: str
    answer: str


def render_responses(responses: Sequence[Response]) -> str:
    return "\n\n".join(f"[{i}] {r.agent}\nAnalysis: {r.analysis}\nAnswer: {r.answer}" for i, r in enumerate(responses, 1)) or "(none)"


def render_records(records: Sequence[Record]) -> str:
    return "\n".join(f"- {r.question} -> {r.answer}" for r in records) or "(none yet)"
