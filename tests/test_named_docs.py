"""`named_in`: which documents a text names by title (the bridge from a two-hop
question's first document to its second)."""

from __future__ import annotations

from marag.agents.documents import named_in
from marag.agents.search.subset import with_named
from marag.index.base import Hit


def hit(title: str) -> Hit:
    return Hit(doc_id=title, chunk_id=f"{title}#0", score=0.0, text="", title=title)


def titles(texts, hits) -> list[str]:
    return [h.title for h in named_in(texts, hits)]


def test_a_title_is_named_as_written_without_its_qualifier():
    hits = [hit("Paul Gross (actor)"), hit("Frozen (2013 film)"), hit("Simon &amp; Simon"), hit("Due South")]
    text = "Due South starred Paul Gross; frozen lakes; he appeared in Simon & Simon."
    # case and word boundaries count ("frozen" is not "Frozen"); HTML entities are decoded
    assert titles([text], hits) == ["Paul Gross (actor)", "Simon &amp; Simon", "Due South"]
    assert titles(["Paul Grossman was a painter"], hits) == []  # a word boundary, not a prefix


def test_the_order_of_the_hits_is_kept_and_any_text_names():
    hits = [hit("Brekke"), hit("Maren Holt"), hit("Salt Winter")]
    assert titles(["Where did the author of Salt Winter grow up?", "written by Maren Holt"], hits) == ["Maren Holt", "Salt Winter"]


def test_short_titles_and_no_texts_name_nothing():
    hits = [hit("USA"), hit("Oslo (city)"), hit("Norway")]
    assert titles(["the USA, Oslo and Norway"], hits) == ["Oslo (city)", "Norway"]
    assert titles(["the USA, Oslo and Norway"], [hit("USA")]) == []
    assert titles([], hits) == []


def page(title: str, text: str = "") -> Hit:
    return Hit(doc_id=title, chunk_id=f"{title}#0", score=0.0, text=text, title=title)


def test_with_named_keeps_the_pages_the_question_names_and_their_next_hop():
    ranked = [
        page("T.M. Landry College Preparatory", "A college preparatory school in Louisiana."),
        page("Worksop College Preparatory School"),
        page("Charles Andrews (Maine politician)", "He attended the district school and graduated from Hebron Academy. See Worksop College Preparatory School."),
        page("Rexford College Preparatory School"),
        page("TMI"),
        page("Hebron Academy", "A boarding school for boys and girls."),
    ]
    got = [h.title for h in with_named(ranked, "Charles Andrews graduated from what college preparatory boys' school?", 3)]
    # the named page, and the page below the first 3 that its text names (Worksop, named
    # too, is among the first 3: read anyway), then the best-ranked other page; in ranked order
    assert got == ["T.M. Landry College Preparatory", "Charles Andrews (Maine politician)", "Hebron Academy"]
    got = [h.title for h in with_named(ranked, "Charles Andrews graduated from what college preparatory boys' school?", 4)]
    assert got == ["T.M. Landry College Preparatory", "Worksop College Preparatory School", "Charles Andrews (Maine politician)", "Hebron Academy"]
    # more to keep than n: the named page before its hop (Worksop, below the first 1)
    got = [h.title for h in with_named(ranked, "Charles Andrews graduated from what college preparatory boys' school?", 1)]
    assert got == ["Charles Andrews (Maine politician)"]
    # two pages named below the first n (both titled "Hebron Academy"): the better-ranked one is the hop
    ranked[4] = page("Hebron Academy (Maine)")
    got = [h.title for h in with_named(ranked, "Charles Andrews graduated from what college preparatory boys' school?", 2)]
    assert got == ["Charles Andrews (Maine politician)", "Hebron Academy (Maine)"]


def test_with_named_keeps_both_pages_of_a_comparison_and_never_more_than_n():
    ranked = [page("Iain Banks"), page("The Wasp Factory"), page("Espedair Street"), page("Irwin Shaw")]
    question = "Between Iain Banks and Irwin Shaw, which writer has had a more diverse career?"
    assert [h.title for h in with_named(ranked, question, 2)] == ["Iain Banks", "Irwin Shaw"]
    assert [h.title for h in with_named(ranked, question, 1)] == ["Iain Banks"]  # the better-ranked one
    # nothing named: the ranking's first n, as rank_within gives them
    assert with_named(ranked, "Who wrote a novel about a wasp?", 3) == ranked[:3]
