"""The Milvus index against a real `milvus-lite server` on 127.0.0.1 and as an embedded
Milvus Lite file: BM25, dense (windows, grouped per chunk) and hybrid search over the
sample corpus, paging, tracing, collections, strategies on it, the manifest stored with
the collection, resumable builds, and index URIs."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from pathlib import Path

import pytest

from conftest import MILVUS_HINT
from marag.corpus import chunk_documents, load_corpus
from marag.errors import IndexFormatError, MaragError, UnknownNameError
from marag.index.base import Index
from marag.index.store import IndexConfig, build_index, open_directory as open_dir
from marag.llm import ScriptedLLM
from marag.strategies import make_strategy
from marag.trace import Trace, activate

pytest.importorskip("pymilvus", reason=MILVUS_HINT)
pytest.importorskip("milvus_lite", reason=MILVUS_HINT)
from marag.index import milvus  # noqa: E402
from marag.index.milvus import build_milvus, parse_target  # noqa: E402
from marag.index.uri import open_index, scheme_of, shared  # noqa: E402

Q = "Who created the Python programming language?"


@pytest.fixture(scope="module")
def chunks(repo):
    docs = load_corpus(repo / "samples" / "corpus").documents
    return chunk_documents(docs, size=512, overlap=80)


CONFIG = IndexConfig(collection_field="folder")


def check_index(idx, chunks) -> None:
    assert idx.manifest["counts"] == {"chunks": 12, "documents": 12, "collections": {"computing": 4, "geography": 4, "science": 4}}
    assert idx.manifest["embedder"]["name"] == "minilm" and idx.manifest["status"] == "complete"
    for kind in ("bm25", "dense", "hybrid"):
        r = idx.retriever(kind)
        trace = Trace()
        with activate(trace):
            hits = r.search(Q, 3)
        assert hits[0].doc_id == "computing/python-language.md", (kind, [h.doc_id for h in hits])
        assert len(hits) == 3 and "Guido" in hits[0].text and hits[0].title == "The Python programming language"
        page2 = r.search(Q, 2, offset=2)
        assert [h.chunk_id for h in page2] == [h.chunk_id for h in r.search(Q, 4)][2:]
        assert trace.steps[0].searches[0].retriever == f"milvus-{kind}"
        assert [h["chunk_id"] for h in trace.steps[0].searches[0].hits] == [h.chunk_id for h in hits]
        batch = r.search_batch([Q, "honeybee waggle dance"], 2)
        assert [h.chunk_id for h in batch[0]] == [h.chunk_id for h in hits[:2]] and batch[1][0].doc_id == "science/honeybees.md"
    assert idx.retriever("bm25").search("the of and", 3) == []  # only stop words: no terms, no hits
    # a collection's retriever returns only its chunks (RopMura's knowledge agents)
    geo = idx.retriever(None, collection="geography")
    assert geo.name == "milvus-hybrid[geography]"
    assert {h.doc_id.split("/")[0] for h in geo.search(Q, 4)} == {"geography"}
    with pytest.raises(UnknownNameError, match="choose one of: computing, geography, science"):
        idx.retriever("bm25", collection="history")
    # what strategies read besides searches: chunks in index order, vectors, positions
    assert [c.id for c in idx.chunks] == [c.id for c in chunks]
    assert idx.chunk_collections[0] == chunks[0].metadata["folder"]
    assert idx.chunk_vectors().shape == (12, 384) and geo.chunk_vectors().shape == (4, 384)
    assert idx.position(chunks[5].id) == 5


def test_against_a_milvus_lite_server(milvus_server, chunks):
    target = f"milvus://{milvus_server}/sample"
    build_milvus(chunks, target, CONFIG, progress=False, batch_size=5)
    check_index(open_index(target), chunks)


def test_embedded_milvus_lite_file(tmp_path, chunks, marag):
    target = f"milvus:{tmp_path / 'kb.db'}#sample"
    with pytest.raises(IndexFormatError, match=f"no Milvus Lite file at {tmp_path / 'kb.db'}"):
        open_index(target)  # and it did not make an empty one
    assert not (tmp_path / "kb.db").exists()
    build_milvus(chunks, target, CONFIG, progress=False)
    idx = open_index(target)
    check_index(idx, chunks)
    assert not shared(target) and shared(f"milvus://{'127.0.0.1:1'}/x") and shared(str(tmp_path))
    code, out, err = marag("ask", Q, "--index", target, "--llm", "scripted", "--json", "--trace-out", str(tmp_path / "t.jsonl"))
    assert code == 0 and json.loads(out)["sources"][0]["doc_id"] == "computing/python-language.md", err


def test_the_kind_of_store_is_part_of_a_runs_identity():
    from marag.eval.runner import EvalConfig

    def fingerprint(index_path, **kw):
        return EvalConfig(dataset="d", strategies=["vanilla_rag"], index_path=index_path, **kw).fingerprint()

    # where the index lives, and where the questions are answered, do not change the answers ...
    assert fingerprint("milvus://a:1/x") == fingerprint("milvus:kb.db#y") == fingerprint("milvus://b/z", executor="ray", ray_address="auto")
    assert fingerprint("idx/a") == fingerprint("/elsewhere/b") == fingerprint(None)
    # ... but Milvus's BM25 is not marag's: another store is another run
    assert fingerprint("milvus://a:1/x") != fingerprint("idx/a")


def test_milvus_ranks_as_the_local_index_on_the_sample(milvus_server, repo, tmp_path):
    """Same chunks, same BM25 terms, same embedder and windows, same fusion: the rankings
    are the local ones (dense scores to float precision). Two long documents make chunks
    of several windows, each scored by its best window on both sides."""
    from marag.corpus.models import Document

    docs = load_corpus(repo / "samples" / "corpus").documents
    docs += [Document(id=f"long/{i}", title=f"Long {i}", text=" ".join(d.text for d in docs[i::4])) for i in range(2)]
    chunks = chunk_documents(docs, size=512, overlap=80)
    target = f"milvus://{milvus_server}/parity"
    build_milvus(chunks, target, IndexConfig(), progress=False)
    local = open_dir(build_index(chunks, tmp_path / "local", IndexConfig(), progress=False))
    remote = open_index(target)
    several = remote.manifest["parts"]["dense"]["chunks_with_several_windows"]
    assert several == local.manifest["parts"]["dense"]["layout"]["texts_with_several_windows"] >= 2
    assert remote.manifest["parts"]["dense"]["vectors"] == local.manifest["parts"]["dense"]["layout"]["vectors"] > len(chunks)
    queries = [Q, "honeybee waggle dance", "first ascent of Mount Everest", "penguin mascot"]
    for a, b in zip(local.retriever("dense").search_batch(queries, 5), remote.retriever("dense").search_batch(queries, 5)):
        assert [h.chunk_id for h in a] == [h.chunk_id for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)
    for kind in ("bm25", "hybrid"):
        for a, b in zip(local.retriever(kind).search_batch(queries, 5), remote.retriever(kind).search_batch(queries, 5)):
            assert [h.chunk_id for h in a] == [h.chunk_id for h in b], kind
    assert remote.chunk_vectors() == pytest.approx(local.retriever("dense").chunk_vectors(), abs=1e-5)


def test_strategies_on_milvus(milvus_server, chunks):
    target = f"milvus://{milvus_server}/strategies"
    build_milvus(chunks, target, CONFIG, progress=False)
    idx = open_index(target)
    strategy = make_strategy("vanilla_rag", ScriptedLLM(fn=lambda m, o: {"answer": "Guido van Rossum"}), idx.retriever("hybrid"))
    ans = asyncio.run(strategy.run("Who created Python?"))
    assert ans.sources[0].doc_id == "computing/python-language.md" and ans.usage["searches"] == 1
    # the strategies that read more than searches (collections, vectors, positions)
    from marag.llm.scripted import placeholder_reply

    searched = {}
    for name in ("ropmura", "ginger"):
        ans = asyncio.run(make_strategy(name, ScriptedLLM(fn=placeholder_reply), idx.retriever()).run("Who created Python?"))
        assert ans.sources[0].doc_id == "computing/python-language.md", name
        searched[name] = {c.retriever for s in ans.trace.steps for c in s.searches}
    # RopMura's knowledge agents each search their own collection; GINGER fuses BM25 and dense itself
    assert searched["ropmura"] == {f"milvus-hybrid[{c}]" for c in ("computing", "geography", "science")}
    assert searched["ginger"] == {"milvus-bm25", "milvus-dense"}
    # `marag synth --index URI` draws its documents from the collection
    from marag.synth import DocumentPool

    by_id = {c.id: c for c in chunks}
    drawn = DocumentPool(idx, seed=1).draw(3)
    assert len({h.doc_id for h in drawn}) == 3 and all(h.text == by_id[h.chunk_id].text for h in drawn)


def test_a_killed_build_resumes_where_it_stopped(milvus_server, chunks, monkeypatch, capsys):
    """Cut after the second batch's rows went in but before its mark was written (the
    worst moment): the next build deletes them, inserts from the mark on, embeds only
    what was not done, and ends with every chunk exactly once."""
    from pymilvus import MilvusClient

    target = f"milvus://{milvus_server}/resumable"
    real_alter, marks = MilvusClient.alter_collection_properties, []

    def alter_then_die(self, name, properties, **kw):
        if "marag.done" in properties and "marag.manifest" not in properties:
            marks.append(int(properties["marag.done"]))
            if len(marks) == 2:
                raise KeyboardInterrupt  # killed between the insert and its mark
        return real_alter(self, name, properties, **kw)

    monkeypatch.setattr(MilvusClient, "alter_collection_properties", alter_then_die)
    with pytest.raises(KeyboardInterrupt):
        build_milvus(chunks, target, CONFIG, progress=False, batch_size=4)
    monkeypatch.setattr(MilvusClient, "alter_collection_properties", real_alter)
    with pytest.raises(IndexFormatError, match=r"is not finished: 4 of 12 chunks are in") as info:
        open_index(target)
    assert "rerunning the same `marag index DOCS --out milvus://" in info.value.hint
    from marag.index import dense

    embedded, real_embed = [], dense.embed_chunks
    monkeypatch.setattr(dense, "embed_chunks", lambda emb, texts, *a, **k: embedded.append(len(texts)) or real_embed(emb, texts, *a, **k))
    build_milvus(chunks, target, CONFIG, progress=True, batch_size=4)
    err = capsys.readouterr().err
    assert f"resuming the build of {target}: 4 of 12 chunks are in" in err
    assert "milvus resumable" in err and "12/12" in err  # the progress bar, starting at the mark
    assert embedded == [4, 4]  # batches 2 and 3 only
    idx = open_index(target)
    client = idx.client
    for name in ("resumable", "resumable__windows"):
        assert client.query(name, filter="", output_fields=["count(*)"])[0]["count(*)"] == 12
    check_index(idx, chunks)


def test_overwrite_and_collections_marag_did_not_make(milvus_server, chunks):
    target = f"milvus://{milvus_server}/twice"
    build_milvus(chunks, target, IndexConfig(retrievers=["bm25"]), progress=False)
    with pytest.raises(IndexFormatError, match="already holds a finished index") as info:
        build_milvus(chunks, target, IndexConfig(retrievers=["bm25"]), progress=False)
    assert "--overwrite" in info.value.hint
    build_milvus(chunks[:3], target, IndexConfig(retrievers=["bm25"]), progress=False, overwrite=True)
    assert open_index(target).manifest["counts"]["chunks"] == 3
    # a collection of the same name that marag did not make is never replaced
    client = milvus.connect(parse_target(f"milvus://{milvus_server}/foreign"))
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=2)
    ip = client.prepare_index_params()
    ip.add_index(field_name="v", index_type="FLAT", metric_type="IP")
    client.create_collection("foreign", schema=schema, index_params=ip)
    for call in (lambda: build_milvus(chunks, f"milvus://{milvus_server}/foreign", progress=False, overwrite=True),
                 lambda: open_index(f"milvus://{milvus_server}/foreign")):  # fmt: skip
        with pytest.raises(IndexFormatError, match="was not made by marag"):
            call()
    assert client.has_collection("foreign")


def test_index_uris_are_parsed_strictly():
    t = parse_target("milvus://db.example:1234/hotpot?token_env=MY_TOKEN&tls=true")
    assert (t.uri, t.collection, t.token_env, t.local_file) == ("https://db.example:1234", "hotpot", "MY_TOKEN", False)
    assert parse_target("milvus://h/x").uri == "http://h:19530" and parse_target("milvus://h/x").token_env == "MARAG_MILVUS_TOKEN"
    t = parse_target("milvus:rel/kb.db#sample")
    assert t.local_file and t.uri == str(Path("rel/kb.db").resolve()) and t.collection == "sample"
    for bad, says in [
        ("milvus://root:secret@h:19530/x", "credentials never go in an index URI"),
        ("milvus://h:19530/", "cannot read the index URI"),
        ("milvus://h:19530/a/b", "cannot read the index URI"),
        ("milvus://h:19530/x?user=root", "has the option 'user': credentials come only from an environment variable"),
        ("milvus://h:19530/x?color=red", "unknown option 'color'"),
        ("milvus://h:19530/x?tls=maybe", "the option tls .* takes true or false"),
        ("milvus://h:19530/x?token_env=root:pw", "not the name of an environment variable"),
        ("milvus:kb.sqlite#x", "ends in .db"),
        ("milvus:kb.db", "cannot read the index URI"),
        ("milvus://h/../etc", "cannot read the index URI"),
        ("milvus://h/bad-name", "not a valid Milvus collection name"),
    ]:
        with pytest.raises(MaragError, match=says):
            parse_target(bad)
    assert scheme_of("idx/hotpot") == scheme_of(Path("milvus:x")) == scheme_of("C:\\idx") == "dir"
    assert scheme_of("milvus:kb.db#x") == scheme_of("MILVUS://h/x") == "milvus"
    with pytest.raises(UnknownNameError, match="unknown index_schemes 's3'") as info:
        scheme_of("s3://bucket/idx")
    assert "milvus" in info.value.hint


def test_a_manifest_is_stored_with_the_collection(milvus_server, chunks):
    target = f"milvus://{milvus_server}/manifest"
    build_milvus(chunks, target, IndexConfig(retrievers=["bm25", "dense"], chunk_size=300, chunk_overlap=40), corpus_hash="abc", progress=False)
    client = milvus.connect(parse_target(target))
    stored = json.loads(client.describe_collection("manifest")["properties"]["marag.manifest"])
    assert stored["config"]["chunk_size"] == 300 and stored["corpus_hash"] == "abc" and stored["backend"] == "milvus"
    assert stored["parts"]["dense"]["vectors"] == 12 and stored["embedder"]["dim"] == 384
    assert open_index(target).config.chunk_size == 300


# -- credentials never leave the machine unencrypted, nor appear in a message -----------------
class FakeClient:
    """Stands in for pymilvus.MilvusClient: records what it was asked to connect to."""

    made: list[dict] = []

    def __init__(self, uri, token="", **kw):
        FakeClient.made.append({"uri": uri, "token": token})

    def close(self):
        pass


def test_credentials_go_unencrypted_only_to_loopback_or_when_the_uri_says_so(monkeypatch):
    import pymilvus

    monkeypatch.setattr(pymilvus, "MilvusClient", FakeClient)
    FakeClient.made = []
    monkeypatch.setenv("MARAG_MILVUS_TOKEN", "root:s3cret")
    for uri in ("milvus://db.example:19530/x", "milvus://10.0.0.5/x", "milvus://[2001:db8::1]:19530/x"):
        with pytest.raises(MaragError, match=r"refusing to send the credentials in \$MARAG_MILVUS_TOKEN unencrypted to Milvus at") as info:
            milvus.connect(parse_target(uri))
        assert "?tls=true" in info.value.hint and "?tls=false" in info.value.hint and "s3cret" not in str(info.value)
    with pytest.raises(MaragError, match=r"refusing to send the credentials unencrypted"):  # a token given by Python code
        milvus.connect(parse_target("milvus://db.example/x"), token="root:s3cret")
    assert FakeClient.made == []  # nothing was sent anywhere
    # allowed: TLS; plain gRPC when the URI says so (the user's choice); loopback; no credential at all
    milvus.connect(parse_target("milvus://db.example/x?tls=true"))
    milvus.connect(parse_target("milvus://db.example/x?tls=false"))
    for host in ("127.0.0.1", "localhost", "[::1]", "127.0.0.2"):
        milvus.connect(parse_target(f"milvus://{host}:19530/x"))
    assert [m["uri"] for m in FakeClient.made] == ["https://db.example:19530", "http://db.example:19530", "http://127.0.0.1:19530",
                                                   "http://localhost:19530", "http://[::1]:19530", "http://127.0.0.2:19530"]  # fmt: skip
    monkeypatch.delenv("MARAG_MILVUS_TOKEN")
    milvus.connect(parse_target("milvus://db.example/x"))
    assert FakeClient.made[-1] == {"uri": "http://db.example:19530", "token": ""}


def test_credential_options_are_refused_by_name_and_no_message_echoes_the_query():
    for option in ("token", "password", "user", "secret", "api_key", "apikey", "username", "passwd"):
        with pytest.raises(MaragError, match=f"has the option '{option}': credentials come only from an environment variable") as info:
            parse_target(f"milvus://h:19530/x?{option}=s3cret")
        assert "s3cret" not in str(info.value) and "MARAG_MILVUS_TOKEN" in info.value.hint
    # every error that shows the URI shows it without its query string
    for bad in ("milvus://h:bad/x", "milvus://h:19530/", "milvus://h:19530/x", "milvus://h/x?tls=", "milvus://h/x?token_env="):
        for query in ("token=s3cret", "pw=s3cret", "color=s3cret", "token_env=s3cret:pw", "tls=s3cret"):
            text = bad + ("&" if "?" in bad else "?") + query
            with pytest.raises(MaragError) as info:
                parse_target(text)
            assert "s3cret" not in str(info.value), (text, str(info.value))
    t = parse_target("milvus://h/nope?token_env=TEAM&tls=true")
    assert t.shown == "milvus://h/nope" and milvus.target._build_hint(t) == "build it: marag index DOCS --out milvus://h/nope"


# -- connections are closed: a Lite file is released -------------------------------------------
def lite_lock_free(db: Path) -> bool:
    """Whether nothing holds the Lite file's lock (a flock: another open file in this
    process conflicts with it as another process would)."""
    fcntl = pytest.importorskip("fcntl")
    fd = os.open(db / "LOCK", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_lite_file_is_released_when_its_index_closes(tmp_path, chunks):
    db = tmp_path / "kb.db"
    target = f"milvus:{db}#sample"
    build_milvus(chunks, target, IndexConfig(retrievers=["bm25"]), progress=False)
    assert lite_lock_free(db)  # the build closed its connection
    idx = open_index(target)
    assert not lite_lock_free(db)
    # an Index of the port, as an index directory is (looked up without running properties)
    members = {n for n in vars(Index) if not n.startswith("_")} | set(Index.__annotations__) | {"__enter__", "__exit__"}
    assert isinstance(idx, milvus.MilvusIndex) and [n for n in sorted(members) if inspect.getattr_static(idx, n, None) is None] == []
    idx.close()
    idx.close()  # idempotent
    assert lite_lock_free(db) and idx.closed
    with pytest.raises(MaragError, match=f"the index {target} is closed"):
        idx.retriever("bm25").search(Q, 1)
    # opened again in the same process: it answers, and `with` closes it
    with open_index(target) as again:
        assert again.retriever("bm25").search(Q, 1)[0].doc_id == "computing/python-language.md"
    assert lite_lock_free(db)
    # two indexes of one file: the lock goes with the last one, the other keeps working
    a, b = open_index(target), open_index(target)
    a.close()
    assert b.retriever("bm25").search(Q, 1)[0].doc_id == "computing/python-language.md" and not lite_lock_free(db)
    b.close()
    assert lite_lock_free(db)
    # a failed open holds nothing
    with pytest.raises(IndexFormatError, match="no collection 'nope'"):
        open_index(f"milvus:{db}#nope")
    assert lite_lock_free(db)
    # and a failed build neither
    with pytest.raises(IndexFormatError, match="already holds a finished index"):
        build_milvus(chunks, target, IndexConfig(retrievers=["bm25"]), progress=False)
    assert lite_lock_free(db)
