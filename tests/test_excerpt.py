"""`excerpt`: what a reader looking for something sees of a long document (UniRAG's
reflector): the first sentence, then the sentences nearest the query, in order."""

from __future__ import annotations

from marag.agents.documents import excerpt

TEXT = (
    "Maren Holt (1871-1950) was a Norwegian printer and writer. "
    "She worked for many years at a press in Bergen. "
    "Her first book was a collection of sea songs. "
    "Holt grew up in Brekke, a village on the west coast. "
    "She never married."
)


def test_a_text_that_fits_is_whole_on_one_line():
    assert excerpt("One  line.\nTwo lines.", "anything", 100) == "One line. Two lines."


def test_the_first_sentence_then_the_sentences_nearest_the_query_in_order():
    out = excerpt(TEXT, "Where did Maren Holt grow up? village", 130)
    assert out == "Maren Holt (1871-1950) was a Norwegian printer and writer. … Holt grew up in Brekke, a village on the west coast."
    assert len(out) <= 130
    # a plain cut of the same length misses the answer
    assert "Brekke" not in TEXT[:130]


def test_nothing_near_the_query_leaves_the_first_sentence_and_ties_go_to_the_earlier_sentence():
    assert excerpt(TEXT, "stock prices", 130) == "Maren Holt (1871-1950) was a Norwegian printer and writer."
    # "press" and "book" each share one word; only one fits: the earlier
    out = excerpt(TEXT, "press book", 110)
    assert out == "Maren Holt (1871-1950) was a Norwegian printer and writer. She worked for many years at a press in Bergen."


def test_never_longer_than_asked_even_when_the_first_sentence_is_not():
    out = excerpt(TEXT, "Brekke", 30)
    assert len(out) <= 30 and out.startswith("Maren Holt") and out.endswith("…")
