"""Scale-out as a user runs it, against a real `milvus-lite server` on 127.0.0.1: index ->
ask -> eval -> kill -> resume through the CLI with a milvus:// URI and a model server
from a run file; Ray workers over the same collection give the local executor's answers;
`marag serve` answers from it; credentials only from the environment; every failure is
one line with its fix."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from conftest import MILVUS_HINT, free_port

pytest.importorskip("pymilvus", reason=MILVUS_HINT)
pytest.importorskip("milvus_lite", reason=MILVUS_HINT)

from marag.errors import MaragError  # noqa: E402
from marag.eval.runner import EvalConfig, run_eval  # noqa: E402
from marag.index.milvus import connect, parse_target  # noqa: E402
from marag.index.pipeline import index_corpus  # noqa: E402
from marag.index.store import IndexConfig  # noqa: E402
from marag.index.uri import open_index  # noqa: E402
from marag.llm import LLMConfig  # noqa: E402

SRC = os.path.join(os.path.dirname(__file__), os.pardir, "src")


class ModelServer:
    """An OpenAI-compatible /v1/chat/completions stub: every reply is a valid answer
    ("read passages" when the prompt held passages, else "no passages"). With
    `hold_from=N`, request N and later wait until `release()` (a model server that
    stalls, so the test can kill the client mid-run)."""

    def __init__(self, hold_from: int | None = None):
        self.requests, self.hold_from = 0, hold_from
        self.holding, self.released = threading.Event(), threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests += 1
                if stub.hold_from is not None and stub.requests >= stub.hold_from:
                    stub.holding.set()
                    stub.released.wait(60)
                # the whole conversation: an answer of the wrong kind is asked for again in a second turn
                read = any("Passages:" in m["content"] for m in body["messages"] if m["role"] == "user")
                content = json.dumps({"answer": "read passages" if read else "no passages"})
                data = json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
                                   "usage": {"prompt_tokens": 10, "completion_tokens": 3}}).encode()  # fmt: skip
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client was killed while we held its request
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def release(self) -> None:
        self.hold_from = None
        self.released.set()

    def close(self) -> None:
        self.release()
        self.server.shutdown()


def results(run_dir) -> dict[tuple[str, str], dict]:
    out = {}
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        out[(r["strategy"], r["qid"])] = r
    return out


def one_line_error(code: int, err: str) -> tuple[str, str]:
    """(the error line, the hint line); fails unless the command failed with exactly those."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err and len(lines) == 2, err
    assert lines[0].startswith("error: ") and lines[1].startswith("  hint: "), err
    return lines[0], lines[1]


@pytest.fixture(scope="module")
def hotpot(milvus_server, data_dir):
    """hotpotqa_train100's corpus as a BM25 Milvus index (built once for the module)."""
    uri = f"milvus://{milvus_server}/hotpot_shared"
    from marag.eval.datasets import load_dataset
    from marag.index.pipeline import index_documents

    index_documents(load_dataset("hotpotqa_train100", data_dir).documents, uri, IndexConfig(retrievers=["bm25"]), progress=False)
    return uri


@pytest.fixture(scope="module")
def sample(milvus_server, repo):
    uri = f"milvus://{milvus_server}/sample_cli"
    index_corpus(repo / "samples" / "corpus", uri, IndexConfig(), progress=False)
    return uri


def test_index_ask_eval_kill_resume_through_the_cli(milvus_server, data_dir, tmp_path, marag):
    uri = f"milvus://{milvus_server}/hotpot_cli"
    code, out, err = marag("index", "hotpotqa_train100", "--out", uri, "--retrievers", "bm25", "--batch-size", "400", "-q",
                           "--data-dir", str(data_dir))  # fmt: skip
    assert code == 0, err
    assert f"indexed 994 documents as 995 chunks (bm25) into {uri}" in out
    from marag.eval.datasets import load_dataset

    q = load_dataset("hotpotqa_train100", data_dir).questions[0]
    code, out, err = marag("ask", q.question, "--index", uri, "--llm", "scripted", "--json", "--trace-out", str(tmp_path / "t.jsonl"))
    assert code == 0, err
    answer = json.loads(out)
    assert answer["sources"] and answer["sources"][0]["doc_id"] in q.gold_doc_ids
    trace = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[0])
    assert trace["steps"][0]["searches"][0]["retriever"] == "milvus-bm25"

    # eval from a run file (index URI + model server), killed while the model server
    # holds its third request, then resumed by the same command
    model = ModelServer(hold_from=3)
    runfile = tmp_path / "run.toml"
    runfile.write_text(
        f'dataset = "hotpotqa_train100"\nstrategies = ["llm_only", "vanilla_rag"]\nlimit = 3\nindex_path = "{uri}"\n'
        f'[llm]\nbackend = "openai"\nmodel = "stub"\nbase_url = "{model.url}"\nmax_retries = 0\n'
    )
    runs = tmp_path / "runs"
    cmd = ["eval", "--config", str(runfile), "--runs", str(runs), "--run-id", "r", "--data-dir", str(data_dir), "--concurrency", "1", "-q"]
    env = {**os.environ, "PYTHONPATH": os.path.abspath(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "marag.cli", *cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert model.holding.wait(120), proc.communicate(timeout=5)[0].decode()[-2000:]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len((runs / "r" / "results.jsonl").read_text().splitlines()) < 2:
            time.sleep(0.1)
        proc.kill()  # SIGKILL: no cleanup of any kind
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        model.release()
    assert len(results(runs / "r")) == 2
    code, out, err = marag(*cmd[:-1])  # the same command, with progress
    assert code == 0, err
    assert f"resuming {runs / 'r'}: 2 of 6 answers done, 4 to go" in err
    done = results(runs / "r")
    assert len(done) == 6 and all(r["error"] is None for r in done.values())
    assert {r["prediction"] for k, r in done.items() if k[0] == "llm_only"} == {"no passages"}
    assert {r["prediction"] for k, r in done.items() if k[0] == "vanilla_rag"} == {"read passages"}
    assert all(r["retrieved_doc_ids"] for k, r in done.items() if k[0] == "vanilla_rag")
    saved = json.loads((runs / "r" / "config.json").read_text())["config"]
    assert saved["index_path"] == uri and saved["llm"]["base_url"] == model.url and saved["index"]["retrievers"] == ["bm25"]
    model.close()


def test_ray_workers_share_the_collection_and_answer_as_the_local_executor(local_ray, hotpot, data_dir, tmp_path):
    cfg = EvalConfig(dataset="hotpotqa_train100", strategies=["llm_only", "vanilla_rag"], limit=3, concurrency=2,
                     llm=LLMConfig(backend="scripted"), index_path=hotpot, index=open_index(hotpot).config)  # fmt: skip
    cache = tmp_path / "cache"
    asyncio.run(run_eval(cfg, tmp_path / "local", data_dir=data_dir, index_cache=cache, progress=False))
    asyncio.run(run_eval(cfg, tmp_path / "ray", data_dir=data_dir, index_cache=cache, progress=False, executor="ray"))
    local, remote = results(tmp_path / "local"), results(tmp_path / "ray")
    assert set(local) == set(remote) and len(remote) == 6
    for key in local:
        assert remote[key]["error"] is None
        for field in ("prediction", "metrics", "retrieved_doc_ids"):
            assert local[key][field] == remote[key][field], (key, field)
    assert any(r["retrieved_doc_ids"] for r in remote.values())
    assert not cache.exists()  # no process built a copy of the index: all read the shared collection
    assert json.loads((tmp_path / "ray" / "config.json").read_text())["config"]["index_path"] == hotpot


def test_ray_refuses_a_lite_file_with_the_command_that_serves_it(local_ray, tmp_path, repo, data_dir):
    target = f"milvus:{tmp_path / 'kb.db'}#sample"
    index_corpus(repo / "samples" / "corpus", target, IndexConfig(retrievers=["bm25"]), progress=False)
    qs = tmp_path / "q.jsonl"
    qs.write_text(json.dumps({"id": "q1", "question": "Who created Python?", "answers": ["Guido van Rossum"]}) + "\n")
    cfg = EvalConfig(dataset=str(qs), strategies=["vanilla_rag"], llm=LLMConfig(backend="scripted"), index_path=target,
                     index=IndexConfig(retrievers=["bm25"]), executor="ray")  # fmt: skip
    with pytest.raises(MaragError, match="can be opened by one process at a time, and Ray workers are many") as info:
        asyncio.run(run_eval(cfg, tmp_path / "run", progress=False))
    assert f"milvus-lite server --data-dir {tmp_path / 'kb.db'} --host 127.0.0.1" in info.value.hint
    assert "milvus://127.0.0.1:19530/sample" in info.value.hint


def test_a_run_file_holds_the_cluster_setup(local_ray, hotpot, data_dir, tmp_path, marag):
    """Index URI, model endpoint and executor in one TOML file, replayed by `eval --config`;
    the run's own config.json replays it again."""
    model = ModelServer()
    runfile = tmp_path / "cluster.toml"
    runfile.write_text(
        f'dataset = "hotpotqa_train100"\nstrategies = ["vanilla_rag"]\nlimit = 2\nindex_path = "{hotpot}"\nexecutor = "ray"\n'
        f'[llm]\nbackend = "openai"\nmodel = "stub"\nbase_url = "{model.url}"\n'
    )
    runs = tmp_path / "runs"
    base = ["--runs", str(runs), "--data-dir", str(data_dir), "-q"]
    code, out, err = marag("eval", "--config", str(runfile), "--run-id", "first", *base)
    assert code == 0, err
    first = json.loads((runs / "first" / "config.json").read_text())
    assert first["config"]["executor"] == "ray" and first["config"]["index_path"] == hotpot
    assert first["config"]["llm"]["backend"] == "openai" and first["config"]["llm"]["base_url"] == model.url
    assert {r["prediction"] for r in results(runs / "first").values()} == {"read passages"}
    code, out, err = marag("eval", "--config", str(runs / "first" / "config.json"), "--run-id", "again", *base)
    assert code == 0, err
    again = json.loads((runs / "again" / "config.json").read_text())
    assert again["fingerprint"] == first["fingerprint"] and again["config"] == first["config"]
    # the same run through options names the same run: an index URI's settings come from its manifest
    code, out, err = marag("eval", "hotpotqa_train100", "--strategies", "vanilla_rag", "--limit", "2", "--index", hotpot,
                           "--llm", "openai:stub", "--llm-base-url", model.url, "--run-id", "options", *base)  # fmt: skip
    assert code == 0, err
    assert json.loads((runs / "options" / "config.json").read_text())["fingerprint"] == first["fingerprint"]
    model.close()


def test_serve_answers_from_a_milvus_index(sample, tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.path.abspath(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "marag.cli", "serve", "--llm", "scripted", "--runs", str(tmp_path / "runs"),
                             "--indexes", sample, "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            proc.kill()
            pytest.fail("server did not start: " + proc.stdout.read().decode()[-2000:])
        assert httpx.get(base + "/indexes").json() == ["sample_cli"]
        for _ in range(2):  # the second question reuses the opened collection
            r = httpx.post(base + "/ask", json={"question": "Who created Python?", "index": "sample_cli"}, timeout=60)
            assert r.status_code == 200, r.text
            assert r.json()["sources"][0]["doc_id"] == "computing/python-language.md"
        trace = httpx.get(base + f"/traces/{r.json()['trace_id']}").json()
        assert trace["steps"][0]["searches"][0]["retriever"] == "milvus-hybrid"
        r = httpx.post(base + "/ask", json={"question": "Who created Python?", "index": "other"}, timeout=60)
        assert r.status_code == 400 and "unknown index" in r.json()["error"] and "sample_cli" in r.json()["hint"]
    finally:
        proc.terminate()
        proc.wait(10)


# -- credentials: only from the environment ---------------------------------------------------
SECRET = "root:s3cret-Milvus-42"


@pytest.fixture(scope="module")
def guarded_milvus(tmp_path_factory):
    """A milvus-lite server that checks credentials as Milvus does (Milvus Lite has no
    users): a request without `authorization: base64(token)` gets gRPC UNAUTHENTICATED,
    Milvus's answer to a wrong user, password or API key."""
    from concurrent import futures

    import grpc
    from milvus_lite.adapter.grpc.servicer import MilvusServicer
    from milvus_lite.db import MilvusLite
    from pymilvus.grpc_gen import milvus_pb2_grpc

    class Credentials(grpc.ServerInterceptor):
        want = base64.b64encode(SECRET.encode()).decode()

        def intercept_service(self, continuation, details):
            if dict(details.invocation_metadata).get("authorization") == self.want:
                return continuation(details)

            def deny(request, context):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "auth check failure, please check username, password or API key are correct")

            return grpc.unary_unary_rpc_method_handler(deny)

    db = MilvusLite(str(tmp_path_factory.mktemp("guarded")))
    server = grpc.server(futures.ThreadPoolExecutor(8), interceptors=[Credentials()])
    milvus_pb2_grpc.add_MilvusServiceServicer_to_server(MilvusServicer(db), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0)
    db.close()


def test_credentials_come_only_from_the_environment(guarded_milvus, repo, tmp_path, marag, monkeypatch):
    uri = f"milvus://{guarded_milvus}/sample"
    monkeypatch.setenv("MARAG_MILVUS_TOKEN", SECRET)
    argv = ["index", str(repo / "samples" / "corpus"), "--out", uri, "--retrievers", "bm25"]
    code, out1, err1 = marag(*argv)
    assert code == 0, err1
    qs = tmp_path / "q.jsonl"
    qs.write_text(json.dumps({"id": "q1", "question": "Who created Python?", "answers": ["Guido van Rossum"]}) + "\n")
    runs = tmp_path / "runs"
    eval_argv = ["eval", str(qs), "--index", uri, "--strategies", "vanilla_rag", "--llm", "scripted", "--runs", str(runs), "--run-id", "r"]
    code, out2, err2 = marag(*eval_argv)
    assert code == 0, err2
    assert results(runs / "r")[("vanilla_rag", "q1")]["retrieved_doc_ids"][0] == "computing/python-language.md"
    assert json.loads((runs / "r" / "config.json").read_text())["config"]["index_path"] == uri
    written = "".join(p.read_text(errors="replace") for p in runs.rglob("*") if p.is_file())
    for text in (written, out1, err1, out2, err2, " ".join(argv + eval_argv)):
        assert "s3cret" not in text and base64.b64encode(SECRET.encode()).decode() not in text
    # another variable, named in the URI (its name, never its value)
    monkeypatch.delenv("MARAG_MILVUS_TOKEN")
    monkeypatch.setenv("TEAM_MILVUS", SECRET)
    code, out, err = marag("ask", "Who created Python?", "--index", uri + "?token_env=TEAM_MILVUS", "--llm", "scripted", "--json")
    assert code == 0 and json.loads(out)["sources"][0]["doc_id"] == "computing/python-language.md", err
    # wrong and missing credentials: one line each, naming the variable, never its value
    monkeypatch.setenv("MARAG_MILVUS_TOKEN", "root:wrong-password")
    line, hint = one_line_error(*marag("ask", "Who created Python?", "--index", uri, "--llm", "scripted")[::2])
    assert line == f"error: Milvus at {guarded_milvus} refused the credentials in $MARAG_MILVUS_TOKEN"
    assert "export MARAG_MILVUS_TOKEN=USER:PASSWORD" in hint and "wrong-password" not in line + hint
    monkeypatch.delenv("MARAG_MILVUS_TOKEN")
    line, hint = one_line_error(*marag("ask", "Who created Python?", "--index", uri, "--llm", "scripted")[::2])
    assert line == f"error: Milvus at {guarded_milvus} needs credentials and $MARAG_MILVUS_TOKEN is not set"
    line, hint = one_line_error(*marag("ask", "q", "--index", f"milvus://root:pw@{guarded_milvus}/sample", "--llm", "scripted")[::2])
    assert "credentials never go in an index URI" in line and "MARAG_MILVUS_TOKEN" in hint


# -- the other failures: one line each, with the fix --------------------------------------------
def test_server_down_collection_missing_and_embedder_mismatch(milvus_server, sample, marag, tmp_path):
    port = free_port()
    line, hint = one_line_error(*marag("ask", "q", "--index", f"milvus://127.0.0.1:{port}/sample", "--llm", "scripted")[::2])
    assert line == f"error: cannot reach Milvus at 127.0.0.1:{port}: the server is down or the address is wrong"
    assert f"milvus-lite server --data-dir DIR --host 127.0.0.1 --port {port}" in hint

    line, hint = one_line_error(*marag("ask", "q", "--index", f"milvus://{milvus_server}/nope", "--llm", "scripted")[::2])
    assert line.startswith(f"error: no collection 'nope' in Milvus at {milvus_server} (it has: ") and "sample_cli" in line
    assert hint == f"  hint: build it: marag index DOCS --out milvus://{milvus_server}/nope"

    # the manifest says the vectors came from another MiniLM build than the one installed
    client = connect(parse_target(sample))
    props = client.describe_collection("sample_cli")["properties"]
    manifest = json.loads(props["marag.manifest"])
    real = manifest["embedder"]["model_sha256"]
    manifest["embedder"]["model_sha256"] = "0" * 64
    client.alter_collection_properties("sample_cli", properties={"marag.manifest": json.dumps(manifest)})
    try:
        line, hint = one_line_error(*marag("ask", "Who created Python?", "--index", sample, "--llm", "scripted")[::2])
        assert line == (f"error: embedder mismatch: {sample} holds vectors of minilm (384-dim, sha256 000000000000), "
                        f"but this installation's is minilm (384-dim, sha256 {real[:12]})")  # fmt: skip
        assert f"marag index DOCS --out {sample} --overwrite" in hint
        # BM25 needs no embedder: it still answers
        code, out, err = marag("ask", "Who created Python?", "--index", sample, "--retriever", "bm25", "--llm", "scripted", "--json")
        assert code == 0, err
    finally:
        manifest["embedder"]["model_sha256"] = real
        client.alter_collection_properties("sample_cli", properties={"marag.manifest": json.dumps(manifest)})


def test_a_lite_file_another_process_holds(tmp_path, repo):
    db = tmp_path / "kb.db"
    # building it returns the opened index: this (test) process holds the file until it closes it
    idx = index_corpus(repo / "samples" / "corpus", f"milvus:{db}#sample", IndexConfig(retrievers=["bm25"]), progress=False)
    env = {**os.environ, "PYTHONPATH": os.path.abspath(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    argv = [sys.executable, "-m", "marag.cli", "ask", "Who created Python?", "--index", f"milvus:{db}#sample", "--llm", "scripted", "--json"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    line, hint = one_line_error(done.returncode, done.stderr)
    assert line == f"error: cannot open the Milvus Lite file {db}: another process has it open (a Lite file serves one process at a time)"
    assert f"milvus-lite server --data-dir {db} --host 127.0.0.1" in hint and "milvus://127.0.0.1:19530/sample" in hint
    # closed, the file is another process's to open
    idx.close()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout)["sources"][0]["doc_id"] == "computing/python-language.md", done.stderr
