"""benchmarks/stash.py carries a run's resumable text files between sessions: saved
without indexes or oversized files, restored whole, never over a different file nor
outside the target."""

from __future__ import annotations

import io
import tarfile

import pytest
from bench import load_benchmark


def test_a_run_round_trips_without_its_indexes_and_big_files(tmp_path, monkeypatch):
    stash = load_benchmark("stash")
    monkeypatch.setattr(stash, "STASH", tmp_path / "stash")
    run = tmp_path / "run"
    (run / "sources" / "a").mkdir(parents=True)
    (run / ".marag").mkdir()
    (run / "plan.json").write_text('{"stages": {}}')
    (run / "sources" / "a" / "trajectories.jsonl").write_text('{"qid": "q1"}\n')
    (run / ".marag" / "index.json").write_text("{}")  # rebuilt from the data: left out
    (run / "vectors.npy").write_bytes(b"\0" * 10)  # not a text file: left out
    (run / "big.jsonl").write_text("x" * 2_000)  # over --max-mb: left out
    for step in (20, 40):  # the newest checkpoint is kept whole, weights and optimizer state; the older left out
        ckpt = run / "adapters" / "m" / f"checkpoint-{step}"
        ckpt.mkdir(parents=True)
        (ckpt / "state.json").write_text("{}")
        (ckpt / "adapter_model.safetensors").write_bytes(b"w")
        (ckpt / "optimizer.pt").write_bytes(b"o")
    (run / "vectors.pt").write_bytes(b"x")  # a .pt outside a checkpoint: left out
    (run / "adapters" / "m" / "adapter.gguf").write_bytes(b"GGUF")  # the trained adapter: kept
    first = stash.save(run, "s1", max_mb=0.001).read_bytes()
    assert stash.save(run, "s1", max_mb=0.001).read_bytes() == first  # unchanged files: the same bytes
    stash.restore("s1", tmp_path / "back")
    got = sorted(str(p.relative_to(tmp_path / "back")) for p in (tmp_path / "back").rglob("*") if p.is_file())
    assert got == ["adapters/m/adapter.gguf", "adapters/m/checkpoint-40/adapter_model.safetensors",
                   "adapters/m/checkpoint-40/optimizer.pt", "adapters/m/checkpoint-40/state.json",
                   "plan.json", "sources/a/trajectories.jsonl"]  # fmt: skip
    assert (tmp_path / "back" / "sources" / "a" / "trajectories.jsonl").read_text() == '{"qid": "q1"}\n'
    stash.restore("s1", tmp_path / "back")  # again: the same files, nothing to do
    (tmp_path / "back" / "plan.json").write_text("changed")
    (tmp_path / "back" / "sources" / "a" / "trajectories.jsonl").unlink()
    with pytest.raises(SystemExit, match="differs from the stash"):
        stash.restore("s1", tmp_path / "back")
    assert not (tmp_path / "back" / "sources" / "a" / "trajectories.jsonl").exists()  # nothing half restored
    with pytest.raises(SystemExit, match="letters, digits"):
        stash.save(run, "../elsewhere", max_mb=1)
    with pytest.raises(SystemExit, match="no stash named 'nope'"):
        stash.restore("nope", tmp_path / "x")


def test_a_member_that_leaves_the_target_is_refused(tmp_path, monkeypatch):
    stash = load_benchmark("stash")
    monkeypatch.setattr(stash, "STASH", tmp_path)
    with tarfile.open(tmp_path / "evil.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("../outside.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(SystemExit, match="not a plain file inside the target"):
        stash.restore("evil", tmp_path / "target")
    assert not (tmp_path / "outside.txt").exists()
