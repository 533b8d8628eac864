"""Index directories: build/open roundtrip, refusals, version checks, atomicity, collections."""

from __future__ import annotations

import inspect
import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import marag
from marag.corpus.models import Chunk, Document
from marag.errors import CorpusError, IndexFormatError, UnknownNameError
from marag.index import EMBEDDERS, DirectoryIndex, HybridRetriever, Index, IndexConfig, build_index, corpus_hash, open_index
from marag.index.store import INDEX_FORMAT_VERSION
from marag.index.embed import HashingEmbedder, token_windows
from marag.trace import Trace, activate

TEXTS = {
    "animals": [
        "Cats are small domesticated carnivores that purr.",
        "Dogs were the first species domesticated by humans.",
        "Owls hunt small rodents at night.",
    ],
    "finance": [
        "The stock market fell after the central bank raised rates.",
        "Bonds pay interest to investors until maturity.",
    ],
}


@EMBEDDERS.register("test-exploding")
class ExplodingEmbedder(HashingEmbedder):
    """Fails while embedding the corpus, i.e. in the middle of a build."""

    name = "test-exploding"

    def embed(self, texts, batch_size=32, progress=False):
        raise RuntimeError("embedder crashed mid-build")


@EMBEDDERS.register("test-counting")
class CountingEmbedder(HashingEmbedder):
    name = "test-counting"
    instances = 0

    def __init__(self, dim: int = 256):
        type(self).instances += 1
        super().__init__(dim)


@EMBEDDERS.register("test-windowed")
class WindowedEmbedder(HashingEmbedder):
    """A model that reads only `max_length` words, like MiniLM's 256 tokens, and offers
    windows that read a text whole."""

    name = "test-windowed"
    max_length = 6

    def embed(self, texts, batch_size=32, progress=False):
        return super().embed([" ".join(t.split()[: self.max_length]) for t in texts])

    def embed_windows(self, texts, overlap, batch_size=32, progress=False):
        windows, counts = [], []
        for t in texts:
            words = t.split()
            spans = token_windows(len(words), self.max_length, overlap)
            windows += [" ".join(words[a:b]) for a, b in spans]
            counts.append(len(spans))
        return super().embed(windows), np.concatenate([[0], np.cumsum(counts)])


def make_chunks() -> list[Chunk]:
    chunks = []
    for topic, texts in TEXTS.items():
        for i, text in enumerate(texts):
            doc = f"{topic}-{i}"
            chunks.append(
                Chunk(id=f"{doc}#0", doc_id=doc, title=topic.title(), text=text, metadata={"topic": topic})
            )
    # A second chunk of one document, so documents != chunks.
    chunks.append(
        Chunk(
            id="animals-0#1",
            doc_id="animals-0",
            position=1,
            text="Cats sleep most of the day.",
            metadata={"topic": "animals"},
        )
    )
    return chunks


def config(**kw) -> IndexConfig:
    return IndexConfig(embedder="hashing", collection_field="topic", **kw)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("idx") / "index"
    build_index(make_chunks(), out, config(), corpus_hash="abc123", progress=False)
    return out


def test_roundtrip(built):
    assert sorted(p.name for p in built.iterdir()) == ["bm25", "chunks.jsonl", "dense", "manifest.json"]
    idx = open_index(built)
    m = idx.manifest
    assert m["format_version"] == INDEX_FORMAT_VERSION and m["marag_version"] == marag.__version__
    assert m["corpus_hash"] == "abc123"
    assert m["counts"]["chunks"] == 6 and idx.documents_count == 5
    assert m["embedder"]["name"] == "hashing" and m["embedder"]["dim"] == 256
    assert {"bm25s", "numpy", "onnxruntime"} <= set(m["libraries"])
    assert idx.config == config()
    assert [c.id for c in idx.chunks] == [c.id for c in make_chunks()]
    assert idx.chunk("animals-2#0").text.startswith("Owls")
    with pytest.raises(UnknownNameError):
        idx.chunk("nope#0")
    assert idx.collections() == ["animals", "finance"]
    assert isinstance(idx.retriever(), HybridRetriever)  # default when both parts exist
    for kind in ("bm25", "dense", "hybrid"):
        hits = idx.retriever(kind).search("stock market rates", k=2)
        assert hits[0].chunk_id == "finance-0#0", kind
    assert idx.retriever("bm25") is idx.retriever("bm25")  # loaded once


def test_an_index_directory_is_an_index_of_the_port(built):
    # every member the protocol declares, looked up without running properties
    members = {n for n in vars(Index) if not n.startswith("_")} | set(Index.__annotations__) | {"__enter__", "__exit__"}
    idx = open_index(built)
    assert isinstance(idx, DirectoryIndex)
    assert [n for n in sorted(members) if inspect.getattr_static(idx, n, None) is None] == []
    with open_index(built) as again:  # nothing to release, but the same `with` as any index
        assert again.retriever("bm25").search("cats", k=1)[0].doc_id == "animals-0"
    again.close()  # idempotent


def test_manifest_is_plain_json(built):
    m = json.loads((built / "manifest.json").read_text())
    assert IndexConfig.model_validate(m["config"]).collection_field == "topic"
    lines = (built / "chunks.jsonl").read_text().splitlines()
    assert Chunk.model_validate_json(lines[0]).metadata == {"topic": "animals"}


def test_collection_restriction(built):
    idx = open_index(built)
    for kind in ("bm25", "dense", "hybrid"):
        r = idx.retriever(kind, collection="animals")
        hits = r.search("stock market rates cats", k=10)
        assert hits and all(idx.chunk(h.chunk_id).metadata["topic"] == "animals" for h in hits), kind
        assert r.name == f"{kind}[animals]"
    with pytest.raises(UnknownNameError, match="animals, finance"):
        idx.retriever("bm25", collection="sports")


def test_search_records_into_the_active_trace(built):
    idx = open_index(built)
    trace = Trace()
    with activate(trace):
        idx.retriever("hybrid").search("bonds interest", k=1)
    (call,) = trace.searches()
    assert call.retriever == "hybrid" and call.hits[0]["chunk_id"] == "finance-1#0"


def test_refuses_to_overwrite_without_flag(built):
    before = (built / "manifest.json").read_text()
    with pytest.raises(IndexFormatError) as exc:
        build_index(make_chunks(), built, config(), corpus_hash="other", progress=False)
    assert "--overwrite" in exc.value.hint
    assert (built / "manifest.json").read_text() == before


def test_overwrite_replaces_an_index(tmp_path):
    out = tmp_path / "idx"
    build_index(make_chunks(), out, config(retrievers=["bm25"]), corpus_hash="one", progress=False)
    build_index(
        make_chunks()[:2], out, config(retrievers=["bm25"]), corpus_hash="two", overwrite=True, progress=False
    )
    idx = open_index(out)
    assert idx.manifest["corpus_hash"] == "two" and len(idx.chunks) == 2
    assert idx.default_kind == "bm25"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # no temp or old dirs left


def test_refuses_to_replace_a_directory_that_is_not_an_index(tmp_path):
    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "todo.txt").write_text("keep me")
    with pytest.raises(IndexFormatError, match="not a marag index"):
        build_index(make_chunks(), precious, config(), overwrite=True, progress=False)
    assert (precious / "todo.txt").read_text() == "keep me"


def test_failure_mid_build_leaves_nothing_and_keeps_the_old_index(tmp_path):
    out = tmp_path / "idx"
    with pytest.raises(RuntimeError, match="mid-build"):
        build_index(make_chunks(), out, IndexConfig(embedder="test-exploding"), progress=False)
    assert list(tmp_path.iterdir()) == []  # neither `out` nor a temp dir

    build_index(make_chunks(), out, config(retrievers=["bm25"]), corpus_hash="old", progress=False)
    with pytest.raises(RuntimeError, match="mid-build"):
        build_index(
            make_chunks(), out, IndexConfig(embedder="test-exploding"), overwrite=True, progress=False
        )
    assert open_index(out).manifest["corpus_hash"] == "old"
    assert open_index(out).retriever("bm25").search("cats", k=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_missing_index(tmp_path):
    with pytest.raises(IndexFormatError) as exc:
        open_index(tmp_path / "nowhere")
    assert "index not found at" in exc.value.message
    assert "marag index" in exc.value.hint and "nowhere" in exc.value.hint


def test_incompatible_format_version(built, tmp_path):
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(built, copy)
    m = json.loads((copy / "manifest.json").read_text())
    m["format_version"] = INDEX_FORMAT_VERSION + 41
    (copy / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(IndexFormatError) as exc:
        open_index(copy)
    assert f"version {INDEX_FORMAT_VERSION + 41}" in exc.value.message
    assert "--overwrite" in exc.value.hint


def test_missing_or_corrupt_manifest(built, tmp_path):
    import shutil

    copy = tmp_path / "torn"
    shutil.copytree(built, copy)
    (copy / "manifest.json").write_text("{not json")
    with pytest.raises(IndexFormatError, match="unreadable"):
        open_index(copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(IndexFormatError, match="no manifest.json"):
        open_index(copy)


def test_embedder_loads_once_and_only_when_dense_is_used(tmp_path):
    out = tmp_path / "idx"
    build_index(
        make_chunks(), out, IndexConfig(embedder="test-counting", collection_field="topic"), progress=False
    )
    CountingEmbedder.instances = 0
    idx = open_index(out)
    idx.retriever("bm25").search("cats")
    assert CountingEmbedder.instances == 0
    idx.retriever("dense", collection="animals").search("cats")
    idx.retriever("dense", collection="finance").search("cats")
    idx.retriever("hybrid").search("cats")
    assert CountingEmbedder.instances == 1  # one model shared by every dense retriever


def test_bad_input_is_rejected_before_building(tmp_path):
    with pytest.raises(CorpusError, match="no chunks"):
        build_index([], tmp_path / "a", config(), progress=False)
    dup = make_chunks()[:1] * 2
    with pytest.raises(CorpusError, match="twice"):
        build_index(dup, tmp_path / "b", config(), progress=False)
    with pytest.raises(CorpusError, match="'topic'"):
        build_index([Chunk(id="x#0", doc_id="x", text="hi")], tmp_path / "c", config(), progress=False)
    with pytest.raises(UnknownNameError, match="minilm"):
        build_index(make_chunks(), tmp_path / "d", IndexConfig(embedder="nope"), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_missing_part_is_reported(tmp_path):
    out = tmp_path / "idx"
    build_index(make_chunks(), out, config(retrievers=["bm25"]), progress=False)
    idx = open_index(out)
    with pytest.raises(IndexFormatError, match="no 'dense' part"):
        idx.retriever("dense")
    with pytest.raises(UnknownNameError, match="hybrid"):
        idx.retriever("sparse")


def test_dense_windows_are_recorded_and_find_a_chunk_by_its_tail(tmp_path):
    long_text = (
        "Weather reports mention clouds over the hills and valleys today "
        "while the lighthouse keeper polished brass"
    )
    chunks = [Chunk(id="long#0", doc_id="long", text=long_text)] + [
        Chunk(id=f"s{i}#0", doc_id=f"s{i}", text=t)
        for i, t in enumerate(["lighthouse", "keeper of bees", "polished stones", "brass band music"])
    ]
    found = {}
    for mode in ("windows", "truncate"):
        out = tmp_path / mode
        cfg = IndexConfig(
            embedder="test-windowed", retrievers=["dense"], dense_long_chunks=mode, dense_window_overlap=2
        )
        build_index(chunks, out, cfg, progress=False)
        idx = open_index(out)
        layout = idx.manifest["parts"]["dense"]["layout"]
        windows = np.load(out / "dense" / "windows.npy")
        assert np.load(out / "dense" / "texts.npy").tolist() == [0, 1, 2, 3, 4]
        if mode == "windows":
            assert layout["window_overlap"] == 2 and layout["max_tokens"] == 6
            assert (layout["vectors"], layout["texts_with_several_windows"]) == (8, 1)
            assert windows.tolist() == [0, 4, 5, 6, 7, 8]  # 16 words: 4 windows of 6
        else:
            assert layout["window_overlap"] is None and windows.tolist() == [0, 1, 2, 3, 4, 5]
        found[mode] = [h.chunk_id for h in idx.retriever("dense").search("lighthouse keeper polished brass", k=1)]
    # Only the windowed index read the end of the long chunk.
    assert found == {"windows": ["long#0"], "truncate": ["s0#0"]}


def test_corpus_hash_is_deterministic_and_order_sensitive():
    docs = [Document(id="a", text="x"), Document(id="b", text="y")]
    assert corpus_hash(docs) == corpus_hash([d.model_copy() for d in docs])
    assert corpus_hash(docs) != corpus_hash(docs[::-1])
    # Field boundaries matter: ("ab", "c") and ("a", "bc") must differ.
    assert corpus_hash([Document(id="ab", text="c")]) != corpus_hash([Document(id="a", text="bc")])


def test_minilm_tokenizer_ships_inside_the_package():
    res = resources.files("marag").joinpath("resources").joinpath("minilm")
    assert res.joinpath("tokenizer.json").is_file() and res.joinpath("NOTICE.md").is_file()


def test_an_index_moved_aside_by_a_build_killed_mid_swap_is_put_back(tmp_path):
    """A kill between `_replace_dir`'s two renames leaves no index at --out, only the old
    one beside it: opening the index, or the next build, restores it."""
    from marag.index.store import open_directory

    out = tmp_path / "idx"
    build_index(make_chunks(), out, config(retrievers=["bm25"]), corpus_hash="old", progress=False)
    (tmp_path / ".idx.old-dead0001").mkdir()  # an unfinished leftover (no manifest): never restored
    out.rename(tmp_path / ".idx.old-1234abcd")
    assert not out.exists()
    assert open_directory(out).manifest["corpus_hash"] == "old"
    out.rename(tmp_path / ".idx.old-1234abcd")
    with pytest.raises(IndexFormatError, match="already exists"):  # restored first, so still protected
        build_index(make_chunks(), out, config(retrievers=["bm25"]), corpus_hash="new", progress=False)
    assert json.loads((out / "manifest.json").read_text())["corpus_hash"] == "old"
    (tmp_path / ".idx.old-dead0001").rmdir()
    with pytest.raises(IndexFormatError, match="not found"):
        open_directory(tmp_path / "nothing-here")


def test_only_the_indexs_own_leftover_is_put_back_whatever_its_name(tmp_path):
    from marag.index.store import open_directory

    other = tmp_path / "ab"
    build_index(make_chunks(), other, config(retrievers=["bm25"]), corpus_hash="ab", progress=False)
    other.rename(tmp_path / ".ab.old-1234abcd")  # `a[b]` as a glob would match it
    with pytest.raises(IndexFormatError, match="not found"):
        open_directory(tmp_path / "a[b]")
    assert (tmp_path / ".ab.old-1234abcd" / "manifest.json").is_file()
