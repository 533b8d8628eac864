"""`marag serve` as a real server process on loopback (scripted model): the API, the
viewer pages in a real headless browser, sign-in, and requests that must fail cleanly
(too big, unknown names, path traversal, no token, stalled bodies, hostile text) while
the server keeps serving. The runs directory holds hostile folders too: links out of
it, a broken config, and question ids with / # ? %."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

import httpx
import pytest

from marag.eval.runner import EvalConfig, run_eval
from marag.index.pipeline import index_corpus
from marag.index.store import IndexConfig
from marag.llm import LLMConfig, ScriptedLLM
from marag.serve.view import write_static

TOKEN = "test-token-123-long-enough"  # `marag serve` refuses tokens under 16 characters
BODY_TIMEOUT = 1.0  # the server's --body-timeout: short, so the stalled-body test is quick
WEIRD_QIDS = ["a/b#c?d%e", "x_y.", "x?y."]  # the last two were one static file name before


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rewrite_jsonl(path: Path, change) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps(change(r)) + "\n" for r in rows))


def _hostile_folders(runs: Path, outside: Path) -> None:
    """Run folders someone else could have left in runs/: every secret lives outside it."""
    demo = runs / "demo"
    outside.mkdir()
    (outside / "config.json").write_text(json.dumps({"config": {"dataset": "SECRET-CONFIG", "strategies": ["llm_only"]}}))
    rows = [json.loads(line) for line in (demo / "results.jsonl").read_text().splitlines()]
    (outside / "results.jsonl").write_text(json.dumps({**rows[0], "question": "SECRET-RESULTS", "prediction": "SECRET-RESULTS"}) + "\n")
    trace = json.loads((demo / "traces.jsonl").read_text().splitlines()[0])
    (outside / "traces.jsonl").write_text(json.dumps({**trace, "id": "abcdef123456", "question": "SECRET-TRACE", "answer": "SECRET-TRACE"}) + "\n")
    (outside / "secret.png").write_bytes((demo / "by_type.png").read_bytes() + b"SECRET-PNG")
    shutil.copytree(demo, outside / "run")
    _rewrite_jsonl(outside / "run" / "results.jsonl", lambda r: {**r, "question": "SECRET-DIR"})

    (runs / "leak-config").mkdir()
    (runs / "leak-config" / "config.json").symlink_to(outside / "config.json")
    leak = runs / "leak-files"  # its own config, everything else linked out
    leak.mkdir()
    shutil.copy(demo / "config.json", leak / "config.json")
    (leak / "results.jsonl").symlink_to(outside / "results.jsonl")
    (leak / "traces.jsonl").symlink_to(outside / "traces.jsonl")
    (leak / "by_type.png").symlink_to(outside / "secret.png")
    half = runs / "leak-traces"  # real results whose trace ids point into a linked traces file
    half.mkdir()
    shutil.copy(demo / "config.json", half / "config.json")
    (half / "results.jsonl").write_text(json.dumps({**rows[0], "trace_id": "abcdef123456"}) + "\n")
    (half / "traces.jsonl").symlink_to(outside / "traces.jsonl")
    (runs / "linked-run").symlink_to(outside / "run", target_is_directory=True)
    (runs / "alias").symlink_to(demo, target_is_directory=True)  # a link inside runs/ is fine
    garbage = runs / "garbage"  # a readable config, records of every wrong shape
    garbage.mkdir()
    shutil.copy(demo / "config.json", garbage / "config.json")
    good = {**rows[0], "qid": "g1", "trace_id": "aaaaaa111111", "prediction": "<img src=x onerror=alert(1)>"}
    (garbage / "results.jsonl").write_text("\n".join([
        "[]", "null", "not json", '{"strategy": 1, "qid": "x"}', '{"strategy": "s"}',
        json.dumps({**good, "metrics": {"f1": "high", "em": None, "accuracy": [1]}, "cost": "lots", "answers": "a", "gold_doc_ids": 5}),
        json.dumps({**good, "strategy": "other", "metrics": {"f1": float("nan")}, "trace_id": "../../etc"}),
        json.dumps(good).replace('"em": 0.0', '"em": NaN'), '{"torn',
    ]))  # fmt: skip
    weird_steps = [{"agent": 5, "llm_calls": 5, "searches": "x", "latency_s": "slow", "status": "<b>", "inputs": {"a": [1, {"b": None}]}},
                   7, None, {"agent": "searcher", "searches": [{"hits": [{"score": "high", "doc_id": ["x"]}, 3], "latency_s": None}],
                   "llm_calls": [{"messages": "hi", "prompt_tokens": "many", "latency_s": None}, {"messages": [None, {"role": 1}]}]}]  # fmt: skip
    (garbage / "traces.jsonl").write_text("\n".join([
        json.dumps({"id": "aaaaaa111111", "question": {"q": 1}, "steps": weird_steps, "answer": ["x"]}),
        '{"id": "bbbbbb222222", "steps": ', "[1, 2]",
    ]) + "\n")  # fmt: skip
    broken = runs / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"config": {"dataset": "hotpotqa_train100"}}))  # no strategies


@pytest.fixture(scope="module")
def world(tmp_path_factory, repo, data_dir):
    """A runs directory with one scripted evaluation (and a copy with hostile question
    ids, and hostile folders), an indexes directory with the sample index, and a server
    process serving both."""
    root = tmp_path_factory.mktemp("serve")
    runs, indexes = root / "runs", root / "indexes"
    index_corpus(repo / "samples" / "corpus", indexes / "sample", IndexConfig(retrievers=["bm25"]), progress=False)
    cfg = EvalConfig(dataset="hotpotqa_train100", strategies=["llm_only", "vanilla_rag"], limit=3,
                     llm=LLMConfig(backend="scripted"), index=IndexConfig(retrievers=["bm25"]))  # fmt: skip
    from marag.eval.datasets import load_dataset

    gold = {q.question: q.answers[0] for q in load_dataset("hotpotqa_train100", data_dir).questions[:3]}

    def reply(messages, output):  # right without passages (llm_only), wrong with them: the strategies disagree
        user = next(m["content"] for m in messages if m["role"] == "user")  # the question's turn, also when asked again
        q = next(q for q in gold if q in user)
        return {"answer": gold[q] if "Passages:" not in user else "a guess <script>alert(1)</script>"}

    asyncio.run(run_eval(cfg, runs / "demo", data_dir=data_dir, progress=False, index_cache=root / "cache",
                         llm=ScriptedLLM(fn=reply)))  # fmt: skip
    from marag.eval.report import build_report

    build_report([runs / "demo"])
    weird = runs / "weird"
    shutil.copytree(runs / "demo", weird)
    qids = list(dict.fromkeys(json.loads(line)["qid"] for line in (weird / "results.jsonl").read_text().splitlines()))
    rename = dict(zip(qids, WEIRD_QIDS))
    _rewrite_jsonl(weird / "results.jsonl", lambda r: {**r, "qid": rename[r["qid"]], "question": f"[{rename[r['qid']]}] {r['question']}"})
    _hostile_folders(runs, root / "outside")

    port = free_port()
    env = {**os.environ, "MARAG_TEST_TOKEN": TOKEN, "MARAG_DATA": str(data_dir)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "marag.cli", "serve", "--llm", "scripted", "--runs", str(runs), "--indexes", str(indexes),
         "--port", str(port), "--token-env", "MARAG_TEST_TOKEN", "--max-body", "5000", "--body-timeout", str(BODY_TIMEOUT)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=root,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    for _ in range(150):
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("server did not start: " + proc.stdout.read().decode()[-2000:])
    yield {"base": base, "runs": runs, "root": root, "proc": proc, "gold": gold, "qids": qids}
    proc.terminate()
    proc.wait(10)


def api(world, method: str, path: str, **kw):
    headers = {"Authorization": f"Bearer {TOKEN}", **kw.pop("headers", {})}
    return httpx.request(method, world["base"] + path, headers=headers, timeout=60, **kw)


def raw(world, data: bytes, wait: float = 30.0) -> bytes:
    """Send bytes on a new connection; everything the server sends until it closes."""
    port = int(world["base"].rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        got = b""
        while chunk := s.recv(65536):  # a server that never closes fails here with a timeout
            got += chunk
    return got


def sign_in(world, client: httpx.Client, token: str = TOKEN, next_path: str = "/") -> httpx.Response:
    return client.post(world["base"] + "/signin", data={"token": token, "next": next_path})


# -- the API ----------------------------------------------------------------------------------
def test_an_idle_connection_outlives_a_clients_pool_expiry(world):
    """httpx keeps an idle connection 5 s, uvicorn's default kept it as long: a request sent
    on it as the server closed it was dropped (ReadError; likely the 30-minute soak's two).
    Idle past 5 s, the connection still answers."""
    port = int(world["base"].rsplit(":", 1)[1])
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for _ in range(2):
            s.sendall(request)
            got = b""
            while b'"ok"' not in got and (chunk := s.recv(65536)):  # b"": the server closed it
                got += chunk
            assert got.startswith(b"HTTP/1.1 200"), got[:200]
            time.sleep(6)


def test_health_strategies_and_the_token(world):
    assert httpx.get(world["base"] + "/health").json()["status"] == "ok"  # no token needed
    r = httpx.get(world["base"] + "/strategies")
    assert r.status_code == 401 and "Bearer" in r.json()["hint"]
    names = [s["name"] for s in api(world, "GET", "/strategies").json()]
    assert {"vanilla_rag", "mrag", "unirag", "kair", "ropmura", "ginger"} <= set(names)
    assert api(world, "GET", "/indexes").json() == ["sample"]
    assert "/ask" in api(world, "GET", "/openapi.json").json()["paths"]
    r = api(world, "GET", "/")
    assert r.headers["x-frame-options"] == "DENY" and "default-src 'self'" in r.headers["content-security-policy"]


def test_a_loopback_server_answers_only_loopback_names(world):
    port = world["base"].rsplit(":", 1)[1]
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example"):  # a rebinding page's own name
        r = api(world, "GET", "/runs", headers={"host": host})
        assert r.status_code == 400 and "loopback" in r.json()["error"], host
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
        assert api(world, "GET", "/runs", headers={"host": host}).status_code == 200, host


def test_ask_returns_answer_sources_and_a_viewable_trace(world):
    r = api(world, "POST", "/ask", json={"question": "Who created Python?", "strategy": "vanilla_rag", "index": "sample"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answer"] and body["sources"][0]["doc_id"] == "computing/python-language.md"
    trace = api(world, "GET", f"/traces/{body['trace_id']}").json()
    assert trace["question"] == "Who created Python?" and [s["agent"] for s in trace["steps"]] == ["search", "answerer"]
    assert trace["steps"][0]["searches"][0]["hits"][0]["title"] == "The Python programming language"
    page = api(world, "GET", f"/view/traces/{body['trace_id']}")
    assert page.status_code == 200 and "Who created Python?" in page.text
    assert "The Python programming language" in page.text  # hits show their titles, not chunk ids only


def test_bad_requests_get_clear_4xx_and_the_server_keeps_serving(world):
    big = api(world, "POST", "/ask", content=json.dumps({"question": "x" * 10_000}), headers={"content-type": "application/json"})
    assert big.status_code == 413 and "5000 bytes" in big.json()["error"]
    unknown = api(world, "POST", "/ask", json={"question": "q", "strategy": "nope", "index": "sample"})
    assert unknown.status_code == 400 and "vanilla_rag" in unknown.json()["hint"]
    for name in ("../runs", "..", "/etc", "sample/../../x"):
        r = api(world, "POST", "/ask", json={"question": "q", "index": name})
        assert r.status_code in (400, 404) and "index" in r.json()["error"], (name, r.text)
    for path in ("/runs/..%2F..%2Fetc/files/passwd.json", "/runs/demo/files/..%2Fconfig.json", "/runs/demo/files/passwd",
                 "/view/runs/..%2F..", "/traces/..%2F..%2Fetc", "/runs/demo/files/%2Fetc%2Fpasswd.json"):  # fmt: skip
        r = api(world, "GET", path)
        assert r.status_code in (400, 404), (path, r.status_code)
        assert "root:" not in r.text
    bad_set = api(world, "POST", "/ask", json={"question": "q", "index": "sample", "options": {"k": "banana"}})
    assert bad_set.status_code == 400 and "k='banana'" in bad_set.json()["error"]
    empty = api(world, "POST", "/ask", json={"question": "   ", "index": "sample"})
    assert empty.status_code in (400, 422)
    for method, path in (("GET", "/nope"), ("DELETE", "/runs"), ("GET", "/runs/%ED%A0%80"), ("GET", "/view/runs/demo/question"),
                         ("GET", "/view/runs/demo/question?qid=%00"), ("GET", "/runs/demo/files/%ED%A0%80.png")):  # fmt: skip
        r = api(world, method, path)
        assert 400 <= r.status_code < 500 and r.json()["error"], (method, path, r.text)
    assert api(world, "GET", "/health").status_code == 200  # still serving
    assert api(world, "GET", "/runs/demo/files/by_type.png").headers["content-type"] == "image/png"


def test_requests_cannot_choose_models_files_or_urls(world):
    # the server's own token as an API key, sent to a host the request names: refused before anything is built
    leaky = {"backend": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "MARAG_TEST_TOKEN"}
    r = api(world, "POST", "/ask", json={"question": "q", "strategy": "kair", "index": "sample", "options": {"generator": leaky}})
    assert r.status_code == 400 and "'generator' cannot be set in a request" in r.json()["error"], r.text
    assert "when the server starts" in r.json()["error"] and "--llm" in r.json()["hint"]
    r = api(world, "POST", "/runs", json={"dataset": "hotpotqa_train100", "strategies": ["mrag"], "limit": 1,
                                          "options": {"mrag": {"role_llms": {"answerer": leaky}}}})  # fmt: skip
    assert r.status_code == 400 and "'role_llms' cannot be set in a request" in r.json()["error"], r.text


HOSTILE_BODIES = [
    b'{"question": "\\ud800", "index": "sample"}',  # a lone surrogate: was a 500 in the validation echo
    b'{"question": "ok \\udfff", "strategy": "vanilla_rag", "index": "sample"}',
    b'{"question": "q", "strategy": "\\ud800", "index": "sample"}',
    b'{"question": "q", "index": "\\ud800"}',
    b'{"question": "q", "index": "sample", "options": {"\\ud800": 1}}',
    b'{"question": "q", "index": "sample", "options": {"k": "\\ud800"}}',
    b'{"question": "q", "index": "sample", "options": {"k": -3}}',
    b'{"question": "q", "index": "sample", "options": {"k": 1e400}}',
    b'{"question": "q", "index": "sample", "options": {"k": 123456789012345678901234567890}}',
    b'{"question": "q", "index": "sample", "options": {"nope": 1}}',
    b'{"question": "q", "index": "sample", "options": [1, 2]}',
    b'{"question": "q", "index": "sample", "extra": 1}',
    b'{"question": ["q"], "index": "sample"}',
    b'{"question": null}',
    b"[]",
    b"null",
    b'"question"',
    b"{",
    b"\xff\xfe{}",
    b'{"question": "\xed\xa0\x80"}',  # a surrogate encoded as (invalid) UTF-8 bytes
    b'{"question": "q", "index": "sample", "options": ' + b'{"a": ' * 200 + b"1" + b"}" * 200 + b"}",
    b"",
]


@pytest.mark.parametrize("body", HOSTILE_BODIES, ids=range(len(HOSTILE_BODIES)))
def test_no_body_a_client_can_send_gets_a_500(world, body):
    for path in ("/ask", "/runs"):
        r = api(world, "POST", path, content=body, headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500, (path, body[:80], r.status_code, r.text[:300])
        assert r.json()["error"]  # JSON with a message
    assert api(world, "GET", "/health").status_code == 200


def test_surrogates_are_refused_with_the_place_they_are(world):
    r = api(world, "POST", "/ask", content=b'{"question": "\\ud800", "index": "sample"}', headers={"content-type": "application/json"})
    assert r.status_code == 422 and "question" in r.json()["error"] and "surrogate" in r.json()["error"]


def test_docs_are_served_offline_with_the_bearer_scheme(world):
    page = api(world, "GET", "/docs")
    assert page.status_code == 200
    srcs = re.findall(r"""(?:src|href)=["']([^"']+)""", page.text)
    assert "/docs/assets/swagger-ui-bundle.js" in srcs and all(s.startswith("/") for s in srcs), srcs
    for s in srcs:
        assert api(world, "GET", s).status_code == 200, s
    assert api(world, "GET", "/docs/assets/..%2F..%2Fpyproject.toml").status_code == 404
    # Swagger's inline start-up script runs by its hash (the browser test sees it render), no other inline script
    script_src = next(d for d in page.headers["content-security-policy"].split(";") if d.strip().startswith("script-src"))
    assert "'sha256-" in script_src and "unsafe-inline" not in script_src
    schema = api(world, "GET", "/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearer"] == {**schema["components"]["securitySchemes"]["bearer"], "type": "http", "scheme": "bearer"}
    assert schema["security"] == [{"bearer": []}] and schema["paths"]["/health"]["get"]["security"] == []


# -- sign-in ------------------------------------------------------------------------------------
def test_a_browser_signs_in_with_a_cookie_and_out_again(world):
    page = "/view/runs/demo"
    with httpx.Client(timeout=30) as client:
        # no token: a browser is sent to the sign-in page, an API client gets 401
        r = client.get(world["base"] + page, headers={"accept": "text/html"})
        assert r.status_code == 303 and r.headers["location"] == "/signin?next=" + quote(page, safe="")
        assert client.get(world["base"] + page).status_code == 401
        form = client.get(world["base"] + "/signin?next=" + quote(page, safe=""))
        assert form.status_code == 200 and "method='post'" in form.text and f"value='{page}'" in form.text
        # the token in a URL signs nobody in; a wrong token neither
        assert "set-cookie" not in client.get(world["base"] + f"/signin?token={TOKEN}").headers
        wrong = sign_in(world, client, "not-the-token")
        assert wrong.status_code == 401 and "set-cookie" not in wrong.headers and "not the token" in wrong.text
        # the right one: a session cookie that is not the token, and back to the page asked for
        ok = sign_in(world, client, next_path=page)
        assert ok.status_code == 303 and ok.headers["location"] == page
        cookie = ok.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict") and "Path=/" in cookie
        value = next(iter(client.cookies.values()))
        assert TOKEN not in value and TOKEN not in cookie
        seen = client.get(world["base"] + page)
        assert seen.status_code == 200 and "Run demo" in seen.text and "sign out" in seen.text
        assert client.get(world["base"] + "/runs").status_code == 200  # the read-only API too
        # the cookie does not start work: that needs the header
        assert client.post(world["base"] + "/ask", json={"question": "q", "index": "sample"}).status_code == 401
        # sign out: the cookie is cleared, and the old value no longer works either
        name = next(iter(client.cookies.keys()))
        out = client.post(world["base"] + "/signout")
        assert out.status_code == 303 and out.headers["location"] == "/signin"
        assert client.get(world["base"] + page).status_code == 401
    assert httpx.get(world["base"] + page, cookies={name: value}).status_code == 401
    assert httpx.get(world["base"] + page, cookies={name: "1.2.3"}).status_code == 401  # forged


def test_sign_in_only_sends_back_to_this_server(world):
    with httpx.Client(timeout=30) as client:
        for body in (b"a=1&" * 10, b"\xff\xfe", b"token", b"%"):  # forms no browser sends: 4xx
            r = client.post(world["base"] + "/signin", content=body, headers={"content-type": "application/x-www-form-urlencoded"})
            assert 400 <= r.status_code < 500, body
        for target in ("//evil.example/x", "https://evil.example/", "/\\evil.example", "javascript:alert(1)"):
            r = sign_in(world, client, next_path=target)
            assert r.status_code == 303 and r.headers["location"] == "/", target


# -- the runs directory is a jail -------------------------------------------------------------
def _everything_served(world) -> str:
    """The text of every listing, run, question and trace page and API answer the
    server gives for the runs it lists (and for the hostile folders by name)."""
    texts = [api(world, "GET", "/").text, api(world, "GET", "/runs").text]
    for rid in ("demo", "alias", "leak-config", "leak-files", "leak-traces", "linked-run", "broken", "garbage"):
        texts += [api(world, "GET", f"/runs/{rid}").text, api(world, "GET", f"/view/runs/{rid}").text,
                  api(world, "GET", f"/runs/{rid}/events").text]  # fmt: skip
        texts.append(api(world, "GET", f"/view/runs/{rid}/traces/abcdef123456").text)
        texts.append(api(world, "GET", f"/runs/{rid}/files/by_type.png").text)
        texts.append(api(world, "GET", f"/view/runs/{rid}/question?qid={quote(world['qids'][0])}").text)
    texts += [api(world, "GET", "/traces/abcdef123456").text, api(world, "GET", "/view/traces/abcdef123456").text]
    return "\n".join(texts)


def test_links_out_of_the_runs_directory_are_never_followed(world):
    served = _everything_served(world)
    assert "SECRET" not in served
    listed = {r["run_id"] for r in api(world, "GET", "/runs").json()}
    # the listing still works, with the good runs (a link inside runs/ is fine) and without the bad
    assert {"demo", "weird", "alias", "leak-files", "leak-traces", "garbage"} <= listed
    assert not listed & {"leak-config", "linked-run", "broken"}
    home = api(world, "GET", "/")
    assert home.status_code == 200 and "3 folder(s) skipped" in home.text and "links outside the runs directory" in home.text
    assert api(world, "GET", "/view/runs/linked-run").status_code == 404
    assert api(world, "GET", "/runs/leak-config").status_code == 404
    assert api(world, "GET", "/runs/leak-files/files/by_type.png").status_code == 404
    assert api(world, "GET", "/traces/abcdef123456").status_code == 404
    assert api(world, "GET", "/view/runs/leak-files").status_code == 200  # shown, with what is inside only
    assert "by_type.png" not in api(world, "GET", "/view/runs/leak-files").text
    # a trace of a run in a linked folder is not found either
    tid = json.loads((world["root"] / "outside" / "run" / "results.jsonl").read_text().splitlines()[0])["trace_id"]
    assert api(world, "GET", f"/view/runs/linked-run/traces/{tid}").status_code == 404


def test_the_static_copy_skips_links_out_of_the_run_with_a_warning(world, tmp_path):
    with pytest.warns(UserWarning, match="links outside its run folder"):
        index = write_static(world["runs"] / "leak-files", tmp_path / "view")
    everything = "".join(p.read_text(errors="replace") for p in (tmp_path / "view").rglob("*.html"))
    assert "SECRET" not in everything and not list((tmp_path / "view").glob("*.png")) and index.exists()


def test_a_run_with_an_incomplete_config_is_4xx_and_does_not_break_the_others(world):
    for path in ("/runs/broken", "/view/runs/broken", "/runs/broken/events", "/view/runs/broken/question?qid=x"):
        r = api(world, "GET", path)
        assert r.status_code == 404 and "strategies" in r.json()["error"], (path, r.text)
    assert api(world, "GET", "/runs").status_code == 200 and api(world, "GET", "/").status_code == 200
    assert "broken" in api(world, "GET", "/").text  # named among the skipped folders, with why


def test_records_of_any_shape_in_a_run_folder_are_shown_or_skipped_not_500(world):
    for path in ("/", "/runs", "/runs/garbage", "/view/runs/garbage", "/view/runs/garbage/question?qid=g1",
                 "/view/runs/garbage/traces/aaaaaa111111", "/traces/aaaaaa111111", "/view/traces/aaaaaa111111",
                 "/view/runs/garbage/traces/bbbbbb222222", "/runs/garbage/events"):  # fmt: skip
        r = api(world, "GET", path)
        assert r.status_code in (200, 404), (path, r.status_code, r.text[:300])
        assert "<img src=x" not in r.text, path  # a prediction is text, escaped
    assert api(world, "GET", "/view/runs/garbage/traces/aaaaaa111111").status_code == 200
    assert api(world, "GET", "/view/runs/garbage/traces/bbbbbb222222").status_code == 404  # a torn line
    summary = api(world, "GET", "/runs/garbage").json()["summary"]
    assert len(summary) == 2 and "other" in {row["strategy"] for row in summary}  # the two records with a strategy and a qid


# -- evaluations over HTTP ----------------------------------------------------------------------
def test_post_runs_checks_everything_before_it_answers(world):
    def post(**body):
        return api(world, "POST", "/runs", json={"dataset": "hotpotqa_train100", "strategies": ["llm_only"], "limit": 1, **body})

    r = post(metrics=["f1", "nope"])
    assert r.status_code == 400 and "nope" in r.json()["error"] and "f1" in r.json()["hint"]
    r = post(strategies=["llm_only", "llm_only"])
    assert r.status_code == 400 and "twice" in r.json()["error"]
    r = post(metrics=["f1", "f1"])
    assert r.status_code == 400 and "twice" in r.json()["error"]
    r = post(options={"vanilla_rag": {"k": 3}})
    assert r.status_code == 400 and "not among the strategies" in r.json()["error"]
    r = post(strategies=["vanilla_rag"], options={"vanilla_rag": {"k": "banana"}})
    assert r.status_code == 400
    assert post(dataset="/etc/passwd").status_code == 400
    assert post(dataset="nope").status_code == 400
    assert api(world, "GET", "/runs").status_code == 200


def test_a_run_started_over_http_streams_progress_and_late_readers_return(world):
    r = api(world, "POST", "/runs", json={"dataset": "hotpotqa_train100", "strategies": ["llm_only"], "limit": 2})
    assert r.status_code == 200, r.text
    run_id = r.json()["run_id"]

    def read_events() -> list[dict]:
        events = []
        with httpx.stream("GET", world["base"] + f"/runs/{run_id}/events", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as s:
            for line in s.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
        return events

    events = read_events()
    assert [e["done"] for e in events if "qid" in e] == [1, 2] and events[-1]["status"] == "done"
    info = api(world, "GET", f"/runs/{run_id}").json()
    assert info["status"] == "done" and info["summary"][0]["strategy"] == "llm_only"
    # a reader after the end gets the final state at once (it used to wait forever), and so does another
    for _ in range(2):
        assert read_events() == [{"status": "done", "done": 2, "total": 2, "error": None}]
    # a run stored before this server started: its state, at once
    with httpx.stream("GET", world["base"] + "/runs/demo/events", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as s:
        assert [json.loads(line[6:])["status"] for line in s.iter_lines() if line.startswith("data: ")] == ["stored"]


# -- connections --------------------------------------------------------------------------------
def test_a_body_that_never_arrives_is_answered_408_and_closed(world):
    head = (f"POST /ask HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n")  # fmt: skip
    got = raw(world, head.encode())  # returns only because the server closes the connection
    assert got.startswith(b"HTTP/1.1 408") and b"did not arrive" in got
    trickle = head.encode() + b'{"question": '  # part of the body, then nothing
    assert raw(world, trickle).startswith(b"HTTP/1.1 408")
    # without the token the body is not waited for at all
    stranger = head.replace(f"Authorization: Bearer {TOKEN}\r\n", "")
    assert raw(world, stranger.encode()).startswith(b"HTTP/1.1 401")
    assert api(world, "GET", "/health").status_code == 200


# -- pages ----------------------------------------------------------------------------------------
def test_question_links_are_encoded_and_open_their_page(world):
    run = api(world, "GET", "/view/runs/weird").text
    hrefs = re.findall(r"href='(/view/runs/weird/question\?qid=[^']+)'", run)
    assert len(hrefs) == 3
    for qid in WEIRD_QIDS:
        href = next(h for h in hrefs if unquote(h.split("qid=", 1)[1].replace("&amp;", "&")) == qid)
        page = api(world, "GET", href.replace("&amp;", "&"))
        assert page.status_code == 200 and f"[{qid}]" in page.text, qid


def test_the_question_page_shows_the_question_once_gold_answers_and_scores(world):
    qid = world["qids"][0]
    text = api(world, "GET", f"/view/runs/demo/question?qid={quote(qid)}").text
    question = next(iter(world["gold"]))
    main = text.split("<main>", 1)[1]
    visible = re.sub(r"<details.*?</details>", "", main, flags=re.DOTALL)  # collapsed prompts and inputs aside
    assert visible.count(f">{question}<") == 1  # once as a text of its own (a search for it quotes it: “…”)
    assert "id='gold'" in text and world["gold"][question] in main
    assert re.search(r"f1 <b>\d\.\d\d</b>", text) and "em <b>" in text
    assert "&lt;script&gt;" in text and "<script>alert" not in text  # the model's answer, escaped
    assert "class='gold'" in text  # gold documents marked among the hits
    # breadcrumbs back to the runs and the run
    crumbs = text.split("<nav class='crumbs'", 1)[1].split("</nav>", 1)[0]
    assert "href='/'" in crumbs and "href='/view/runs/demo'" in crumbs


def test_the_run_page_counts_failure_causes_and_filters_questions_by_them(world):
    run = api(world, "GET", "/view/runs/demo").text
    table = run.split("id='causes'", 1)[1].split("</table>", 1)[0]
    # llm_only answers right (no passages), vanilla_rag wrong with them: three of each
    assert re.search(r"<tr><td>llm_only</td><td class='n'>3</td>", table)
    causes = re.findall(r"data-causes='([^']*)'", run)
    assert len(causes) == 3 and all("llm_only:correct" in c for c in causes)
    wrong = {c.split("vanilla_rag:", 1)[1].split()[0] for c in causes}
    assert wrong and not wrong & {"correct", "error"}
    options = re.findall(r"<option value='([^']+)'>", run.split("id='by-cause'", 1)[1].split("</select>", 1)[0])
    assert options == sorted(f"vanilla_rag:{c}" for c in wrong)  # correct answers are not a cause to filter by
    q = api(world, "GET", f"/view/runs/demo/question?qid={quote(world['qids'][0])}").text
    assert "<th>cause</th>" in q and ">correct<" in q


def test_timeline_chips_are_coloured_by_role_and_link_to_their_steps(world):
    results = api(world, "GET", "/runs/demo").json()
    assert results["status"] == "stored"
    run = api(world, "GET", "/view/runs/demo").text
    trace_href = re.findall(r"href='(/view/runs/demo/traces/[0-9a-f]+)'>trajectory", run)
    pages = [api(world, "GET", h).text for h in trace_href]
    page = next(p for p in pages if "data-agent='search'" in p)
    chips = re.findall(r"<a class='chip st-(\w+)' href='#([\w-]+)' style='--hue:(\d+)'", page)
    assert [c[0] for c in chips] == ["ok", "ok"]
    for _, anchor, _ in chips:
        assert f"id='{anchor}'" in page
    assert chips[0][2] != chips[1][2]  # search and answerer differ
    crumbs = page.split("<nav class='crumbs'", 1)[1].split("</nav>", 1)[0]
    assert "href='/view/runs/demo'" in crumbs and "/view/runs/demo/question?qid=" in crumbs


def test_static_view_opens_without_a_server_and_every_link_resolves(world, tmp_path):
    index = write_static(world["runs"] / "demo", tmp_path / "view")
    text = index.read_text()
    assert "vanilla_rag" in text and "only questions where the strategies disagree" in text
    traces = list((tmp_path / "view" / "traces").glob("*.html"))
    questions = list((tmp_path / "view" / "questions").glob("*.html"))
    assert len(traces) == 6 and len(questions) == 3 and (tmp_path / "view" / "by_type.png").exists()
    assert "href='traces/" in text and "http://" not in text
    _assert_links_resolve(tmp_path / "view")
    # distinct ids that a file name cannot tell apart get distinct files
    write_static(world["runs"] / "weird", tmp_path / "weird")
    pages = {p.read_text().split("<h1 id='question'>", 1)[1].split("</h1>")[0] for p in (tmp_path / "weird" / "questions").glob("*.html")}
    assert len(pages) == 3 and all(any(f"[{q}]" in p for p in pages) for q in WEIRD_QIDS)
    _assert_links_resolve(tmp_path / "weird")


def _assert_links_resolve(root: Path) -> None:
    for page in root.rglob("*.html"):
        body = page.read_text()
        for href in re.findall(r"(?:href|src)='([^']+)'", body):
            if href.startswith(("#", "data:")):
                continue
            assert not urlparse(href).scheme and not href.startswith("/"), (page, href)
            target = (page.parent / unquote(href.split("#")[0])).resolve()
            assert target.is_file() and target != page.resolve() or "#" in href, (page.name, href)
            assert target.is_relative_to(root.resolve()), (page, href)


def test_the_static_copy_never_writes_through_a_link(world, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    out = tmp_path / "view"
    out.mkdir()
    (out / "index.html").symlink_to(victim)
    write_static(world["runs"] / "demo", out)
    assert victim.read_text() == "mine" and not (out / "index.html").is_symlink()
    (tmp_path / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    from marag.errors import MaragError

    with pytest.raises(MaragError, match="symbolic link"):
        write_static(world["runs"] / "demo", tmp_path / "linked")


# -- in a real browser --------------------------------------------------------------------------
@pytest.mark.skipif(not shutil.which("chromium") or not shutil.which("chromedriver"), reason="needs Debian's chromium and chromium-driver (apt install chromium chromium-driver)")
def test_viewer_in_a_real_browser(world, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"):  # fmt: skip
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=opts, service=service)
    base = world["base"]

    def at(path: str) -> None:
        """Wait until the browser shows `path` (a click or a form post navigates a little later)."""
        WebDriverWait(driver, 30).until(lambda d: urlparse(d.current_url).path == path)

    try:
        driver.set_window_size(1200, 1400)
        driver.implicitly_wait(10)  # elements of the next page, after a click, may take a moment
        # a person opens the server: the sign-in page, the token typed once
        driver.get(base + "/")
        assert urlparse(driver.current_url).path == "/signin"
        driver.find_element(By.ID, "token").send_keys("wrong")
        driver.find_element(By.ID, "signin").click()
        error = WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.ID, "signin-error"))  # the form post returns later
        assert "not the token" in error[0].text
        expected = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]  # reading drains the log
        assert len(expected) == 1 and "/signin" in expected[0] and "401" in expected[0]
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "signin").click()
        at("/")
        assert driver.find_element(By.ID, "runs")
        assert driver.execute_script("return document.cookie") == ""  # HttpOnly: scripts cannot read it

        driver.find_element(By.LINK_TEXT, "demo").click()
        assert driver.find_element(By.ID, "metrics").text.count("llm_only") == 1
        assert driver.find_elements(By.CSS_SELECTOR, "img[alt='by_type.png']")[0].get_attribute("naturalWidth") != "0"
        # the questions come before the plots
        assert driver.find_element(By.ID, "compare").location["y"] < driver.find_element(By.ID, "plots").location["y"]
        rows = driver.find_elements(By.CSS_SELECTOR, "tr[data-agree]")
        assert len(rows) == 3 and all(r.is_displayed() for r in rows)
        agree = [r.get_attribute("data-agree") for r in rows]
        driver.find_element(By.ID, "only-disagree").click()
        assert [r.is_displayed() for r in rows] == [a == "0" for a in agree] and "0" in agree
        driver.find_element(By.ID, "only-disagree").click()
        assert all(r.is_displayed() for r in rows)

        # one question: asked once, its gold answer, each strategy's answer and scores, trajectories side by side
        driver.find_elements(By.CSS_SELECTOR, "#compare a.question")[0].click()
        question = driver.find_element(By.ID, "question").text
        headings = driver.find_elements(By.CSS_SELECTOR, "main h1, main h2, main h3")
        assert question in world["gold"] and [h.text for h in headings].count(question) == 1
        assert not [h for h in headings if question in h.text and h.get_attribute("id") != "question"]
        assert world["gold"][question] in driver.find_element(By.ID, "gold").text
        answers = driver.find_element(By.ID, "answers").text
        assert "llm_only" in answers and "vanilla_rag" in answers and "f1" in answers
        assert len(driver.find_elements(By.CSS_SELECTOR, ".cols > div")) == 2
        question_url = driver.current_url
        # its breadcrumb leads back to the run
        driver.find_element(By.PARTIAL_LINK_TEXT, "run demo").click()
        at("/view/runs/demo")

        driver.find_element(By.PARTIAL_LINK_TEXT, "trajectory").click()
        assert driver.find_element(By.ID, "answer").text
        steps = driver.find_elements(By.CSS_SELECTOR, ".steps .step")
        assert [s.get_attribute("data-agent") for s in steps] in (["answerer"], ["search", "answerer"])
        call = driver.find_element(By.CSS_SELECTOR, "details.llm")
        call.find_element(By.TAG_NAME, "summary").click()
        assert call.find_element(By.TAG_NAME, "pre").is_displayed() and "prompt tokens" in call.text
        chip = driver.find_elements(By.CSS_SELECTOR, ".timeline a.chip")[-1]
        chip.click()
        target = urlparse(driver.current_url).fragment
        assert target and driver.find_element(By.ID, target).get_attribute("data-agent") == chip.text
        shot = tmp_path / "trace.png"
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        # the trace's breadcrumbs: its question, then its run
        driver.find_element(By.CSS_SELECTOR, "nav.crumbs a[href*='question']").click()
        at("/view/runs/demo/question")
        assert driver.find_element(By.ID, "gold").text
        driver.get(question_url)

        # a question id with / # ? % opens its page from the run's table
        driver.get(base + "/view/runs/weird")
        link = next(a for a in driver.find_elements(By.CSS_SELECTOR, "#compare a.question") if a.text.startswith("[a/b#c?d%e]"))
        link.click()
        assert driver.find_element(By.ID, "question").text.startswith("[a/b#c?d%e]")

        # the API docs render from the server's own files
        driver.get(base + "/docs")
        title = WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".swagger-ui .info .title"))
        assert "marag" in title[0].text and driver.find_element(By.CSS_SELECTOR, ".swagger-ui .btn.authorize")

        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == []

        # sign out: the pages need the token again
        driver.get(base + "/")
        driver.find_element(By.CSS_SELECTOR, "header form button").click()
        at("/signin")
        driver.get(base + "/view/runs/demo")
        assert urlparse(driver.current_url).path == "/signin"

        # the static copy is the same pages, from files
        driver.get(write_static(world["runs"] / "demo", tmp_path / "view").as_uri())
        assert len(driver.find_elements(By.CSS_SELECTOR, "tr[data-agree]")) == 3
        driver.find_elements(By.CSS_SELECTOR, "#compare a.question")[0].click()
        assert driver.find_element(By.ID, "gold").text
        driver.find_element(By.PARTIAL_LINK_TEXT, "run demo").click()
        WebDriverWait(driver, 30).until(lambda d: d.current_url.endswith("/view/index.html"))
    finally:
        driver.quit()
