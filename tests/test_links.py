"""Title links (`marag.index.links`): which documents of an index a text names, checked
against `named_in`, the rule the agents already use for documents they have read."""

from __future__ import annotations

from marag.agents.documents import named_in
from marag.corpus.models import Chunk
from marag.index.base import Hit
from marag.index.links import TitleLinks, title_links

TITLES = ["Paul Gross (actor)", "Frozen", "West Chicago", "West Chicago, Illinois", "AT&amp;T", "Iowa", "Ed", "Kim Jong-il", "Kim Jong-il (disambiguation)"]
CHUNKS = [Chunk(id=f"d{i}#{j}", doc_id=f"d{i}", text=f"text {i}", title=t) for i, t in enumerate(TITLES) for j in range(2)]
TEXTS = [
    "The film starred Paul Gross and was shot near frozen lakes.",
    "Harris Fawell was born in West Chicago, Illinois, in 1929; AT&T later built a plant in Iowa.",
    "Kim Jong-ils sons; Ed Sheeran; Iowan farms; Frozen (2013) is a film.",
]


def test_named_titles_match_named_in():
    links = TitleLinks(CHUNKS)
    hits = [Hit(doc_id=c.doc_id, chunk_id=c.id, score=0.0, text=c.text, title=c.title) for c in CHUNKS[::2]]
    for text in TEXTS:
        by_rule = {h.doc_id for h in named_in([text], hits)}
        assert {CHUNKS[p].doc_id for p in links.named([text])} == by_rule
    # what that rule means, spelled out: qualifier dropped, case and whole words kept,
    # entities decoded, short titles never named, every title a place names
    assert [CHUNKS[p].title for p in links.named([TEXTS[0]])] == ["Paul Gross (actor)"]
    assert [CHUNKS[p].title for p in links.named([TEXTS[1]])] == ["West Chicago", "West Chicago, Illinois", "AT&amp;T", "Iowa"]
    assert [CHUNKS[p].title for p in links.named([TEXTS[2]])] == ["Frozen"]


def test_order_of_naming_first_chunk_and_skip():
    links = TitleLinks(CHUNKS)
    # earlier texts first, then by place in the text; each document once, at its first chunk
    positions = links.named(["in Iowa", "Paul Gross met Kim Jong-il in Iowa"])
    assert [CHUNKS[p].id for p in positions] == ["d5#0", "d0#0", "d7#0", "d8#0"]
    assert [CHUNKS[p].doc_id for p in links.named(["in Iowa with Paul Gross"], skip={"d5"})] == ["d0"]
    # 7 titles to look for: "Ed" is too short, two documents share "Kim Jong-il"
    assert links.named(["nothing here"]) == [] and len(links) == 7


def test_title_links_need_a_local_index(tmp_path):
    from twohop import DOCS, bm25_retriever

    retriever = bm25_retriever(tmp_path, DOCS)
    links = title_links(retriever)
    assert links is not None and title_links(retriever) is links  # made once
    assert [retriever.chunks[p].doc_id for p in links.named(["written by Maren Holt"])] == ["holt"]

    class Remote:
        def search(self, query, k=10, offset=0):
            return []

    assert title_links(Remote()) is None
