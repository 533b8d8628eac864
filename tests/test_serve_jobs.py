"""Evaluations over HTTP without a server: every reader of a job's events gets all of
them (readers never take events from each other), a reader after the end gets the
final state at once, and at most `max_running` jobs run."""

from __future__ import annotations

import asyncio

import pytest

from marag.errors import MaragError
from marag.serve.jobs import Jobs, eval_config


def test_readers_share_events_and_late_readers_get_the_final_state():
    async def scenario():
        jobs = Jobs(max_running=1)
        go = asyncio.Event()

        async def work(job):
            job.progress({"strategy": "s", "qid": "q1"}, 1, 2)
            await go.wait()
            job.progress({"strategy": "s", "qid": "q2"}, 2, 2)

        job = jobs.start("run-a", work)
        assert jobs.start("run-b", work) is None  # one at a time here
        assert jobs.start("run-a", work) is job  # the same run: the same job
        await asyncio.sleep(0)

        async def read():
            return [e async for e in job.follow()]

        readers = [asyncio.create_task(read()) for _ in range(2)]
        await asyncio.sleep(0)
        go.set()
        first, second = await asyncio.wait_for(asyncio.gather(*readers), 10)
        assert first == second and [e.get("qid") for e in first] == ["q1", "q2", None]
        assert first[-1] == {"status": "done", "done": 2, "total": 2, "error": None}
        assert await asyncio.wait_for(read(), 10) == [first[-1]]  # after the end: at once
        assert jobs.start("run-b", work) is not None  # the first one finished

    asyncio.run(scenario())


def test_a_failed_job_reports_why():
    async def scenario():
        async def work(job):
            raise MaragError("no model")

        job = Jobs(2).start("r", work)
        events = [e async for e in job.follow()]
        assert events == [{"status": "failed", "done": 0, "total": 0, "error": "MaragError: no model"}]

    asyncio.run(scenario())


def test_an_evaluation_is_checked_before_it_starts(data_dir):
    from marag.llm import LLMConfig

    llm = LLMConfig(backend="scripted")
    cfg = eval_config("hotpotqa_train100", ["llm_only"], 2, {}, ["f1", "judge_correct"], llm, str(data_dir))
    assert cfg.metrics == ["f1"] and cfg.judge_metrics == ["judge_correct"]  # judged metrics as such
    bad = [
        (("nope", ["llm_only"], 1, {}, None), "nope"),
        (("hotpotqa_train100", ["llm_only", "llm_only"], 1, {}, None), "twice"),
        (("hotpotqa_train100", ["llm_only"], 1, {"mrag": {}}, None), "not among the strategies"),
        (("hotpotqa_train100", ["llm_only"], 1, {}, ["f1", "nope"]), "nope"),
        (("hotpotqa_train100", ["vanilla_rag"], 1, {"vanilla_rag": {"k": "x"}}, None), "k"),
    ]
    for args, words in bad:
        with pytest.raises(MaragError, match=words):
            eval_config(*args, llm, str(data_dir))
    with pytest.raises(MaragError, match="no benchmark data"):
        eval_config("hotpotqa_train100", ["llm_only"], 1, {}, None, llm, None)
