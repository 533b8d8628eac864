"""`marag eval --executor ray` on a local Ray instance: the same records as the local
executor, written by the driver as workers finish, and resumable."""

from __future__ import annotations

import asyncio
import json

import pytest

from marag.eval.runner import EvalConfig, run_eval
from marag.index.store import IndexConfig
from marag.llm import LLMConfig

ray = pytest.importorskip("ray", reason="the Ray executor needs ray (pip install 'marag[ray]'; in marag[dev])")


@pytest.fixture(scope="module")
def local_ray():
    for attempt in range(3):  # on a busy machine Ray's first start can time out waiting for its own processes
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
            break
        except RuntimeError:
            ray.shutdown()
            if attempt == 2:
                raise
    yield
    ray.shutdown()


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
