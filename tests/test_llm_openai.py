"""The OpenAI-compatible backend against a local stub server with canned replies."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pydantic import BaseModel, Field

from marag.errors import LLMError
from marag.llm import Message, make_llm
from marag.llm.openai_compat import OpenAICompatLLM


class Answer(BaseModel):
    answer: str = Field(max_length=50)


USER = [Message(role="user", content="capital of France?")]


def completion(content: str, prompt_tokens: int = 9, completion_tokens: int = 3) -> dict:
    return {
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }


class Stub:
    """Serves `replies` in order: (status, body), body a dict (sent as JSON) or raw str."""

    def __init__(self):
        self.replies: list[tuple[int, dict | str]] = []
        self.requests: list[dict] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                status, reply = stub.replies.pop(0) if stub.replies else (500, {"error": "script empty"})
                data = (json.dumps(reply) if isinstance(reply, dict) else reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep pytest output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()


@pytest.fixture
def stub():
    s = Stub()
    yield s
    s.server.shutdown()
    s.server.server_close()


def llm_for(stub, **kw) -> OpenAICompatLLM:
    return OpenAICompatLLM("stub-model", base_url=stub.url, retry_backoff_s=0.0, timeout_s=5, **kw)


def test_structured_request_and_reply(stub, monkeypatch):
    monkeypatch.setenv("MARAG_STUB_KEY", "sk-test-123")
    stub.replies.append((200, completion('{"answer": "Paris"}')))
    r = asyncio.run(llm_for(stub, api_key_env="MARAG_STUB_KEY").generate(USER, output=Answer, seed=5, max_tokens=40))
    assert r.parsed == Answer(answer="Paris")
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (9, 3)
    (req,) = stub.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == "Bearer sk-test-123"
    body = req["body"]
    assert body["model"] == "stub-model" and body["seed"] == 5 and body["max_tokens"] == 40
    assert body["messages"] == [{"role": "user", "content": "capital of France?"}]
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["name"] == "Answer"
    assert fmt["json_schema"]["schema"]["properties"]["answer"]["maxLength"] == 50
    assert "sk-test-123" not in json.dumps(body)


def test_no_key_no_authorization_header(stub, monkeypatch):
    monkeypatch.delenv("MARAG_STUB_KEY", raising=False)
    stub.replies.append((200, completion("hello")))
    r = asyncio.run(llm_for(stub, api_key_env="MARAG_STUB_KEY").generate(USER))
    assert r.text == "hello" and "response_format" not in stub.requests[0]["body"]
    assert "Authorization" not in stub.requests[0]["headers"]


def test_server_error_is_retried(stub):
    stub.replies += [(503, {"error": "busy"}), (500, {"error": "oops"}), (200, completion("finally"))]
    r = asyncio.run(llm_for(stub, max_retries=2).generate(USER))
    assert r.text == "finally" and len(stub.requests) == 3


def test_persistent_500_raises_llm_error_after_retries(stub):
    stub.replies += [(500, {"error": "boom"})] * 3
    with pytest.raises(LLMError) as info:
        asyncio.run(llm_for(stub, max_retries=2).generate(USER))
    assert "500" in info.value.message and info.value.hint
    assert len(stub.requests) == 3


def test_client_error_is_not_retried(stub):
    stub.replies.append((400, {"error": "unknown model"}))
    with pytest.raises(LLMError) as info:
        asyncio.run(llm_for(stub).generate(USER))
    assert "400" in info.value.message and len(stub.requests) == 1


def test_auth_failure_names_the_key_variable(stub):
    stub.replies.append((401, {"error": "bad key"}))
    with pytest.raises(LLMError) as info:
        asyncio.run(llm_for(stub, api_key_env="MARAG_STUB_KEY").generate(USER))
    assert "MARAG_STUB_KEY" in info.value.hint


@pytest.mark.parametrize("body", ["this is not json{", {"unexpected": "shape"}])
def test_malformed_reply_raises_llm_error(stub, body):
    stub.replies.append((200, body))
    with pytest.raises(LLMError) as info:
        asyncio.run(llm_for(stub).generate(USER))
    assert "OpenAI-compatible" in info.value.hint


def test_invalid_structured_output_is_repaired_through_the_server(stub):
    stub.replies += [(200, completion("Paris, obviously")), (200, completion('{"answer": "Paris"}'))]
    r = asyncio.run(llm_for(stub).generate(USER, output=Answer))
    assert r.parsed.answer == "Paris" and r.usage.prompt_tokens == 18
    assert stub.requests[1]["body"]["messages"][1] == {"role": "assistant", "content": "Paris, obviously"}


def test_connection_refused_has_a_hint():
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llm = make_llm("openai:m", base_url=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(LLMError) as info:
        asyncio.run(llm.generate(USER))
    assert "cannot connect" in info.value.message and "--llm-base-url" in info.value.hint
