"""What kind of short answer a question asks for, and whether an answer is of that kind.

Only the kinds a few words decide are checked: a date ("When ...", "In what year ..."),
a quantity ("How many ...", "How old ..."), yes or no ("Are both ... ?") and one of the
candidates a question names ("..., The Exies or Circus Diablo?": the answer must share a
word with the question). The rest
(a person, a place, a thing) would need a tagger, and the answer itself is usually a
name there, right or wrong. A short answer of the wrong kind is the reader answering
the bridge entity instead of the question: "Guyana" for "When did the country where
Clonbrook is located become a member of CARICOM?", "Louis Armstrong" for "When did the
spouse of Lil Hardin Armstrong make What a Wonderful World?".

Measured offline over the default model's runs of the last sessions (HotpotQA and
MuSiQue, all strategies, 604 answers): 107 answers to questions of these three kinds,
12 of them not of the kind asked, none right (all F1 0), and no right answer flagged.
"What is the population of ...?" joined the quantities later (2026-11-28: mRAG and
vanilla_rag_k5 both answered "Kansas" to MuSiQue's "What is the population of the state
where Dodge City Regional Airport is located?"), then a measure of something (2026-12-03:
mRAG answered "China" to MuSiQue's "What is the debt load for the US carried by the
country Dai Jitao is from?"; among the 1,300 HotpotQA, MuSiQue, NQ and DataMorgana
questions here the pattern finds that one and "What amount of TEUs ...?", and nothing
else once "area" was left out: it took "In which area of the continent ..."), and so did
the candidates: over the runs of 2026-11-27/28 (454 distinct answers), 20 answered a
question naming candidates with "or", 3 of them with a name the question does not give
("Metallica" for "The Exies or Circus Diablo"), none right.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from marag.agents.search.memory import words

_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_NUMBER_WORDS = (
    "zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|"
    "seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|"
    "million|billion|once|twice|thrice|dozen|several|none"
)
# An answer that says the passages lack it is not sent back: asked again, the model
# would have to guess, and a guess is worse than saying so.
_SAYS_UNKNOWN = re.compile(
    r"\b(?:do(?:es)? not|don'?t|cannot|can'?t|unable to) (?:know|say|determine|find|answer)|\bunknown\b|"
    r"\bnot (?:mentioned|stated|given|provided|specified|known)\b|\bno information\b",
    re.IGNORECASE,
)


def says_unknown(answer: str) -> bool:
    """Whether an answer says the passages (or the model) do not give it."""
    return bool(_SAYS_UNKNOWN.search(answer))


class AnswerKind(NamedTuple):
    name: str
    asked: re.Pattern[str]  # matches the question (spaces collapsed) that asks for this kind
    fits: Callable[[str, str], bool]  # (question, answer), both lower-cased: the answer is of this kind
    wanted: str  # how the note sent back names what is asked


def _found(pattern: str) -> Callable[[str, str], bool]:
    """An answer of the kind contains `pattern`."""
    compiled = re.compile(pattern)
    return lambda question, answer: bool(compiled.search(answer))


FUNCTION_WORDS = frozenset({"a", "an", "the", "of", "and", "or", "in", "on", "at", "to", "for", "by", "is", "was"})


def _shares_a_word(question: str, answer: str) -> bool:
    """The answer names something the question names (one of the candidates it offers).
    Words of any script (`memory.words`): a name like "Москва" is words too."""
    return bool((set(words(answer)) - FUNCTION_WORDS) & set(words(question)))


# In order: the first kind whose question pattern matches is the one asked.
ANSWER_KINDS: tuple[AnswerKind, ...] = (
    AnswerKind(
        "date",
        re.compile(r"^when\b|\b(?:what|which) (?:year|date|decade|century)\b", re.IGNORECASE),
        _found(rf"\d|\b(?:{_MONTHS})\b|\bcentury\b|\bdecade\b|\b(?:ancient|medieval|prehistoric)\b"),
        "a date or a year",
    ),
    AnswerKind(
        "quantity",
        re.compile(
            r"\bhow (?:many|much|long|old|tall|far|big|large|high|deep|wide|heavy)\b|"
            r"\b(?:what|which) (?:(?:is|was) the )?(?:number|percentage|population)\b(?! (?:one|ranking|rank)\b)|"
            # a measure "of"/"for" something: "What is the debt load for the US ...?", "What
            # amount of TEUs ...?" ("area" is left out: "which area of the continent" asks a place)
            # (the words around the measure are a closed list: "which speed skater for",
            # "what weight class of" ask for names)
            r"\b(?:what|which) (?:(?:is|was|are|were) )?(?:the )?(?:(?:total|annual|average|estimated|maximum|top|seating) )?"
            r"(?:amount|debt|cost|price|budget|revenue|salary|attendance|elevation|capacity|height|length|width|depth|"
            r"weight|distance|speed)(?: (?:load|level|figure))? (?:of|for)\b",
            re.IGNORECASE,
        ),
        _found(rf"\d|\b(?:{_NUMBER_WORDS})\b"),
        "a number or an amount",
    ),
    AnswerKind(
        "yes_no",
        # starts with an auxiliary verb and offers no alternatives ("Is X or Y older?" asks for a name)
        re.compile(r"^(?:is|are|was|were|do|does|did|can|could|has|have|had|will|would|should)\b(?!.*\bor\b)", re.IGNORECASE),
        _found(r"^\W*(?:yes|no)\b"),
        '"yes" or "no"',
    ),
    AnswerKind(
        "choice",
        # offers candidates by name: "..., The Exies or Circus Diablo?" (case-sensitive: a
        # capital or a digit after "or"; "shot in or around Leland" offers none)
        re.compile(r"\bor (?:the )?[A-Z0-9][^?]*\?\s*$"),
        _shares_a_word,
        "one of the candidates it names",
    ),
)


def asked_kind(question: str) -> AnswerKind | None:
    """The kind of answer `question` asks for, or None when a few words do not decide it."""
    text = " ".join(question.split())
    return next((kind for kind in ANSWER_KINDS if kind.asked.search(text)), None)


# A short answer is a span; these mark a sentence written around it. Auxiliaries and
# relative words count only in lower case: a title keeps its capitals ("The Man Who
# Would Be King" is a name), a sentence does not ("... served as chief of staff to
# Barnaby Joyce, who has served as ...").
_SENTENCE_WORDS = re.compile(
    r"\b(?:is|are|was|were|has|have|had|did|does|will|would|can|could|who|which|while|because|whereas)\b"
)
SENTENCE_MIN_WORDS = 6  # a name or a date with its qualifiers is rarely longer (gold + 5 is `overlong`)


def reads_as_sentence(answer: str) -> bool:
    """Whether a short answer is a sentence around the span asked for rather than the
    span: at least six words, and a full stop at its end or a lower-case auxiliary or
    relative word inside ("The 1932 Deep South tornado outbreak killed more people than
    the 2012 tornado outbreak."). An answer saying it is unknown is not one (asked
    again, the model would guess). Over the default model's runs of 2026-11-28/29 (164
    distinct answers to HotpotQA and MuSiQue), the 7 answers this flags had F1 .15 at
    best; the 4 other answers of six words or more (a treaty's name, a name with its
    party, a college with its town, a name with a university) are not flagged."""
    tokens = answer.split()
    text = " ".join(tokens)
    if len(tokens) < SENTENCE_MIN_WORDS or _SAYS_UNKNOWN.search(text):
        return False
    return text.endswith(".") or bool(_SENTENCE_WORDS.search(text))


def wrong_kind(question: str, answer: str) -> AnswerKind | None:
    """The kind `question` asks for when `answer` is not of it (and does not say it is
    unknown), else None."""
    kind = asked_kind(question)
    if kind is None or not answer.strip() or _SAYS_UNKNOWN.search(answer):
        return None
    return None if kind.fits(question.lower(), answer.lower()) else kind
