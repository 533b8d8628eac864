"""Answer metrics computed from the text alone: EM, token F1, accuracy, ROUGE-L, BLEU.

EM, F1 and accuracy follow the SQuAD conventions (normalize, then compare tokens) and
take the best score over the gold answers. ROUGE-L and BLEU compare against the
reference answer (`metadata["reference_answer"]`, else the gold answers).

ROUGE-L and BLEU are implemented here rather than imported so that marag's core has no
extra dependency; tests check them against `rouge-score` and `sacrebleu`.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from marag.corpus.models import Question
from marag.eval.metrics.base import METRICS, EvalExample, Metric, MetricResult
from marag.llm.base import LLM

# -- normalization -------------------------------------------------------------------

_PUNCTUATION = frozenset(string.punctuation)  # SQuAD removes ASCII punctuation only
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lowercase, drop punctuation, drop the articles a/an/the,
    collapse whitespace. `"The  Cat!"` -> `"cat"`."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def answer_tokens(text: str) -> list[str]:
    return normalize_answer(text).split()


# -- EM, F1, accuracy ------------------------------------------------------------------


def exact_match(prediction: str, golds: Iterable[str]) -> float:
    """1.0 when the normalized prediction equals some normalized gold answer."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds))


def token_f1(prediction: str, gold: str) -> float:
    """Harmonic mean of token precision and recall after normalization (tokens counted
    with multiplicity). When either side normalizes to nothing, SQuAD scores 1.0 if
    both do and 0.0 otherwise."""
    pred, ref = answer_tokens(prediction), answer_tokens(gold)
    if not pred or not ref:
        return float(pred == ref)
    overlap = sum((Counter(pred) & Counter(ref)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred), overlap / len(ref)
    return 2 * precision * recall / (precision + recall)


def max_token_f1(prediction: str, golds: Iterable[str]) -> float:
    return max((token_f1(prediction, g) for g in golds), default=0.0)


def contains_answer(prediction: str, golds: Iterable[str]) -> float:
    """1.0 when some normalized gold answer occurs in the normalized prediction, as
    whole tokens (so the gold "1" does not match "1990"). Golds that normalize to
    nothing are ignored: they would match every prediction."""
    padded = f" {normalize_answer(prediction)} "
    for g in golds:
        gold = normalize_answer(g)
        if gold and f" {gold} " in padded:
            return 1.0
    return 0.0


JUDGEMENTS = frozenset({"yes", "no"})  # gold answers that are a verdict, not a span


def gives_answer(prediction: str, golds: Iterable[str]) -> float:
    """`contains_answer`, except that a yes/no gold must be the reply's first word: "no"
    occurs in "There is no information", which does not answer "no". The standard
    accuracy metric keeps plain containment (comparable with published numbers); what
    counts an answer as right (`eval.attribution`, the reference reward) uses this."""
    words = normalize_answer(prediction).split()
    for g in golds:
        gold = normalize_answer(g)
        if gold in JUDGEMENTS:
            if words[:1] == [gold]:
                return 1.0
        elif contains_answer(prediction, [g]):
            return 1.0
    return 0.0


# -- ROUGE-L ---------------------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+")  # runs of letters and digits


def rouge_tokens(text: str) -> list[str]:
    """Lowercased runs of letters and digits, everything else a separator. On ASCII text
    this is rouge-score's default tokenizer; unlike it, non-ASCII letters are kept."""
    return _WORD.findall(text.lower())


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence (dynamic programming, two rows)."""
    if len(a) < len(b):
        a, b = b, a  # keep the rows as short as possible
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, 1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]


def rouge_l(prediction: str, reference: str) -> tuple[float, float, float]:
    """ROUGE-L (precision, recall, F-measure with beta = 1) on `rouge_tokens`, no stemming."""
    pred, ref = rouge_tokens(prediction), rouge_tokens(reference)
    if not pred or not ref:
        return 0.0, 0.0, 0.0
    lcs = lcs_length(pred, ref)
    if lcs == 0:
        return 0.0, 0.0, 0.0
    p, r = lcs / len(pred), lcs / len(ref)
    return p, r, 2 * p * r / (p + r)


# -- BLEU ------------------------------------------------------------------------------

_BLEU_TOKEN = re.compile(r"[^\W_]+|\S")  # words, and every other visible character alone


def bleu_tokens(text: str) -> list[str]:
    """Lowercased words and single punctuation marks. Matches sacrebleu's `13a`
    tokenizer (lowercased) on plain prose; it differs where 13a keeps a mark inside a
    token: apostrophes ("it's"), hyphens ("well-known") and decimal points ("3.5")."""
    return _BLEU_TOKEN.findall(text.lower())


@dataclass(frozen=True)
class BleuScore:
    score: float  # 0..1
    precisions: tuple[float, ...]  # smoothed n-gram precisions, n = 1..max_order
    brevity_penalty: float
    hyp_len: int
    ref_len: int


def _ngrams(tokens: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def sentence_bleu(hypothesis: str, references: Sequence[str], max_order: int = 4, add_k: float = 1.0) -> BleuScore:
    """Sentence BLEU-4 with add-one smoothing ("BLEU+1", Lin & Och 2004; Chen & Cherry
    2014's method 2 as sacrebleu implements it, `smooth_method="add-k"`, k = 1): the
    unigram precision is left as is, and k is added to the matched and total counts of
    every higher order, so a short answer with no 4-gram match still scores above 0.

    Multiple references: n-gram counts are clipped by the largest count in any one
    reference, and the brevity penalty uses the reference length closest to the
    hypothesis length (the shorter one on ties). A hypothesis sharing no unigram with
    any reference scores 0.
    """
    hyp = bleu_tokens(hypothesis)
    refs = [bleu_tokens(r) for r in references]
    if not refs:
        return BleuScore(0.0, (0.0,) * max_order, 0.0, len(hyp), 0)
    ref_len = min((len(r) for r in refs), key=lambda n: (abs(n - len(hyp)), n))
    if len(hyp) >= ref_len:
        bp = 1.0
    else:
        bp = math.exp(1 - ref_len / len(hyp)) if hyp else 0.0

    matched, totals = [], []
    for n in range(1, max_order + 1):
        counts = _ngrams(hyp, n)
        best_ref: Counter[tuple[str, ...]] = Counter()
        for r in refs:
            best_ref |= _ngrams(r, n)  # element-wise max over references
        matched.append(sum(min(c, best_ref[g]) for g, c in counts.items()))
        totals.append(max(len(hyp) - n + 1, 0))
    if matched[0] == 0:  # no n-gram of any order can match without a unigram match
        return BleuScore(0.0, (0.0,) * max_order, bp, len(hyp), ref_len)

    precisions = [matched[0] / totals[0]]
    precisions += [(m + add_k) / (t + add_k) for m, t in zip(matched[1:], totals[1:])]
    log_mean = sum(math.log(p) if p > 0 else -math.inf for p in precisions) / max_order
    return BleuScore(bp * math.exp(log_mean), tuple(precisions), bp, len(hyp), ref_len)


# -- which references an example is scored against ----------------------------------


def reference_texts(q: Question) -> tuple[list[str], str]:
    """The reference answer(s) for ROUGE-L / BLEU and where they came from."""
    ref = q.metadata.get("reference_answer")
    if isinstance(ref, str) and ref.strip():
        return [ref], "reference_answer"
    return [a for a in q.answers if a.strip()], "answers"


# -- registered metrics ----------------------------------------------------------------


@METRICS.register("em")
class ExactMatch(Metric):
    name = "em"
    requires = frozenset({"answers"})
    description = "Exact match after SQuAD normalization, best over gold answers."

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        return MetricResult(value=exact_match(ex.prediction, ex.question.answers))


@METRICS.register("f1")
class TokenF1(Metric):
    name = "f1"
    requires = frozenset({"answers"})
    description = "SQuAD token F1 after normalization, best over gold answers."

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        return MetricResult(value=max_token_f1(ex.prediction, ex.question.answers))


@METRICS.register("accuracy")
class Accuracy(Metric):
    name = "accuracy"
    requires = frozenset({"answers"})
    description = "Lexical match: a normalized gold answer occurs (as whole tokens) in the normalized prediction."

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        return MetricResult(value=contains_answer(ex.prediction, ex.question.answers))


OVERLONG_SLACK = 5  # words an answer may run past the longest gold answer


def overlong(prediction: str, golds: Iterable[str], slack: int = OVERLONG_SLACK) -> float:
    """1.0 when the prediction has more than `slack` words beyond the longest gold
    answer (normalized tokens): a sentence where a span was asked for. Its mean over a
    run is the share of padded answers, which cost F1 without being wrong."""
    longest = max((len(answer_tokens(g)) for g in golds), default=0)
    return float(len(answer_tokens(prediction)) > longest + slack)


@METRICS.register("overlong")
class Overlong(Metric):
    name = "overlong"
    requires = frozenset({"answers"})
    description = f"1 when the answer is more than {OVERLONG_SLACK} words longer than the longest gold answer (lower is better)."
    worst = 1.0  # a failed question is not a well-kept short answer

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        return MetricResult(value=overlong(ex.prediction, ex.question.answers))


@METRICS.register("rouge_l")
class RougeL(Metric):
    name = "rouge_l"
    requires = frozenset({"reference"})
    description = "ROUGE-L F-measure (token LCS, no stemming) against the reference answer, else best over answers."

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        refs, source = reference_texts(ex.question)
        best = max((rouge_l(ex.prediction, r) for r in refs), key=lambda prf: prf[2], default=(0.0, 0.0, 0.0))
        p, r, f = best
        return MetricResult(value=f, details={"precision": p, "recall": r, "reference": source})


@METRICS.register("bleu")
class Bleu(Metric):
    name = "bleu"
    requires = frozenset({"reference"})
    description = "Sentence BLEU-4 (0..1) with add-one smoothing (BLEU+1) against the reference(s), lowercased."

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        refs, source = reference_texts(ex.question)
        b = sentence_bleu(ex.prediction, refs)
        return MetricResult(
            value=b.score,
            details={
                "precisions": [round(p, 6) for p in b.precisions],
                "brevity_penalty": round(b.brevity_penalty, 6),
                "reference": source,
            },
        )
