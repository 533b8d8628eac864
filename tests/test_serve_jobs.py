"""Evaluations over HTTP without a server: every reader of a job's events gets all of
them (readers never take events from each other), a reader after the end gets the
final state at once, and at most `max_running` jobs run."""

from __future__ import annotations

import asyncio

import pytest

from marag.errors import MaragError
from marag.eval.rundir import ResultRecord
from marag.serve.jobs import Jobs, eval_config


def test_readers_share_events_and_late_readers_get_the_final_state():
    async def scenario():
        jobs = Jobs(max_running=1)
        go = asyncio.Event()

        async def work(job):
            job.progress(ResultRecord(strategy="s", qid="q1"), 1, 2)
            await go.wait()
            job.progress(ResultRecord(strategy="s", qid="q2"), 2, 2)

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


def test_a_reader_gets_a_backlog_as_one_list_and_a_finished_job_keeps_no_events():
    """A stream sends each list as one write (benchmarks/soak.py: thousands of writes in
    one turn of the loop held every other request up), and the job lets go of its events
    when it ends: readers following keep theirs, later ones get the final state."""

    async def scenario():
        go = asyncio.Event()

        async def work(job):
            for i in range(500):
                job.progress(ResultRecord(strategy="s", qid=f"q{i}"), i + 1, 501)
            await go.wait()
            job.progress(ResultRecord(strategy="s", qid="q500"), 501, 501)

        job = Jobs(1).start("r", work)
        await asyncio.sleep(0)
        batches = job.batches()
        assert [e["qid"] for e in await anext(batches)] == [f"q{i}" for i in range(500)]  # the backlog, at once
        go.set()
        rest = [e async for batch in batches for e in batch]
        assert [e.get("qid") for e in rest] == ["q500", None] and rest[-1]["status"] == "done"
        assert job.events == [] and [e async for e in job.follow()] == [job.state()]

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


LEAKY_LLM = {"backend": "openai", "model": "m", "base_url": "http://attacker.example/v1", "api_key_env": "MARAG_TEST_TOKEN"}


def test_settings_that_name_a_model_file_or_url_are_refused_in_requests(data_dir):
    from marag.llm import LLMConfig

    llm = LLMConfig(backend="scripted")
    for strategy, options in [("kair", {"generator": LEAKY_LLM}), ("mrag", {"role_llms": {"answerer": {"backend": "llamacpp", "lora": "/etc/passwd"}}}),
                              ("ginger", {"k": 5, "cross_encoder": {"model": "/tmp/x.onnx", "tokenizer": "/tmp/t.json"}}),
                              ("kair_paper", {"generator": {"cache_dir": "/tmp/anywhere"}}),
                              ("auto", {"router": "/etc/passwd"}),
                              ("auto", {"agent_settings": {"generator": LEAKY_LLM}, "agent": "kair"})]:  # fmt: skip
        key = next(k for k in options if k != "k")
        with pytest.raises(MaragError, match=f"strategy {strategy!r}: {key!r} cannot be set in a request.*set when the server starts") as err:
            eval_config("hotpotqa_train100", [strategy], 1, {strategy: options}, None, llm, str(data_dir))
        assert key in err.value.hint and "--llm" in err.value.hint
    eval_config("hotpotqa_train100", ["kair"], 1, {"kair": {"k": 5}}, None, llm, str(data_dir))  # other settings still may


def test_every_setting_that_could_name_a_model_file_url_or_variable_is_operator_only():
    """A tripwire for new settings: one whose name or type says it may hold a model
    spec, path, URL, directory or environment variable name must be marked OPERATOR_ONLY
    (or, after checking that it cannot, listed here as harmless)."""
    import re
    import typing

    from marag.strategies import STRATEGIES
    from marag.strategies.base import operator_only_fields

    harmless = {"max_llm_calls", "cross_encoder_depth", "pointwise_llm_depth", "clusterer"}  # counts; a registry name
    suspicious = re.compile(r"(^|_)(llms?|model|path|file|dir|url|uri|env|endpoint|key|cache|lora|onnx|encoder|generator|clusterer)(_|$)")
    unmarked = set()
    for name in STRATEGIES.names():
        config = STRATEGIES.get(name).Config
        marked = operator_only_fields(config)
        for field, info in config.model_fields.items():
            free_form = "Any" in str(info.annotation) or typing.get_origin(info.annotation) is dict and "str, str" in str(info.annotation)
            if (suspicious.search(field) or free_form) and field not in marked and field not in harmless:
                unmarked.add(f"{name}.{field}")
    assert not unmarked, f"mark these OPERATOR_ONLY (or list them as harmless): {sorted(unmarked)}"
    assert {"generator"} <= operator_only_fields(STRATEGIES.get("kair").Config)
    assert {"role_llms"} <= operator_only_fields(STRATEGIES.get("mrag").Config)
    assert {"cross_encoder"} <= operator_only_fields(STRATEGIES.get("ginger").Config)
    assert {"router", "agent_settings"} <= operator_only_fields(STRATEGIES.get("auto").Config)


def test_many_strategies_make_a_short_valid_run_id(data_dir, tmp_path):
    from marag.llm import LLMConfig
    from marag.serve.store import RUN_ID, RunStore
    from marag.strategies import STRATEGIES

    llm = LLMConfig(backend="scripted")
    names = sorted(STRATEGIES.names(), key=len, reverse=True)[:10]  # the longest names, as many as a request may list
    run_id = eval_config("hotpotqa_train100", names, 1, {}, None, llm, str(data_dir)).default_run_id()
    assert RUN_ID.fullmatch(run_id) and len(run_id) < 120 and "-10-strategies-" in run_id, run_id
    RunStore(tmp_path).check_writable(run_id)
    other = eval_config("hotpotqa_train100", names[:2] + names[3:] + names[2:3], 1, {}, None, llm, str(data_dir)).default_run_id()
    assert other != run_id  # the same first two, in another order: another run
    short = eval_config("hotpotqa_train100", ["llm_only", "vanilla_rag"], 1, {}, None, llm, str(data_dir))
    assert short.default_run_id() == f"hotpotqa_train100-llm_only+vanilla_rag-{short.fingerprint()}"  # short ids as before
