"""Answer a question, with or without retrieved passages, in a short or a long style.

The style is a strategy setting (`answer_style`), and each evaluation dataset declares
its default: short spans for HotpotQA, MuSiQue and NQ (scored by EM/F1), paragraphs for
DataMorgana and TREC RAG (whose references have a median of ~460 characters; a
200-character cap would score them low by construction).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from marag.agents.answer_types import asked_kind, reads_as_sentence, wrong_kind
from marag.agents.base import Agent, narrowed
from marag.agents.layout import laid_out, numbered_passages
from marag.agents.span import SpanInput, SpanReader, keeps
from marag.errors import StructuredOutputError
from marag.llm.base import LLM, Message
from marag.trace import step

PASSAGE_MAX_CHARS = 1500


@dataclass(frozen=True)
class AnswerStyle:
    name: str
    max_chars: int  # the output schema's maxLength: constrained decoding closes the JSON in time
    instruction: str  # one sentence of every answering prompt
    max_tokens: int  # room for max_chars plus the JSON around it
    recheck: bool = False  # a short answer that repeats a name from the question is asked for again
    type_check: bool = False  # a short answer not of the kind asked (a name for "When ...?") is asked for again

    def with_max_chars(self, max_chars: int | None) -> "AnswerStyle":
        if not max_chars:
            return self
        return replace(self, max_chars=max_chars, max_tokens=max(64, max_chars // 3 + 40))


ANSWER_STYLES: dict[str, AnswerStyle] = {
    "short": AnswerStyle(
        "short", 200, "Reply with a short, direct answer (a name, number, date or one sentence).", 200
    ),
    "long": AnswerStyle(
        "long",
        1200,
        "Reply with a complete answer in a few sentences (at most about 180 words) that covers every "
        "part of the question and explains it.",
        400,
    ),
}
SHORT = ANSWER_STYLES["short"]
ANSWER_MAX_CHARS = SHORT.max_chars  # the short style's limit (kept for callers that import it)


class Passage(BaseModel):
    title: str = ""
    text: str


class AnswerInput(BaseModel):
    question: str
    passages: list[Passage] = Field(default_factory=list)


class AnswerOutput(BaseModel):
    answer: str = Field(max_length=ANSWER_MAX_CHARS)


FALLBACK_ANSWER = "I could not produce an answer."
# Source marks a model copies from its prompt into the answer: "[Some title#0]" (a chunk
# id) or "[2]", "[1, 3]" (passage numbers). Sources are reported beside the answer, and
# in a short answer the marks only cost exact match and F1.
_SOURCE_MARK = re.compile(r"\s*\[(?:[^\[\]\n]{1,200}#\d+|\d+(?:\s*,\s*\d+)*)\]")
_ANSWER_PREFIX = re.compile(r'^\{\s*"answer"\s*:\s*"?')
_NOT_WORD = re.compile(r"[^0-9a-z]+")
_ARTICLES = frozenset({"a", "an", "the"})
# A question that offers its own candidates ("Which formed first, X or Y?", "Which of X
# and Y ...", "Are X and Y both ...", "X and Y were founded ... Which was the first to
# serve pizza?", whose answer is "Pizza Hut") may be answered with words it contains.
_OFFERS_CHOICE = re.compile(
    r"\b(?:or|which of|between|both|either|same)\b|\band\b.*\bwhich (?:was|is|were|are|one)\b", re.IGNORECASE
)


def offers_choice(question: str) -> bool:
    """Whether a question offers its own candidates to choose from (a comparison)."""
    return bool(_OFFERS_CHOICE.search(question))


def _words(text: str) -> str:
    return " ".join(w for w in _NOT_WORD.sub(" ", text.lower()).split() if w not in _ARTICLES)


def echoes_question(question: str, answer: str) -> bool:
    """Whether a short answer only repeats words of the question (a name it already
    gives, "Fist Power" for "When was the country that produced Fist Power taken by the
    British?"), in a question that offers no candidates to choose from. Measured with
    the 0.5B reference model (issue 24): 15 such answers among 142 distinct answers to
    HotpotQA and MuSiQue questions, none of them right, and no right answer flagged;
    with the 1.5B, 22 of 822 short answers, none right. Among the gold answers of the
    1,300 HotpotQA, MuSiQue and NQ questions here, 4 of NQ's repeat a name of their
    question ("Oak Island" for "where is the tv show the curse of oak island filmed"):
    a right answer like those is asked for again."""
    words = _words(answer)
    if not words or _OFFERS_CHOICE.search(question):
        return False
    return f" {words} " in f" {_words(question)} "


class StyledAnswer:
    """The part every answer-writing agent shares: the style's output limit, token
    budget and instruction, and a fallback that keeps whatever answer text the model
    produced (often a JSON reply cut off mid-string still holds it)."""

    style: AnswerStyle = SHORT
    agents: ClassVar[tuple[type, ...]] = (SpanReader,)  # the role its `settle` may call (a strategy's `<family>.span`)

    def _set_style(self, style: AnswerStyle | None) -> None:
        self.style = style or SHORT
        self.Output = narrowed(AnswerOutput, "answer", max_length=self.style.max_chars)
        self.max_tokens = self.style.max_tokens

    def finish(self, out: AnswerOutput) -> AnswerOutput:
        """Short answers lose copied source marks (the sources are reported anyway);
        long answers keep them."""
        if self.style.name != "short":
            return out
        clean = _SOURCE_MARK.sub("", out.answer).strip()
        return out.model_copy(update={"answer": clean or out.answer})

    def _short_pair(self, inp: Any, out: Any) -> tuple[str, str] | None:
        """(question, answer) when a short answer to a question is at hand, the only
        answers `recheck` and `settle` check; else None."""
        question, answer = getattr(inp, "question", None), getattr(out, "answer", None)
        if self.style.name != "short" or not isinstance(question, str) or not isinstance(answer, str):
            return None
        return question, answer

    def recheck(self, inp: BaseModel, out: BaseModel) -> str | None:
        """A short answer is asked for once more, told why, when it only repeats a name
        the question gives (`echoes_question`, with `style.recheck`) or is not of the
        kind the question asks for (`answer_types.wrong_kind`) or is a sentence around it
        (`answer_types.reads_as_sentence`), both with `style.type_check`. Long answers
        restate the question by design and are not checked."""
        pair = self._short_pair(inp, out)
        if pair is None:
            return None
        question, answer = pair
        if self.style.recheck and echoes_question(question, answer):
            # Told "is not what the question asks for. Read again", the 1.5B gave the same
            # answer back 5 times of 5; told it cannot be the answer and to give another,
            # it answered "Kimber Manufacturing" (right) for "Cooper Firearms of Montana" and
            # another name, wrong, the 4 other times. A closed-book answerer has no documents
            # to be pointed at.
            source = " from the documents" if getattr(inp, "passages", None) or getattr(inp, "documents", None) else ""
            return (
                f'"{answer}" is named in the question, so it cannot be the answer. Reply with a different '
                f"name or value{source} that answers the question, as JSON."
            )
        if not self.style.type_check:
            return None
        kind = wrong_kind(question, answer)
        if kind is not None:
            return (
                f'The question asks for {kind.wanted}, and "{answer}" is not one. Read again and reply with '
                f"{kind.wanted} that answers the question, as JSON."
            )
        if reads_as_sentence(answer):
            # The kind named when a few words decide it (and "yes or no" only then: offered
            # it among others, the 1.5B answered "yes" to "Which of the two tornado outbreaks
            # killed the most people?"). Otherwise the part of the sentence that answers:
            # told "a name, a number or a date", the 1.5B kept the sentence's first name
            # ("Germany" from "Germany had imperial interests in Africa and the South
            # Pacific.", F1 .36 -> 0; "Ed Roland, Adam Duritz" for their role), told "part
            # of it", "Africa and the South Pacific" (.67) and "Barnaby Joyce" alike, but 3 of
            # 10 such answers stayed sentences (the name list: none); told "the few words
            # of it", it kept more sentences whole.
            kind = asked_kind(question)
            if kind is None:
                return f'"{answer}" is a sentence. Reply with just the part of it that answers the question, as JSON.'
            return (
                f'The question asks for {kind.wanted}, and "{answer}" is a sentence. Reply with just the words '
                "that answer the question, as JSON."
            )
        return None

    async def settle(self, llm: LLM, inp: Any, out: Any, temperature: float = 0.0, seed: int | None = None) -> Any:
        """A short answer still a sentence after its recheck gets its span from a separate
        call that sees only the question and the sentence (`marag.agents.span`, with
        `style.type_check`); the span replaces the sentence when `span.keeps` says so, and
        a `span_applied` step records the decision."""
        pair = self._short_pair(inp, out)
        if pair is None or not self.style.type_check or not reads_as_sentence(pair[1]):
            return out
        question, answer = pair
        span = (await SpanReader()(llm, SpanInput(question=question, sentence=answer), temperature, seed)).answer.strip()
        kept = keeps(question, answer, span, echoes_question(question, span))
        with step("span_applied") as s:
            s.outputs = {"kept": kept, "answer": span if kept else answer}
        return out.model_copy(update={"answer": span}) if kept else out

    def salvage(self, error: StructuredOutputError, default: str = FALLBACK_ANSWER) -> AnswerOutput:
        raw = _ANSWER_PREFIX.sub("", " ".join(error.raw.split())).strip(' "}')
        return self.Output(answer=raw[: self.style.max_chars] or default)


class Answerer(StyledAnswer, Agent[AnswerInput, AnswerOutput]):
    name = "answerer"
    max_tokens = SHORT.max_tokens
    logprobs = True  # the reader's confidence in its answer: what `auto` routes on

    def __init__(self, style: AnswerStyle | None = None):
        self._set_style(style)

    def messages(self, inp: AnswerInput) -> list[Message]:
        if not inp.passages:
            system = f"You answer questions from your own knowledge. {self.style.instruction}"
            return laid_out(system, inp.question, ask="Answer as JSON.", gap="\n")
        system = (
            "You answer questions using only the numbered passages you are given. "
            f"{self.style.instruction} If the passages do not contain the answer, say that you do not know."
        )
        # Passages in rank order, the best first. Measured with the default model
        # (Qwen2.5-Coder-1.5B, vanilla_rag k=2, tuning questions): HotpotQA 51-80 accuracy
        # .200 -> .333 (+.133 [+.033, +.267]) and F1 .259 -> .295 against the best passage
        # printed last; NQ 101-140 F1 .421 -> .423. (SmolLM2-135M leaned on what it read
        # last, F1 .05 best-first vs .16 best-last, which is why it was the other way.)
        # Built by hand, not with laid_out: the passages come before the question here
        # (laid_out puts the question first), with one newline before the request, and
        # this order is the one measured above; the prompt stays as it was measured.
        shown = [p.model_copy(update={"text": p.text[:PASSAGE_MAX_CHARS]}) for p in inp.passages]
        user = f"Passages:\n\n{numbered_passages(shown)}\n\nQuestion: {inp.question}\nAnswer as JSON."
        return [Message(role="system", content=system), Message(role="user", content=user)]

    def fallback(self, inp: AnswerInput, error: StructuredOutputError) -> AnswerOutput:
        return self.salvage(error)
