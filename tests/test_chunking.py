from __future__ import annotations

import logging
import time

import pytest

from marag.corpus import Document, chunk_documents


def _doc(n_words: int, doc_id: str = "d", sep: str = " ", **kw) -> Document:
    return Document(id=doc_id, text=sep.join(f"w{i}" for i in range(n_words)), **kw)


def test_short_document_gives_one_chunk():
    doc = Document(id="a", title="Title", text="  hello   world \n", metadata={"k": "v"})
    (chunk,) = chunk_documents([doc], size=10, overlap=2)
    assert chunk.id == "a#0" and chunk.doc_id == "a" and chunk.position == 0
    assert chunk.text == "hello   world"
    assert chunk.title == "Title" and chunk.metadata == {"k": "v"}


def test_exactly_size_tokens_is_one_chunk():
    assert len(chunk_documents([_doc(10)], size=10, overlap=3)) == 1


def test_windows_and_overlap():
    chunks = chunk_documents([_doc(25)], size=10, overlap=3)
    # step 7: windows [0,10) [7,17) [14,24) [21,25); the last one ends at the last token.
    assert [c.id for c in chunks] == ["d#0", "d#1", "d#2", "d#3"]
    assert [c.position for c in chunks] == [0, 1, 2, 3]
    words = [c.text.split() for c in chunks]
    assert words[0] == [f"w{i}" for i in range(0, 10)]
    assert words[1] == [f"w{i}" for i in range(7, 17)]
    assert words[2] == [f"w{i}" for i in range(14, 24)]
    assert words[3] == [f"w{i}" for i in range(21, 25)]
    assert words[0][-3:] == words[1][:3]  # overlap of 3 tokens


def test_last_window_ends_at_last_token():
    chunks = chunk_documents([_doc(23)], size=10, overlap=3)
    assert [c.text.split()[0] for c in chunks] == ["w0", "w7", "w14"]
    assert chunks[-1].text.split() == [f"w{i}" for i in range(14, 23)]
    # No window is a pure tail of the previous one.
    assert len(chunk_documents([_doc(17)], size=10, overlap=3)) == 2


def test_zero_overlap_partitions_tokens():
    chunks = chunk_documents([_doc(30)], size=10, overlap=0)
    assert " ".join(c.text for c in chunks) == _doc(30).text


@pytest.mark.parametrize("sep", [" ", "\n", " \n\t ", "  "])
def test_text_is_an_exact_slice_of_the_document(sep):
    doc = _doc(40, sep=sep)
    for c in chunk_documents([doc], size=8, overlap=2):
        assert c.text in doc.text
        assert c.text == sep.join(c.text.split(sep))
        assert not c.text[0].isspace() and not c.text[-1].isspace()


def test_whitespace_inside_chunks_is_preserved():
    text = "Title line\n\n  indented   words\tand\ttabs\n" + " ".join(["x"] * 20)
    doc = Document(id="t", text=text)
    first = chunk_documents([doc], size=8, overlap=1)[0]
    assert first.text == "Title line\n\n  indented   words\tand\ttabs\nx x"  # 8 tokens


def test_empty_documents_are_skipped_and_counted(caplog):
    docs = [Document(id="e1", text=""), Document(id="e2", text=" \n\t"), _doc(3, "ok")]
    with caplog.at_level(logging.INFO, logger="marag.corpus.chunking"):
        chunks = chunk_documents(docs, size=5, overlap=1)
    assert [c.doc_id for c in chunks] == ["ok"]
    assert chunks.skipped_empty == 2
    assert "skipped 2 document(s)" in caplog.text


def test_metadata_is_copied_not_shared():
    doc = Document(id="m", text="a b c", metadata={"folder": "x"})
    chunk = chunk_documents([doc], size=5, overlap=0)[0]
    chunk.metadata["folder"] = "changed"
    assert doc.metadata["folder"] == "x"


@pytest.mark.parametrize(
    ("size", "overlap", "message"),
    [
        (10, 10, "larger than the overlap"),
        (5, 8, "larger than the overlap"),
        (10, -1, "overlap must be >= 0"),
        (0, 0, "larger"),
    ],
)
def test_invalid_sizes(size, overlap, message):
    with pytest.raises(ValueError, match=message):
        chunk_documents([_doc(3)], size=size, overlap=overlap)


def test_ids_are_stable_and_unique():
    docs = [_doc(50, "a"), _doc(50, "b")]
    first = [c.id for c in chunk_documents(docs, size=12, overlap=4)]
    second = [c.id for c in chunk_documents(docs, size=12, overlap=4)]
    assert first == second and len(set(first)) == len(first)


def test_many_short_passages_are_fast():
    docs = [
        Document(id=str(i), text=f"passage {i} about topic {i % 97} " * 12) for i in range(50_000)
    ]
    start = time.process_time()
    chunks = chunk_documents(docs, size=512, overlap=80)
    elapsed = time.process_time() - start
    assert len(chunks) == 50_000
    assert elapsed < 3.0, f"chunking 50k short passages took {elapsed:.2f}s of CPU"


def _reference_chunks(text: str, size: int, overlap: int) -> list[str]:
    """Straightforward definition: token spans from a regex, windows sliced from them."""
    import re

    spans = [m.span() for m in re.finditer(r"\S+", text)]
    out, start = [], 0
    while True:
        end = min(start + size, len(spans))
        out.append(text[spans[start][0] : spans[end - 1][1]])
        if end == len(spans):
            return out
        start += size - overlap


def test_matches_reference_on_random_whitespace():
    import random

    rng = random.Random(7)
    gaps = [" ", " ", " ", "\n", "  ", "\t", "\u00a0", " \n\n "]
    for trial in range(200):
        n = rng.randint(1, 60)
        seps = [" "] * n if trial % 2 else [rng.choice(gaps) for _ in range(n)]
        text = rng.choice(["", " ", "\n"]) + "".join(f"t{i}{seps[i]}" for i in range(n))
        size = rng.randint(1, 15)
        overlap = rng.randint(0, size - 1)
        got = [
            c.text
            for c in chunk_documents([Document(id="r", text=text)], size=size, overlap=overlap)
        ]
        assert got == _reference_chunks(text, size, overlap), (text, size, overlap)
