"""`named_in`: which documents a text names by title (the bridge from a two-hop
question's first document to its second)."""

from __future__ import annotations

from marag.agents.documents import named_in
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
