"""POST /ask in process (scripted model, no server process): an index is opened once
and off the event loop, and a full queue answers 429 before any index is opened."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from marag.index.pipeline import index_corpus
from marag.index.store import IndexConfig
from marag.llm import ScriptedLLM
from marag.serve.app import ServeSettings, create_app

from asgi_scope import http_scope

TOKEN = "a-token-of-enough-length"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def indexes(tmp_path_factory, repo):
    root = tmp_path_factory.mktemp("indexes")
    for name in ("one", "two"):
        index_corpus(repo / "samples" / "corpus", root / name, IndexConfig(retrievers=["bm25"]), progress=False)
    return root


class HeldLLM(ScriptedLLM):
    """Answers once `release` is set (the first call waits): a question in progress."""

    def __init__(self) -> None:
        super().__init__(fn=lambda messages, output: {"answer": "an answer"})
        self.release, self.started = asyncio.Event(), asyncio.Event()

    async def _complete(self, *args, **kwargs):
        self.started.set()
        await self.release.wait()
        return await super()._complete(*args, **kwargs)


def count_opens(monkeypatch) -> list[tuple[str, bool]]:
    """Every index opening as (the index's name, whether it ran on the event loop's thread)."""
    import threading

    from marag.index import uri

    opens: list[tuple[str, bool]] = []
    real = uri.open_index

    def counted(target, *args, **kwargs):
        opens.append((str(target).rsplit("/", 1)[-1], threading.current_thread() is threading.main_thread()))
        return real(target, *args, **kwargs)

    monkeypatch.setattr(uri, "open_index", counted)
    return opens


def test_an_index_is_opened_once_off_the_event_loop_and_again_after_a_rebuild(indexes, monkeypatch):
    opens = count_opens(monkeypatch)
    llm = HeldLLM()
    llm.release.set()
    app = create_app(ServeSettings(runs_dir=str(indexes.parent / "runs"), indexes_dir=str(indexes), token=TOKEN), llm=llm)

    async def scenario():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", headers=AUTH) as client:
            ask = {"question": "Who created Python?", "strategy": "vanilla_rag", "index": "one"}
            answers = await asyncio.gather(*(client.post("/ask", json=ask) for _ in range(3)))  # at once: one opening
            assert [r.status_code for r in answers] == [200, 200, 200], answers[0].text
            assert (await client.post("/ask", json=ask)).status_code == 200
            assert opens == [("one", False)]  # once, in a worker thread
            manifest = indexes / "one" / "manifest.json"
            manifest.touch()  # rebuilt in place: opened again
            assert (await client.post("/ask", json=ask)).status_code == 200
            assert opens == [("one", False), ("one", False)]

    asyncio.run(scenario())


def test_a_full_queue_answers_429_before_opening_an_index(indexes, monkeypatch):
    opens = count_opens(monkeypatch)
    llm = HeldLLM()
    app = create_app(ServeSettings(runs_dir=str(indexes.parent / "runs"), indexes_dir=str(indexes), token=TOKEN,
                                   max_concurrency=1, max_queue=0), llm=llm)  # fmt: skip

    async def scenario():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", headers=AUTH) as client:
            held = asyncio.create_task(client.post("/ask", json={"question": "q", "strategy": "llm_only"}))
            await asyncio.wait_for(llm.started.wait(), 30)  # the held question is in progress
            busy = await client.post("/ask", json={"question": "q", "strategy": "vanilla_rag", "index": "two"})
            assert busy.status_code == 429 and "too many questions" in busy.json()["error"]
            assert opens == []  # the busy answer came first: nothing was opened for it
            llm.release.set()
            assert (await held).status_code == 200

    asyncio.run(scenario())


def test_a_question_the_stop_cuts_short_gets_503_not_500(indexes):
    """Past `marag serve --shutdown-grace`, uvicorn cancels the requests still running; it
    answered them a bare 500 "Internal Server Error" and logged a traceback each."""
    llm = HeldLLM()
    app = create_app(ServeSettings(runs_dir=str(indexes.parent / "runs"), indexes_dir=str(indexes), token=TOKEN), llm=llm)
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b'{"question": "q", "strategy": "llm_only"}', "more_body": False}

    async def send(message):
        sent.append(message)

    scope = http_scope("POST", "/ask", headers=[(b"content-length", b"41"), (b"content-type", b"application/json"),
                                               (b"authorization", AUTH["Authorization"].encode())])  # fmt: skip

    async def scenario():
        request = asyncio.create_task(app(scope, receive, send))
        await asyncio.wait_for(llm.started.wait(), 30)  # answering, held
        request.cancel()  # what uvicorn does to it when the grace is over
        await request

    asyncio.run(scenario())
    start = next(m for m in sent if m["type"] == "http.response.start")
    assert start["status"] == 503 and (b"retry-after", b"5") in start["headers"]
    assert b"the server is stopping" in b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
