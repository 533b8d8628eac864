from __future__ import annotations

from pathlib import Path

import pytest

from marag.config import data_dir as _data_dir


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared benchmark data; tests that need it skip (with the reason) when absent."""
    d = _data_dir(required=False)
    if d is None:
        pytest.skip("benchmark data not found: set MARAG_DATA to the shared data directory")
    return d


@pytest.fixture(scope="session")
def repo() -> Path:
    return Path(__file__).resolve().parents[1]


@pytest.fixture
def marag(monkeypatch, capsys):
    """Run the `marag` command through its real entry point: marag("ask", "q", ...) ->
    (exit code, stdout, stderr)."""
    import sys

    from marag import cli

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["marag", *args])
        code = 0
        try:
            cli.main()
        except SystemExit as e:
            code = e.code or 0
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def cli_index(tmp_path, repo, marag) -> Path:
    """The sample corpus indexed (BM25) through `marag index`, as a user builds it."""
    out = tmp_path / "idx"
    code, stdout, err = marag("index", str(repo / "samples/corpus"), "--out", str(out), "--retrievers", "bm25", "--quiet")
    assert code == 0, err
    assert "indexed 12 documents" in stdout
    return out


MILVUS_HINT = "the Milvus backend needs pymilvus and milvus-lite (pip install 'marag[milvus]'; in marag[dev])"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory) -> str:
    """A real `milvus-lite server` process on 127.0.0.1 for the session, as a user starts
    one; yields its host:port. Skips with the install hint when the extra is absent."""
    import shutil
    import socket
    import subprocess
    import sys
    import time

    pytest.importorskip("pymilvus", reason=MILVUS_HINT)
    pytest.importorskip("milvus_lite", reason=MILVUS_HINT)
    exe = shutil.which("milvus-lite") or str(Path(sys.executable).parent / "milvus-lite")
    port = free_port()
    proc = subprocess.Popen([exe, "server", "--data-dir", str(tmp_path_factory.mktemp("milvus")), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    for _ in range(600):  # up to two minutes on a busy machine
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("milvus-lite server did not start: " + proc.stdout.read().decode()[-2000:])
    if proc.poll() is not None:
        pytest.fail("milvus-lite server exited: " + proc.stdout.read().decode()[-2000:])
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="session")
def local_ray():
    """A local Ray instance for the session, started as `marag eval --executor ray`
    starts one (a slow first start is waited for and retried)."""
    ray = pytest.importorskip("ray", reason="the Ray executor needs ray (pip install 'marag[ray]'; in marag[dev])")
    from marag.eval.distributed import start_ray

    start_ray(num_cpus=2)
    yield ray
    ray.shutdown()


# --- the real models of the integration suite: SmolLM2-135M for the wiring tests (fast;
# its answers are near chance, so those tests assert budgets and protocol, not quality)
# and the default model where quality is the point. Both come from the catalogue, pulled
# by `make setup`; a test skips, naming the command, when its model is not pulled.
# The dense embedder's file (catalogue model minilm-int8) is pulled by `make setup` into
# the same folder ($MARAG_HOME, else the user cache); the tests that run MiniLM read it
# from there and, where it is missing, fail with `run marag models pull minilm-int8`.
# Tests of its checks plant files in a temporary MARAG_HOME instead.

SMOKE_MODEL = "smollm2-135m"


def pulled(name: str) -> Path:
    from marag.llm.models import ModelStore

    path = ModelStore().pulled(name)
    if path is None:
        pytest.skip(f"model {name} is not pulled: run `marag models pull {name}` (`make setup` does)")
    return path


@pytest.fixture(scope="session")
def smoke_model() -> Path:
    return pulled(SMOKE_MODEL)


@pytest.fixture(scope="session")
def default_model() -> Path:
    from marag.llm.models import DEFAULT_MODEL

    return pulled(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def smoke_llm(smoke_model):
    """One SmolLM2 server for the whole run (4 slots), shared by every wiring test."""
    from marag.llm import make_llm

    model = make_llm(f"llamacpp:{smoke_model}", threads=2)
    yield model
    model.close()
