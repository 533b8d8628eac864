"""GINGER's nugget detection, two ways.

Tags (the paper's): the model copies a passage and wraps each span that helps answer
the question in <n>...</n> tags. The copy must equal the passage outside the tags
(`spans` verifies it); a reply that altered the text is rejected and the model asked
again once, then the passage gives no nuggets.

Sentences (ours): the passage is shown as numbered sentences and the model names the
ones that help; those sentences are the nuggets. Nothing is copied, so nothing can be
misquoted, and the reply is a few tokens. Measured with the 1.5B default model on four
DataMorgana questions: 1 of 79 tagged copies passed the check (the replies were
"Passage" or "true"), so every answer was written from the fallback's stand-in
sentences.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from marag.agents.base import Agent, narrowed
from marag.agents.ginger._shared import PREAMBLE
from marag.agents.layout import laid_out, numbered_lines
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


MAX_PICKED = 4  # sentences one passage may give: a passage is clipped to a few hundred characters


class PickInput(BaseModel):
    question: str
    sentences: list[str]


class Picked(BaseModel):
    sentences: list[int] = Field(default_factory=list, max_length=MAX_PICKED)  # numbers of the helpful sentences


class NuggetPicker(Agent[PickInput, Picked]):
    name = "nugget_picker"
    max_tokens = 40

    def messages(self, inp: PickInput) -> list[Message]:
        task = (
            "The passage is split into numbered sentences. Give the numbers of the sentences that help answer the "
            f"question, at most {MAX_PICKED}, best first; give none if no sentence helps."
        )
        state = [f"Passage sentences:\n{numbered_lines(inp.sentences)}"]
        return laid_out(task + " Reply as JSON.", inp.question, state, "Sentence numbers as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: PickInput, error: StructuredOutputError) -> Picked:
        return Picked()  # no usable reply: no nuggets from this passage


def picked(sentences: list[str], numbers: list[int]) -> list[str]:
    """The sentences named by number (1-based), each once, in the passage's order;
    numbers out of range are ignored."""
    keep = sorted({n for n in numbers if 1 <= n <= len(sentences)})
    return [_flat(sentences[n - 1]) for n in keep if _flat(sentences[n - 1])]
