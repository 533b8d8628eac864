from __future__ import annotations

import asyncio

import pytest

from marag.corpus.models import Question
from marag.eval.metrics import EvalExample, score_example
from marag.eval.metrics.lexical import (
    bleu_tokens,
    contains_answer,
    exact_match,
    lcs_length,
    max_token_f1,
    normalize_answer,
    overlong,
    rouge_l,
    rouge_tokens,
    sentence_bleu,
    token_f1,
)


def _ex(prediction: str, answers: list[str], **metadata) -> EvalExample:
    return EvalExample(
        question=Question(id="q", question="?", answers=answers, metadata=metadata), prediction=prediction
    )


# -- normalization ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The  Cat!", "cat"),
        ("a cat, an owl and the dog.", "cat owl and dog"),
        ("  Hello,\tWORLD...  ", "hello world"),
        ("Theatre", "theatre"),  # articles only as whole words
        ("U.S.A. (1990)", "usa 1990"),
        ("!!!", ""),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


# -- EM / F1 / accuracy ----------------------------------------------------------------


def test_token_f1_by_hand():
    # prediction "the cat sat on the mat" -> tokens [cat, sat, on, mat]   (4)
    # gold       "a cat on a mat"         -> tokens [cat, on, mat]        (3)
    # common = {cat, on, mat} = 3;  P = 3/4, R = 3/3 = 1
    # F1 = 2 * (3/4) * 1 / (3/4 + 1) = 1.5 / 1.75 = 6/7
    assert token_f1("the cat sat on the mat", "a cat on a mat") == pytest.approx(6 / 7)


def test_token_f1_counts_repeats_and_empty_cases():
    # pred [cat, cat] vs gold [cat]: common = min(2, 1) = 1; P = 1/2, R = 1 -> F1 = 2/3
    assert token_f1("cat cat", "cat") == pytest.approx(2 / 3)
    assert token_f1("dog", "cat") == 0.0
    # SQuAD: when either side normalizes to nothing, 1 if both do, else 0
    assert token_f1("the", "a") == 1.0
    assert token_f1("the", "cat") == 0.0
    assert token_f1("cat", "!!") == 0.0


def test_em_and_f1_take_the_best_gold_answer():
    golds = ["Barack Obama", "Obama", "the 44th president"]
    assert exact_match("obama.", golds) == 1.0
    assert exact_match("President Obama", golds) == 0.0
    # best gold for "President Obama" is "Obama": P = 1/2, R = 1 -> 2/3
    assert max_token_f1("President Obama", golds) == pytest.approx(2 / 3)
    assert max_token_f1("anything", []) == 0.0


def test_accuracy_is_whole_token_containment():
    assert contains_answer("I think it was Paris, France.", ["paris"]) == 1.0
    assert contains_answer("It happened in 1990.", ["1"]) == 0.0  # not inside a token
    assert contains_answer("It happened in 1990.", ["London", "1990"]) == 1.0
    assert contains_answer("anything", ["the"]) == 0.0  # empty after normalization: ignored


def test_lexical_metrics_through_score_example():
    ex = _ex("The Eiffel Tower", ["Eiffel Tower", "the tower"])
    res = asyncio.run(score_example(ex, ["em", "f1", "accuracy", "rouge_l", "bleu"]))
    assert res["em"].value == 1.0 and res["f1"].value == 1.0 and res["accuracy"].value == 1.0
    # ROUGE-L keeps articles: [the, eiffel, tower] vs [eiffel, tower]: LCS 2, P = 2/3, R = 1
    # -> F = 2 * (2/3) / (5/3) = 0.8
    assert res["rouge_l"].value == pytest.approx(0.8)
    assert res["rouge_l"].details["reference"] == "answers"
    # no gold answers: EM/F1/accuracy do not apply and are left out
    ex2 = _ex("x", [], reference_answer="a long reference")
    assert set(asyncio.run(score_example(ex2, ["em", "f1", "rouge_l"]))) == {"rouge_l"}


# -- ROUGE-L ---------------------------------------------------------------------------


def test_lcs_and_rouge_l_by_hand():
    assert lcs_length("a b c d e".split(), "a c e f".split()) == 3
    # pred [police, killed, the, gunman] vs ref [police, kill, the, gunman]: LCS = 3
    # P = 3/4, R = 3/4 -> F = 3/4
    assert rouge_l("police killed the gunman", "police kill the gunman") == pytest.approx((0.75, 0.75, 0.75))
    assert rouge_l("", "x") == (0.0, 0.0, 0.0)


def test_rouge_l_uses_the_reference_answer_first():
    ex = _ex("the tower is in paris", ["Berlin"], reference_answer="The Eiffel Tower is in Paris.")
    res = asyncio.run(score_example(ex, ["rouge_l"]))["rouge_l"]
    # pred [the, tower, is, in, paris] (5), ref [the, eiffel, tower, is, in, paris] (6), LCS 5
    assert res.value == pytest.approx(2 * 1 * (5 / 6) / (1 + 5 / 6))
    assert res.details["reference"] == "reference_answer"


PAIRS = [
    ("The cat sat on the mat.", "A cat was sitting on the mat."),
    ("Barack Obama was born in Honolulu, Hawaii.", "Obama was born in Hawaii in 1961."),
    ("It's 3.5 km long; well-known, isn't it?", "The trail is 3.5 kilometres long and well known."),
    ("no overlap here", "completely different words"),
    ("the the the the", "the cat"),
    (
        "Vitamin D helps the body absorb calcium and supports bone health and immune function.",
        "Vitamin D is needed to absorb calcium; it keeps bones strong and supports the immune system.",
    ),
]


def test_rouge_l_equals_rouge_score():
    rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    for pred, ref in PAIRS:
        expected = scorer.score(ref, pred)["rougeL"]  # score(target, prediction)
        p, r, f = rouge_l(pred, ref)
        assert (p, r, f) == pytest.approx((expected.precision, expected.recall, expected.fmeasure), abs=1e-12)


def test_rouge_tokens_keep_non_ascii_letters():
    # rouge-score would drop "é" and "ü"; we keep whole words
    assert rouge_tokens("Café Müller, 2024!") == ["café", "müller", "2024"]


# -- BLEU ------------------------------------------------------------------------------


def test_bleu_by_hand():
    # hyp [the, cat, sat] vs ref [the, cat, sat, down] (add-1 on orders 2..4):
    # p1 = 3/3, p2 = (2+1)/(2+1), p3 = (1+1)/(1+1), p4 = (0+1)/(0+1) -> all 1
    # BP = exp(1 - 4/3) -> BLEU = exp(-1/3)
    b = sentence_bleu("the cat sat", ["the cat sat down"])
    assert b.precisions == pytest.approx((1.0, 1.0, 1.0, 1.0))
    assert b.score == pytest.approx(2.718281828459045 ** (-1 / 3))
    assert sentence_bleu("nothing shared", ["the cat"]).score == 0.0
    assert sentence_bleu("", ["the cat"]).score == 0.0
    assert sentence_bleu("The cat sat on the mat.", ["the cat sat on the mat ."]).score == pytest.approx(1.0)


def test_bleu_multi_reference_clipping_and_closest_length():
    # "the the the" vs refs "the cat" and "the the dog": clipped unigram count uses the
    # max count in any single reference (2), so p1 = 2/3
    b = sentence_bleu("the the the", ["the cat", "the the dog"])
    assert b.precisions[0] == pytest.approx(2 / 3)
    assert b.ref_len == 3  # closest reference length to 3 tokens
    # equally close lengths 2 and 4 for a 3-token hypothesis: the shorter is used
    assert sentence_bleu("a b c", ["a b", "a b c d"]).ref_len == 2


def _sacre_add1(hyp: str, refs: list[str], tokenize: str):
    sacrebleu = pytest.importorskip("sacrebleu")
    return (
        sacrebleu.sentence_bleu(
            hyp, refs, smooth_method="add-k", smooth_value=1, lowercase=True, tokenize=tokenize
        ).score
        / 100
    )


def test_bleu_arithmetic_equals_sacrebleu_on_our_tokens():
    # With our tokens given pre-split (tokenize="none"), sacrebleu's add-k (k=1) sentence
    # BLEU must equal ours exactly: smoothing, clipping, brevity penalty all match.
    for pred, ref in PAIRS + [("the the the", "the cat"), ("a b c", "a b c d e f g")]:
        ours = sentence_bleu(pred, [ref]).score
        theirs = _sacre_add1(" ".join(bleu_tokens(pred)), [" ".join(bleu_tokens(ref))], "none")
        assert ours == pytest.approx(theirs, abs=1e-9), (pred, ref)
    refs = ["the cat is on the mat", "there is a cat on the mat"]
    ours = sentence_bleu("the cat the cat on the mat", refs).score
    theirs = _sacre_add1("the cat the cat on the mat", refs, "none")
    assert ours == pytest.approx(theirs, abs=1e-9)


def test_bleu_matches_sacrebleu_13a_on_plain_prose():
    # On prose without apostrophes, hyphens or decimals our tokenizer splits like 13a.
    for pred, ref in [PAIRS[0], PAIRS[1], PAIRS[3], PAIRS[4]]:
        assert sentence_bleu(pred, [ref]).score == pytest.approx(_sacre_add1(pred, [ref], "13a"), abs=1e-9)
    # The documented difference: 13a keeps "it's", "well-known" and "3.5" whole.
    assert bleu_tokens("It's 3.5 well-known") == ["it", "'", "s", "3", ".", "5", "well", "-", "known"]
    pred, ref = PAIRS[2]
    assert sentence_bleu(pred, [ref]).score != pytest.approx(_sacre_add1(pred, [ref], "13a"), abs=1e-6)


def test_overlong_counts_words_past_the_longest_gold_answer():
    golds = ["Guido van Rossum", "Guido"]  # the longest has 3 words: up to 8 are fine
    assert overlong("Guido van Rossum", golds) == 0.0
    assert overlong("The creator of Python is Guido van Rossum", golds) == 0.0  # 8 words ("the" dropped: 7)
    assert overlong("The programming language Python was created by Guido van Rossum in 1991", golds) == 1.0
    assert overlong("yes", ["yes"]) == 0.0 and overlong("yes, both of them were born in the UK", ["yes"]) == 1.0
    assert overlong("a b c d e f", ["x"], slack=5) == 0.0 and overlong("b c d e f g h", ["x"], slack=5) == 1.0


def test_overlong_is_a_default_metric():
    from marag.eval.answering import DEFAULT_METRICS
    from marag.eval.metrics import METRICS

    assert "overlong" in DEFAULT_METRICS
    ex = _ex("It was created by a Dutch programmer named Guido van Rossum.", ["Guido van Rossum"])
    assert asyncio.run(METRICS.get("overlong")().score(ex)).value == 1.0
