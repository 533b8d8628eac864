"""`marag serve` as a real server process on loopback (scripted model): the API, the
viewer pages in a real headless browser, and requests that must fail cleanly (too big,
unknown names, path traversal, no token) while the server keeps serving."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import httpx
import pytest

from marag.eval.runner import EvalConfig, run_eval
from marag.index.pipeline import index_corpus
from marag.index.store import IndexConfig
from marag.llm import LLMConfig, ScriptedLLM
from marag.serve.view import write_static

TOKEN = "test-token-123"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory, repo, data_dir):
    """A runs directory with one scripted evaluation, an indexes directory with the
    sample index, and a server process serving both."""
    root = tmp_path_factory.mktemp("serve")
    runs, indexes = root / "runs", root / "indexes"
    index_corpus(repo / "samples" / "corpus", indexes / "sample", IndexConfig(retrievers=["bm25"]), progress=False)
    cfg = EvalConfig(dataset="hotpotqa_train100", strategies=["llm_only", "vanilla_rag"], limit=3,
                     llm=LLMConfig(backend="scripted"), index=IndexConfig(retrievers=["bm25"]))  # fmt: skip
    from marag.eval.datasets import load_dataset

    gold = {q.question: q.answers[0] for q in load_dataset("hotpotqa_train100", data_dir).questions[:3]}

    def reply(messages, output):  # right without passages (llm_only), wrong with them: the strategies disagree
        user = messages[-1]["content"]
        q = next(q for q in gold if q in user)
        return {"answer": gold[q] if "Passages:" not in user else "a guess"}

    asyncio.run(run_eval(cfg, runs / "demo", data_dir=data_dir, progress=False, index_cache=root / "cache",
                         llm=ScriptedLLM(fn=reply)))  # fmt: skip
    from marag.eval.report import build_report

    build_report([runs / "demo"])
    port = free_port()
    env = {**os.environ, "MARAG_TEST_TOKEN": TOKEN, "MARAG_DATA": str(data_dir)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "marag.cli", "serve", "--llm", "scripted", "--runs", str(runs), "--indexes", str(indexes),
         "--port", str(port), "--token-env", "MARAG_TEST_TOKEN", "--max-body", "5000"],
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
    yield {"base": base, "runs": runs, "root": root, "proc": proc}
    proc.terminate()
    proc.wait(10)


def api(world, method: str, path: str, **kw):
    headers = {"Authorization": f"Bearer {TOKEN}", **kw.pop("headers", {})}
    return httpx.request(method, world["base"] + path, headers=headers, timeout=60, **kw)


def test_health_strategies_and_the_token(world):
    assert httpx.get(world["base"] + "/health").json()["status"] == "ok"  # no token needed
    r = httpx.get(world["base"] + "/strategies")
    assert r.status_code == 401 and "Bearer" in r.json()["hint"]
    names = [s["name"] for s in api(world, "GET", "/strategies").json()]
    assert {"vanilla_rag", "mrag", "unirag", "kair", "ropmura", "ginger"} <= set(names)
    assert api(world, "GET", "/indexes").json() == ["sample"]
    assert "/ask" in api(world, "GET", "/openapi.json").json()["paths"]


def test_ask_returns_answer_sources_and_a_viewable_trace(world):
    r = api(world, "POST", "/ask", json={"question": "Who created Python?", "strategy": "vanilla_rag", "index": "sample"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answer"] and body["sources"][0]["doc_id"] == "computing/python-language.md"
    trace = api(world, "GET", f"/traces/{body['trace_id']}").json()
    assert trace["question"] == "Who created Python?" and [s["agent"] for s in trace["steps"]] == ["search", "answerer"]
    page = api(world, "GET", f"/view/traces/{body['trace_id']}")
    assert page.status_code == 200 and "Who created Python?" in page.text


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
    assert api(world, "GET", "/health").status_code == 200  # still serving
    assert api(world, "GET", "/runs/demo/files/by_type.png").headers["content-type"] == "image/png"


def test_a_run_started_over_http_streams_progress(world):
    r = api(world, "POST", "/runs", json={"dataset": "hotpotqa_train100", "strategies": ["llm_only"], "limit": 2})
    assert r.status_code == 200, r.text
    run_id = r.json()["run_id"]
    events = []
    with httpx.stream("GET", world["base"] + f"/runs/{run_id}/events", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as s:
        for line in s.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert [e.get("done") for e in events if "done" in e] == [1, 2] and events[-1]["status"] == "done"
    info = api(world, "GET", f"/runs/{run_id}").json()
    assert info["status"] == "done" and info["summary"][0]["strategy"] == "llm_only"
    assert api(world, "POST", "/runs", json={"dataset": "/etc/passwd", "strategies": ["llm_only"]}).status_code == 400


def test_static_view_opens_without_a_server(world, tmp_path):
    index = write_static(world["runs"] / "demo", tmp_path / "view")
    text = index.read_text()
    assert "vanilla_rag" in text and "only questions where the strategies disagree" in text
    traces = list((tmp_path / "view" / "traces").glob("*.html"))
    questions = list((tmp_path / "view" / "questions").glob("*.html"))
    assert len(traces) == 6 and len(questions) == 3 and (tmp_path / "view" / "by_type.png").exists()
    assert "href='traces/" in text and "http://" not in text


@pytest.mark.skipif(not shutil.which("chromium") or not shutil.which("chromedriver"), reason="needs Debian's chromium and chromium-driver (apt install chromium chromium-driver)")
def test_viewer_in_a_real_browser(world, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.common.by import By

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"):  # fmt: skip
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=opts, service=service)
    try:
        driver.set_window_size(1200, 1400)
        # the live server wants the token on every request: the browser sends it as a header
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Bearer {TOKEN}"}})
        driver.get(world["base"] + "/")
        driver.find_element(By.LINK_TEXT, "demo").click()
        assert driver.find_element(By.ID, "metrics").text.count("llm_only") == 1
        assert driver.find_elements(By.CSS_SELECTOR, "img[alt='by_type.png']")[0].get_attribute("naturalWidth") != "0"
        rows = driver.find_elements(By.CSS_SELECTOR, "tr[data-agree]")
        assert len(rows) == 3 and all(r.is_displayed() for r in rows)
        agree = [r.get_attribute("data-agree") for r in rows]
        driver.find_element(By.ID, "only-disagree").click()
        assert [r.is_displayed() for r in rows] == [a == "0" for a in agree] and "0" in agree
        driver.find_element(By.ID, "only-disagree").click()
        assert all(r.is_displayed() for r in rows)
        # one question, every strategy's trajectory side by side
        driver.find_elements(By.CSS_SELECTOR, "#compare td a")[0].click()
        assert len(driver.find_elements(By.CSS_SELECTOR, ".cols > div")) == 2
        driver.back()
        driver.find_element(By.PARTIAL_LINK_TEXT, "trajectory").click()
        assert driver.find_element(By.ID, "answer").text
        steps = driver.find_elements(By.CSS_SELECTOR, "#steps .step")
        assert [s.get_attribute("data-agent") for s in steps] in (["answerer"], ["search", "answerer"])
        call = driver.find_element(By.CSS_SELECTOR, "details.llm")
        call.find_element(By.TAG_NAME, "summary").click()
        assert call.find_element(By.TAG_NAME, "pre").is_displayed() and "prompt tokens" in call.text
        shot = tmp_path / "trace.png"
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == []
        # the static copy is the same pages, from files
        driver.get(write_static(world["runs"] / "demo", tmp_path / "view").as_uri())
        assert len(driver.find_elements(By.CSS_SELECTOR, "tr[data-agree]")) == 3
    finally:
        driver.quit()
