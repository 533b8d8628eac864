"""`marag eval --executor ray` on a local Ray instance: the same records as the local
executor, written by the driver as workers finish, and resumable; a slow first start is
retried (the real exception Ray raises), and a start that keeps failing is one line."""

from __future__ import annotations

import asyncio
import json

import pytest

from marag.eval.runner import EvalConfig, run_eval
from marag.index.store import IndexConfig
from marag.llm import LLMConfig

ray = pytest.importorskip("ray", reason="the Ray executor needs ray (pip install 'marag[ray]'; in marag[dev])")
# local_ray (conftest): started with marag.eval.distributed.start_ray, as the executor does


def records(run_dir) -> dict[tuple[str, str], dict]:
    out = {}
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        out[(r["strategy"], r["qid"])] = r
    return out


def test_ray_gives_the_local_results_and_resumes(local_ray, data_dir, tmp_path):
    cfg = EvalConfig(dataset="hotpotqa_train100", strategies=["llm_only", "vanilla_rag"], limit=2, concurrency=2,
                     llm=LLMConfig(backend="scripted"), index=IndexConfig(retrievers=["bm25"]))  # fmt: skip
    cache = tmp_path / "cache"
    asyncio.run(run_eval(cfg, tmp_path / "local", data_dir=data_dir, index_cache=cache, progress=False))
    seen = []
    asyncio.run(run_eval(cfg, tmp_path / "ray", data_dir=data_dir, index_cache=cache, progress=False, executor="ray",
                         on_result=lambda r, done, total: seen.append((done, total))))  # fmt: skip
    local, remote = records(tmp_path / "local"), records(tmp_path / "ray")
    assert set(local) == set(remote) and len(remote) == 4 and seen[-1] == (4, 4)
    for key in local:
        assert local[key]["prediction"] == remote[key]["prediction"] and local[key]["metrics"] == remote[key]["metrics"]
        assert remote[key]["error"] is None
    traces = [json.loads(line) for line in (tmp_path / "ray" / "traces.jsonl").read_text().splitlines()]
    assert {t["id"] for t in traces} == {r["trace_id"] for r in remote.values()}
    # a larger limit extends the run: only the new questions are sent to the workers
    more = cfg.model_copy(update={"limit": 3})
    asyncio.run(run_eval(more, tmp_path / "ray", data_dir=data_dir, index_cache=cache, progress=False, executor="ray",
                         on_result=lambda r, done, total: seen.append((done, total))))  # fmt: skip
    assert seen[-1] == (2, 2) and len(records(tmp_path / "ray")) == 6


TIMED_OUT = "The current node timed out during startup. This could happen because some of the raylet failed to startup."


def test_a_slow_first_start_is_cleaned_up_and_retried(monkeypatch):
    """Ray's startup timeout is a plain Exception, not a RuntimeError: it is caught, the
    processes the failed start spawned are stopped, and the start is tried again."""
    import subprocess

    from marag.errors import MaragWarning
    from marag.eval import distributed

    calls, spawned = [], []

    def slow_then_fine(**options):
        calls.append(options)
        if len(calls) == 1:
            spawned.append(subprocess.Popen(["sleep", "300"]))  # what a half-started node leaves running
            raise Exception(TIMED_OUT)

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", slow_then_fine)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    with pytest.warns(MaragWarning, match="Ray did not start \\(attempt 1 of 3: Exception: The current node timed out"):
        distributed.start_ray(num_cpus=2, pauses_s=(0.0,))
    assert len(calls) == 2 and calls[1]["num_cpus"] == 2
    assert spawned[0].poll() is not None  # stopped, not left behind


def test_ray_that_cannot_start_is_one_line_with_what_to_do(monkeypatch, marag, data_dir, tmp_path):
    from marag.eval import distributed

    def never(**options):
        raise Exception(TIMED_OUT)

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", never)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(distributed, "START_PAUSES_S", (0.0,))
    args = ["eval", "hotpotqa_train100", "--strategies", "llm_only", "--llm", "scripted", "--limit", "1", "-q",
            "--runs", str(tmp_path / "runs"), "--data-dir", str(data_dir), "--executor", "ray"]  # fmt: skip
    code, _, err = marag(*args)
    lines = [line for line in err.splitlines() if not line.startswith("warning:")]
    assert code == 2 and "Traceback" not in err
    assert lines[0] == "error: could not start a local Ray instance after 3 attempts (Exception: " + TIMED_OUT + ")"
    assert lines[1].startswith("  hint: ") and "--executor local" in lines[1] and "ray start --head" in lines[1] and len(lines) == 2
    # an explicit address where nothing listens fails at once (Ray itself would retry for minutes)
    from conftest import free_port

    code, _, err = marag(*args, "--ray-address", f"127.0.0.1:{free_port()}")
    assert code == 2 and "error: no Ray cluster answers at 127.0.0.1:" in err and "--executor local" in err
