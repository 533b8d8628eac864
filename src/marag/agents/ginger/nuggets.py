"""GINGER's nugget detection: the model copies a passage and wraps each span that helps
answer the question in <n>...</n> tags. The copy must equal the passage outside the tags
(`spans` verifies it); a reply that altered the text is rejected and the model asked
again once, then the passage gives no nuggets.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from marag.agents.base import Agent, narrowed
from marag.agents.ginger._shared import PREAMBLE
from marag.agents.layout import laid_out
from marag.errors import StructuredOutputError
from marag.llm.base import Message

_TAG = re.compile(r"<n>(.*?)</n>", re.DOTALL)


class TagInput(BaseModel):
    question: str
    passage: str
    retry: bool = False  # the previous reply changed the passage


class Tagged(BaseModel):
    tagged: str


class NuggetDetector(Agent[TagInput, Tagged]):
    name = "nugget_detector"

    def __init__(self, passage_chars: int):
        self.Output = narrowed(Tagged, "tagged", max_length=passage_chars + 200)
        self.max_tokens = passage_chars // 3 + 80

    def messages(self, inp: TagInput) -> list[Message]:
        task = (
            "Copy the passage exactly, and put <n> before and </n> after every span that helps answer the "
            "question. Change nothing else."
        )
        state = [f"Passage: {inp.passage}"]
        if inp.retry:
            state.append("Your last copy changed the passage's words: copy it exactly this time.")
        return laid_out(task + " Reply as JSON.", inp.question, state, "Tagged passage as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: TagInput, error: StructuredOutputError) -> Tagged:
        return Tagged(tagged=inp.passage)  # no tags: no nuggets


def _flat(text: str) -> str:
    return " ".join(text.split())


def spans(original: str, tagged: str) -> list[str] | None:
    """The tagged spans, or None when the tagged text is not the original outside its
    tags (whitespace aside)."""
    if _flat(_TAG.sub(lambda m: m.group(1), tagged)) != _flat(original) or "<n>" in _TAG.sub("", tagged):
        return None
    return [_flat(s) for s in _TAG.findall(tagged) if _flat(s)]
