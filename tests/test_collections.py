from __future__ import annotations

from marag.corpus import Document, chunk_documents, collection_of, load_corpus, split_collections


def _docs() -> list[Document]:
    return [
        Document(id="1", text="a", metadata={"topic": "sports"}),
        Document(id="2", text="b", metadata={"topic": "art"}),
        Document(id="3", text="c"),
        Document(id="4", text="d", metadata={"topic": "sports"}),
        Document(id="5", text="e", metadata={"topic": ""}),
        Document(id="6", text="f", metadata={"topic": 2024}),
    ]


def test_split_by_field_sorted_keys_and_stable_order():
    groups = split_collections(_docs(), "topic")
    assert list(groups) == ["2024", "_other", "art", "sports"]
    assert [d.id for d in groups["sports"]] == ["1", "4"]
    assert [d.id for d in groups["_other"]] == ["3", "5"]  # missing and empty values
    assert sum(len(v) for v in groups.values()) == 6


def test_missing_collection_name_is_configurable():
    groups = split_collections(_docs(), "topic", missing="misc")
    assert "misc" in groups and "_other" not in groups


def test_collection_of_documents_and_chunks():
    doc = Document(id="x", text="one two three", metadata={"folder": "finance"})
    chunk = chunk_documents([doc], size=2, overlap=0)[1]
    assert collection_of(doc, "folder") == "finance"
    assert collection_of(chunk, "folder") == "finance"
    assert collection_of(chunk, "nope") == "_other"
    assert collection_of(chunk, "nope", missing="none") == "none"


def test_chunks_split_like_their_documents():
    chunks = chunk_documents(_docs(), size=4, overlap=1)
    groups = split_collections(chunks, "topic")
    assert [c.doc_id for c in groups["sports"]] == ["1", "4"]


def test_empty_input():
    assert split_collections([], "topic") == {}


def test_folder_subfolders_become_collections(tmp_path):
    for sub, name in [("finance", "a.txt"), ("finance", "b.txt"), ("health", "c.md")]:
        (tmp_path / sub).mkdir(exist_ok=True)
        (tmp_path / sub / name).write_text(f"text of {name}", encoding="utf-8")
    (tmp_path / "top.txt").write_text("top level", encoding="utf-8")
    groups = split_collections(load_corpus(tmp_path).documents, "folder")
    assert {k: [d.id for d in v] for k, v in groups.items()} == {
        "_other": ["top.txt"],
        "finance": ["finance/a.txt", "finance/b.txt"],
        "health": ["health/c.md"],
    }


def test_hoprag_sources_as_collections(data_dir):
    groups = split_collections(load_corpus(data_dir / "hoprag_examples").documents, "source")
    assert list(groups) == ["2wiki", "hotpot", "musique"]
    assert all(groups.values())
