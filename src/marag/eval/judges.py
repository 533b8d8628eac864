"""LLM judges used by the judged metrics: one agent per question asked of the judge.

Prompts are short and explicit because small local models serve as judges too: each
states the scale in one line per value and asks for JSON only. How far a small judge can
be trusted, measured with `judge_correct` on 91 distinct NQ answers (vanilla_rag, questions
101-140) against the lexical label (gold contained, or token F1 >= .5; 53 correct): the
default 1.5B model agreed on 68 (.75), and erred on the lenient side (it called 76
correct, among them "Andreas" for Paul or James); SmolLM2-135M called 88 correct (.59
agreement), close to a constant. Use a larger model (`--judge`) for numbers that matter.
Free-text fields are bounded so constrained decoding always closes the JSON.

Agents that label a list of items (aspects, nuggets) return one label per item, in
order: each call's output model requires exactly as many labels as there are items, so
constrained decoding cannot stop early or run on (small models otherwise fill the list
to its maximum). Their fallback is an empty list: the calling metric then asks item by
item, and gives an item that still fails a lexical stand-in label (defined at the end
of this module), counted in the metric's `fallbacks` so reports can say how often.
"""

from __future__ import annotations

import copy
import math
from typing import Annotated, ClassVar, Literal, TypeVar

from pydantic import BaseModel, Field

from marag.agents.base import Agent, narrowed
from marag.agents.documents import sentences
from marag.agents.layout import laid_out, numbered_lines, numbered_passages
from marag.errors import StructuredOutputError
from marag.llm.base import LLM, Message

JUSTIFICATION_MAX_CHARS = 200
ASPECT_MAX_CHARS = 150
MAX_ASPECTS = 8
NUGGET_BATCH = 10
# Input caps keep every prompt inside a small model's context window.
PREDICTION_MAX_CHARS = 2000
REFERENCE_MAX_CHARS = 1500
MAX_REFERENCES = 5
DOC_MAX_CHARS = 1200
DOCS_MAX_TOTAL_CHARS = 6000

FALLBACK_REASON = "fallback: the judge's output was unusable"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def split_aspects(text: str, limit: int = MAX_ASPECTS) -> list[str]:
    """Deterministic stand-in for aspect extraction: the text's sentences (at most
    `limit`, each clipped to ASPECT_MAX_CHARS); the whole text when it has no
    sentence breaks."""
    return [_clip(s, ASPECT_MAX_CHARS) for s in sentences(" ".join(text.split()))][:limit]


# Judge prompts are laid out as every agent's (agents/layout.py), one part per line
# (gap="\n"), with the request last. What the caller gives as text (an answer, a
# reference, a document) goes into the verbatim `ask`, never into a state line: state
# lines lose trailing whitespace and blank ones are dropped, so an empty answer
# ("Response: ") or references block would change the prompt, which was measured.


def _labelling(system: str, question: str | None, given: list[str], header: str, items: list[str], unit: str) -> list[Message]:
    """The messages of a judge that labels a list: the question (None: none), what it
    is given (`given`, verbatim), the numbered items under `header`, and how many
    labels to give ("Give 3 score(s).")."""
    ask = "\n".join([*given, f"{header}:", numbered_lines(items, empty=""), f"Give {len(items)} {unit}."])
    return laid_out(system, question, ask=ask, gap="\n")


I = TypeVar("I", bound=BaseModel)
O = TypeVar("O", bound=BaseModel)


class ListJudge(Agent[I, O]):
    """A judge that gives one label per item of its input list `items_field`, in the
    output list `list_field`."""

    items_field: ClassVar[str]
    list_field: ClassVar[str]

    async def __call__(self, llm: LLM, inp: I, temperature: float = 0.0, seed: int | None = None) -> O:
        sized = copy.copy(self)  # a per-call copy: concurrent calls never share the model
        n = len(getattr(inp, self.items_field))
        sized.Output = narrowed(type(self).Output, self.list_field, min_length=n, max_length=n)
        return await Agent.__call__(sized, llm, inp, temperature=temperature, seed=seed)

    def fallback(self, inp: I, error: StructuredOutputError) -> O:
        return type(self).Output(**{self.list_field: []})


# -- binary correctness (RopMura) ----------------------------------------------------


class CorrectnessInput(BaseModel):
    question: str
    references: list[str]
    prediction: str


class CorrectnessOutput(BaseModel):
    justification: str = Field(max_length=JUSTIFICATION_MAX_CHARS)
    correct: bool


_CORRECTNESS_SYSTEM = (
    "You grade an answer to a question against the reference answers. "
    "The answer is correct if it gives the same fact as a reference; wording, extra "
    "detail and format do not matter. It is wrong if it gives a different fact, "
    "contradicts a reference, or does not answer. "
    "Reply in JSON: a one-sentence justification, then correct (true or false)."
)


def _grading_messages(system: str, inp: "CorrectnessInput | ScoreInput", refs_label: str, answer_label: str) -> list[Message]:
    """The question, the references and the answer to judge, as the two judges show them."""
    refs = "\n".join(f"- {_clip(r, REFERENCE_MAX_CHARS)}" for r in inp.references[:MAX_REFERENCES])
    answer = f"{answer_label}: {_clip(inp.prediction, PREDICTION_MAX_CHARS)}"
    return laid_out(system, inp.question, [f"{refs_label}:"], f"{refs}\n{answer}", gap="\n")


class CorrectnessJudge(Agent[CorrectnessInput, CorrectnessOutput]):
    name = "judge_correct"
    max_tokens = 120

    def messages(self, inp: CorrectnessInput) -> list[Message]:
        return _grading_messages(_CORRECTNESS_SYSTEM, inp, "Reference answers", "Answer to grade")

    def fallback(self, inp: CorrectnessInput, error: StructuredOutputError) -> CorrectnessOutput:
        # lexical accuracy: a reference answer occurs in the prediction. (Imported here:
        # the metrics package imports this module while it initializes.)
        from marag.eval.metrics.lexical import contains_answer

        return CorrectnessOutput(
            justification=FALLBACK_REASON, correct=bool(contains_answer(inp.prediction, inp.references))
        )


# -- 0..5 similarity score (Agent-UniRAG's GPT score) ----------------------------------


class ScoreInput(BaseModel):
    question: str
    references: list[str]
    prediction: str


class ScoreOutput(BaseModel):
    reason: str = Field(max_length=JUSTIFICATION_MAX_CHARS)
    score: Literal[0, 1, 2, 3, 4, 5]


_SCORE_SYSTEM = (
    "You rate how closely an answer matches the reference answer to the same question, "
    "in meaning, from 0 to 5:\n"
    "5 = same meaning, nothing important missing\n"
    "4 = almost the same; a minor detail missing or added\n"
    "3 = partly the same; some key information missing\n"
    "2 = little in common with the reference\n"
    "1 = on topic but wrong\n"
    "0 = unrelated, empty, or contradicts the reference\n"
    "Reply in JSON: a short reason, then the score."
)


class ScoreJudge(Agent[ScoreInput, ScoreOutput]):
    name = "judge_score"
    max_tokens = 120

    def messages(self, inp: ScoreInput) -> list[Message]:
        return _grading_messages(_SCORE_SYSTEM, inp, "Reference answer", "Answer to rate")

    def fallback(self, inp: ScoreInput, error: StructuredOutputError) -> ScoreOutput:
        from marag.eval.metrics.lexical import max_token_f1

        f1 = max_token_f1(inp.prediction, inp.references)
        return ScoreOutput(reason=FALLBACK_REASON, score=min(5, math.floor(5 * f1 + 0.5)))  # half rounds up


# -- aspects (mRAG's correctness and faithfulness rewards) ------------------------------
#
# Both rewards follow the mRAG paper's scales. Correctness: each aspect of the *expected*
# answer is judged against the response on 2 / 1 / 0 / -1. Faithfulness: each aspect of
# the *response* is judged against the retrieved documents on 1 / 0 / -1. By default
# one aspect is judged per call, as in the paper; batching several aspects into one
# call is an option with the same scale.

Aspect = Annotated[str, Field(max_length=ASPECT_MAX_CHARS)]


class AspectsInput(BaseModel):
    question: str
    text: str


class AspectsOutput(BaseModel):
    aspects: list[Aspect] = Field(max_length=MAX_ASPECTS)


_ASPECTS_SYSTEM = (
    f"List the key facts (aspects) of the text, each as a short complete sentence that "
    f"makes sense on its own and states one fact. At most {MAX_ASPECTS}, most important "
    "first, no repeats. Reply in JSON with the list of aspects."
)


class AspectExtractor(Agent[AspectsInput, AspectsOutput]):
    name = "aspect_extractor"
    max_tokens = 400

    def messages(self, inp: AspectsInput) -> list[Message]:
        return laid_out(_ASPECTS_SYSTEM, inp.question, ask=f"Text: {_clip(inp.text, PREDICTION_MAX_CHARS)}", gap="\n")

    def fallback(self, inp: AspectsInput, error: StructuredOutputError) -> AspectsOutput:
        # empty: the caller stands the text's sentences in, and counts that it did
        return AspectsOutput(aspects=[])


class CorrectnessAspectsInput(BaseModel):
    question: str
    reference: str  # the expected answer the aspects were taken from
    response: str
    aspects: list[str]


class CorrectnessAspectsOutput(BaseModel):
    scores: list[Literal[-1, 0, 1, 2]] = Field(max_length=MAX_ASPECTS)


_CORRECTNESS_ASPECT_SYSTEM = (
    "You grade a response to a question against aspects of the expected answer. For each "
    "numbered aspect, read what the response says about it:\n"
    "2 = the response gets this aspect right, and what it says is relevant\n"
    "1 = the response gets this aspect right but adds irrelevant information\n"
    "0 = the response does not address this aspect, or declines to answer\n"
    "-1 = the response gets this aspect wrong\n"
    "Reply in JSON with one score per aspect, in order."
)


class CorrectnessAspectJudge(ListJudge[CorrectnessAspectsInput, CorrectnessAspectsOutput]):
    name = "aspect_correctness"
    max_tokens = 80
    items_field = "aspects"
    list_field = "scores"

    def messages(self, inp: CorrectnessAspectsInput) -> list[Message]:
        given = [
            f"Expected answer: {_clip(inp.reference, REFERENCE_MAX_CHARS)}",
            f"Response: {_clip(inp.response, PREDICTION_MAX_CHARS)}",
        ]
        return _labelling(_CORRECTNESS_ASPECT_SYSTEM, inp.question, given, "Aspects of the expected answer", inp.aspects, "score(s)")


class SupportInput(BaseModel):
    documents: list[str]
    aspects: list[str]


class SupportOutput(BaseModel):
    scores: list[Literal[-1, 0, 1]] = Field(max_length=MAX_ASPECTS)


_SUPPORT_SYSTEM = (
    "Judge each numbered statement against the documents only, not against what you know:\n"
    "1 = the documents fully support it\n"
    "0 = the documents support part of it\n"
    "-1 = the documents do not support it (they do not say it, or say otherwise)\n"
    "Reply in JSON with one score per statement, in order."
)


def pack_documents(texts: list[str]) -> list[str]:
    """Documents clipped to DOC_MAX_CHARS each, in order, until DOCS_MAX_TOTAL_CHARS."""
    packed, used = [], 0
    for t in texts:
        t = _clip(t, DOC_MAX_CHARS)
        if not t:
            continue
        if packed and used + len(t) > DOCS_MAX_TOTAL_CHARS:
            break
        packed.append(t)
        used += len(t)
    return packed


class SupportJudge(ListJudge[SupportInput, SupportOutput]):
    name = "aspect_support"
    max_tokens = 80
    items_field = "aspects"
    list_field = "scores"

    def messages(self, inp: SupportInput) -> list[Message]:
        given = [f"Documents:\n{numbered_passages(inp.documents)}", ""]  # "": a blank line before the statements
        return _labelling(_SUPPORT_SYSTEM, None, given, "Statements", inp.aspects, "score(s)")


# -- lexical stand-ins for a judgment the judge could not give ---------------------------
#
# Used only when the judge's output stays unusable (after the repair round trip and a
# per-item retry); every use is counted, and reports show how often it happened.

COVERED_RECALL = 0.5  # share of an aspect's content words the response must contain
SUPPORTED_RECALL = 0.8  # ... the documents must contain for "fully supported"
PARTLY_SUPPORTED_RECALL = 0.4


def _content_tokens(text: str) -> set[str]:
    from marag.eval.metrics.lexical import answer_tokens  # (import cycle, see CorrectnessJudge)

    return {t for t in answer_tokens(text) if t not in _STOPWORDS}


_STOPWORDS = frozenset(
    "is are was were be been of in on at to for and or by with as it its this that from "  # noqa: SIM905
    "which who what when where has have had not no".split()
)


def word_recall(claim: str, text: str) -> float:
    """Share of the claim's content words that occur in `text` (1.0 for a claim with none)."""
    words = _content_tokens(claim)
    return len(words & _content_tokens(text)) / len(words) if words else 1.0


def lexical_correctness(aspect: str, response: str) -> int:
    """Correctness stand-in: "correct" (1: words present, relevance unknown) when the
    response contains most of the aspect's words, else "not addressed" (0). It never
    says "wrong": word overlap cannot tell."""
    return 1 if word_recall(aspect, response) >= COVERED_RECALL else 0


def lexical_support(aspect: str, documents: list[str]) -> int:
    r = word_recall(aspect, " ".join(documents))
    return 1 if r >= SUPPORTED_RECALL else 0 if r >= PARTLY_SUPPORTED_RECALL else -1


# -- nugget assignment (AutoNuggetizer style) ------------------------------------------

NuggetLabel = Literal["support", "partial_support", "not_support"]


class NuggetInput(BaseModel):
    question: str
    answer: str
    nuggets: list[str]


class NuggetOutput(BaseModel):
    labels: list[NuggetLabel] = Field(max_length=NUGGET_BATCH)


_NUGGET_SYSTEM = (
    "You check which facts (nuggets) an answer states. Label each numbered nugget:\n"
    "support = the answer states it fully\n"
    "partial_support = the answer states part of it, or only vaguely\n"
    "not_support = the answer does not state it\n"
    "Reply in JSON with one label per nugget, in order."
)


class NuggetJudge(ListJudge[NuggetInput, NuggetOutput]):
    name = "nugget_assigner"
    max_tokens = 160
    items_field = "nuggets"
    list_field = "labels"

    def messages(self, inp: NuggetInput) -> list[Message]:
        given = [f"Answer: {_clip(inp.answer, PREDICTION_MAX_CHARS)}"]
        return _labelling(_NUGGET_SYSTEM, inp.question, given, "Nuggets", inp.nuggets, "labels")
