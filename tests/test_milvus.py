"""The Milvus backend against a real `milvus-lite server` on 127.0.0.1 and as an
embedded Milvus Lite file: BM25 full-text, dense and hybrid search over the sample
corpus, paging, tracing, and a strategy running on it."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from marag.corpus import chunk_documents, load_corpus
from marag.llm import ScriptedLLM
from marag.strategies import make_strategy
from marag.trace import Trace, activate

pytest.importorskip("pymilvus", reason="the Milvus backend needs pymilvus and milvus-lite (pip install 'marag[milvus]'; in marag[dev])")
from marag.index.milvus import MilvusKnowledgeBase  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def chunks(repo):
    docs = load_corpus(repo / "samples" / "corpus").documents
    return chunk_documents(docs, size=512, overlap=80)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    exe = shutil.which("milvus-lite") or str(Path(sys.executable).parent / "milvus-lite")
    port = free_port()
    proc = subprocess.Popen([exe, "server", "--data-dir", str(tmp_path_factory.mktemp("milvus")), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    for _ in range(600):  # up to two minutes on a busy machine
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("milvus-lite server did not start: " + proc.stdout.read().decode()[-2000:])
    yield uri
    proc.terminate()
    proc.wait(10)


def check_kb(kb: MilvusKnowledgeBase, chunks) -> None:
    assert kb.build(chunks) == 12
    for kind in ("bm25", "dense", "hybrid"):
        r = kb.retriever(kind)
        trace = Trace()
        with activate(trace):
            hits = r.search("Who created the Python programming language?", 3)
        assert hits[0].doc_id == "computing/python-language.md", (kind, [h.doc_id for h in hits])
        assert len(hits) == 3 and "Guido" in hits[0].text
        page2 = r.search("Who created the Python programming language?", 2, offset=2)
        assert [h.chunk_id for h in page2] == [h.chunk_id for h in r.search("Who created the Python programming language?", 4)][2:]
        assert trace.steps[0].searches[0].retriever == f"milvus-{kind}"
    bm25 = kb.retriever("bm25").search("honeybee waggle dance", 1)
    assert bm25[0].doc_id == "science/honeybees.md"


def test_against_a_milvus_lite_server(server, chunks):
    check_kb(MilvusKnowledgeBase(server, "sample"), chunks)


def test_embedded_milvus_lite_file(tmp_path, chunks):
    check_kb(MilvusKnowledgeBase(str(tmp_path / "kb.db"), "sample"), chunks)


def test_a_strategy_on_milvus(server, chunks):
    kb = MilvusKnowledgeBase(server, "strategy_test")
    kb.build(chunks)
    strategy = make_strategy("vanilla_rag", ScriptedLLM(fn=lambda m, o: {"answer": "Guido van Rossum"}), kb.retriever("hybrid"))
    ans = asyncio.run(strategy.run("Who created Python?"))
    assert ans.sources[0].doc_id == "computing/python-language.md" and ans.usage["searches"] == 1


def test_bad_names_and_unreachable_servers():
    from marag.errors import MaragError

    with pytest.raises(MaragError, match="collection name"):
        MilvusKnowledgeBase("http://127.0.0.1:1", "../etc")
