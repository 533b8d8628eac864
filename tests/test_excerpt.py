"""`excerpt`: what a reader looking for something sees of a long document (UniRAG's
reflector, mRAG's relevance judge): the first sentence, then the sentences nearest the
query while they fit, in the document's order, with "…" where sentences were left out."""

from __future__ import annotations

import random

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
    assert out == "Maren Holt (1871-1950) was a Norwegian printer and writer. … Holt grew up in Brekke, a village on the west coast. …"
    assert len(out) <= 130
    assert "Brekke" not in TEXT[:130]  # a plain cut of the same length misses the answer


def test_ties_and_sentences_sharing_nothing_fill_the_room_in_the_documents_order():
    # "press" and "book" each share one word; only one fits: the earlier
    out = excerpt(TEXT, "press book", 112)
    assert out == "Maren Holt (1871-1950) was a Norwegian printer and writer. She worked for many years at a press in Bergen. …"
    # nothing near the query: the document's own order, as a plain cut would read it
    assert excerpt(TEXT, "stock prices", 160) == (
        "Maren Holt (1871-1950) was a Norwegian printer and writer. She worked for many years at a press in Bergen. "
        "Her first book was a collection of sea songs. …"
    )


def test_never_longer_than_asked():
    out = excerpt(TEXT, "Brekke", 30)
    assert len(out) <= 30 and out.startswith("Maren Holt") and out.endswith("…")
    rng = random.Random(0)
    words = "alpha beta gamma delta. epsilon! zeta? eta theta iota kappa. lambda mu".split()
    for _ in range(2000):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 60)))
        chars = rng.randint(1, 200)
        assert len(excerpt(text, "beta zeta kappa", chars)) <= chars


# an infobox flattened into one "sentence" (MuSiQue's Kansas paragraph, shortened and
# renamed): no sentence break before the field the reader asks about
INFOBOX = (
    "State of Norland Flag Seal Nickname: The Fern State; The Lake State Motto: Always north "
    "State song: Pines of the North Official language English Demonym Norlander Time zone Central "
    "Capital Vesby Largest city Ardal Largest metro Greater Ardal City Area Ranked 20th Total "
    "61,204 sq mi (158,500 km2) Width 300 miles Length 210 miles Population Ranked 31st Total "
    "3,104,552 (2017 est.) Density 50.7 / sq mi Elevation Highest point Mount Kell 3,020 ft "
    "Admission to Union March 3, 1859 Governor Ada Lund Legislature Norland Assembly"
)


def test_a_sentence_longer_than_the_room_is_cut_where_the_words_looked_for_begin():
    about = "What is the population of the state where Ardal Regional Airport is?"
    out = excerpt(INFOBOX, about, 300)
    assert len(out) <= 300 and out.startswith("State of Norland")
    # the field's name and its value in one piece
    assert "Population Ranked 31st Total 3,104,552" in out
    assert "Population" not in INFOBOX[:300]  # a plain cut (before, the clipped "sentence") misses it


def test_among_sentences_sharing_as_many_words_the_rarer_word_wins():
    text = "Ola Berg is a Norwegian skier. Berg won a race in Oslo. He was born in Tromsø. Berg retired in 2019."
    # one word each: "Berg" is in three sentences, "born" in one, so the birth sentence
    # comes first although it is later (the document's order alone chose the race)
    out = excerpt(text, "Where was Berg born?", 70)
    assert out == "Ola Berg is a Norwegian skier. … He was born in Tromsø. …"
