"""`marag eval`: run, write as it goes, resume, report — on real HotpotQA questions."""

from __future__ import annotations

import asyncio
import json

import pytest

from marag.errors import MaragError, UnknownNameError
from marag.eval.datasets import DATASETS, load_dataset
from marag.eval.report import build_report
from marag.eval.rundir import read_results
from marag.eval.runner import EvalConfig, run_eval
from marag.index.store import IndexConfig
from marag.llm import ScriptedLLM
from marag.strategies.base import STRATEGIES


def gold_answer_llm(ds, calls: list[str] | None = None, fail_on: str | None = None):
    """Answers with the gold answer of whichever question is asked (so metrics are 1)."""
    by_q = {q.question: q.answers[0] for q in ds.questions}

    def fn(messages, output):
        text = messages[-1]["content"]
        q = text.split("Question: ")[-1].split("\n")[0]
        if calls is not None:
            calls.append(q)
        if fail_on and fail_on in q:
            raise RuntimeError("backend exploded")
        return {"answer": by_q[q]}

    return ScriptedLLM(fn=fn)


@pytest.fixture(scope="module")
def hotpot(data_dir):
    return load_dataset("hotpotqa_train100", data_dir)


def config(**kw) -> EvalConfig:
    base = dict(dataset="hotpotqa_train100", strategies=["llm_only", "vanilla_rag"], limit=4,
                index=IndexConfig(retrievers=["bm25"]), concurrency=2)
    return EvalConfig(**(base | kw))


def test_every_shared_dataset_is_registered_and_loads(data_dir):
    counts = {}
    for name in DATASETS.names():
        counts[name] = len(load_dataset(name, data_dir).questions)
    assert counts["hotpotqa_train100"] == 100 and counts["musique_train100"] == 100
    assert counts["datamorgana"] == 371 and counts["nq_open_oracle"] == 600
    assert counts["trec_rag24"] == 56 and counts["hoprag_examples"] == 30
    two = load_dataset("twowiki_examples", data_dir).questions  # the 2Wiki part alone
    assert counts["twowiki_examples"] == 10 and {q.metadata["source"] for q in two} == {"2wiki"}
    assert all(len(q.gold_doc_ids) == 2 for q in two if q.metadata["type"] == "comparison")


def test_questions_jsonl_path_is_a_dataset(repo):
    ds = load_dataset(str(repo / "samples" / "questions.jsonl"))
    assert len(ds.questions) == 6 and ds.questions[0].gold_doc_ids == ["computing/ada-lovelace.md"]


def test_unknown_dataset_lists_known():
    with pytest.raises(MaragError) as e:
        load_dataset("hotpot")
    assert "hotpotqa_train100" in str(e.value)


def test_run_writes_results_traces_and_report(hotpot, tmp_path):
    run_dir = tmp_path / "run"
    llm = gold_answer_llm(hotpot)
    asyncio.run(run_eval(config(), run_dir, dataset=hotpot, llm=llm, index_cache=tmp_path / "ix", progress=False))
    results = read_results(run_dir / "results.jsonl")
    assert len(results) == 8
    r = results[("vanilla_rag", hotpot.questions[0].id)]
    assert r.error is None and r.metrics["em"] == 1.0 and r.metrics["f1"] == 1.0
    assert len(r.retrieved_doc_ids) == 2 and "recall@2" in r.metrics
    assert r.metadata["type"] in {"bridge", "comparison"} and r.cost["llm_calls"] == 1
    lo = results[("llm_only", hotpot.questions[0].id)]
    assert "recall@2" not in lo.metrics and lo.metrics["em"] == 1.0  # no retrieval: no retrieval metrics
    traces = (run_dir / "traces.jsonl").read_text().splitlines()
    assert len(traces) == 8
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["versions"]["marag"] and cfg["config"]["strategies"] == ["llm_only", "vanilla_rag"]

    report = build_report([run_dir]).read_text()
    assert "## Quality" in report and "| vanilla_rag | 4 | 0 | 1.000 [1.000, 1.000]" in report
    assert "distractor pool" in report and "### Difference from vanilla_rag" in report
    assert "- vanilla_rag: max_llm_calls=80, max_tokens=60000, deadline_s=1800.0, answer_style=\"short\", answer_max_chars=null, answer_recheck=true, answer_type_check=true, k=2" in report
    assert "## Cost per question" in report and "### type" in report
    assert "| vanilla_rag | answerer |" in report
    assert (run_dir / "quality_cost.png").stat().st_size > 1000
    assert (run_dir / "by_type.png").exists()


def test_resume_answers_only_what_is_missing(hotpot, tmp_path):
    run_dir = tmp_path / "run"
    asyncio.run(run_eval(config(), run_dir, dataset=hotpot, llm=gold_answer_llm(hotpot),
                         index_cache=tmp_path / "ix", progress=False))
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    # as if killed: three results lost and the last line torn mid-write
    (run_dir / "results.jsonl").write_text("\n".join(lines[:5]) + "\n" + lines[5][:40])
    calls: list[str] = []
    asyncio.run(run_eval(config(), run_dir, dataset=hotpot, llm=gold_answer_llm(hotpot, calls),
                         index_cache=tmp_path / "ix", progress=False))
    assert len(calls) == 3
    assert len(read_results(run_dir / "results.jsonl")) == 8
    # a third run has nothing to do
    calls.clear()
    asyncio.run(run_eval(config(), run_dir, dataset=hotpot, llm=gold_answer_llm(hotpot, calls),
                         index_cache=tmp_path / "ix", progress=False))
    assert calls == []


def test_the_index_is_prepared_off_the_event_loop(hotpot, tmp_path, monkeypatch):
    """Building a dataset's index takes minutes: in `marag serve` an evaluation started
    over HTTP stopped every other request for as long (benchmarks/soak.py)."""
    import threading

    from marag.eval import runner

    threads = []
    real = runner.prepare_retrieval

    def prepare(*args, **kwargs):
        threads.append(threading.current_thread() is threading.main_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "prepare_retrieval", prepare)
    asyncio.run(run_eval(config(limit=1), tmp_path / "run", dataset=hotpot, llm=gold_answer_llm(hotpot),
                         index_cache=tmp_path / "ix", progress=False))  # fmt: skip
    assert threads == [False]


def test_a_failing_question_is_recorded_and_retried(hotpot, tmp_path):
    run_dir = tmp_path / "run"
    bad = hotpot.questions[1].question
    cfg = config(strategies=["llm_only"])
    asyncio.run(run_eval(cfg, run_dir, dataset=hotpot, llm=gold_answer_llm(hotpot, fail_on=bad), progress=False))
    results = read_results(run_dir / "results.jsonl")
    assert len(results) == 4
    failed = results[("llm_only", hotpot.questions[1].id)]
    assert "backend exploded" in failed.error
    assert sum(1 for r in results.values() if r.error is None) == 3
    calls: list[str] = []
    asyncio.run(run_eval(cfg, run_dir, dataset=hotpot, llm=gold_answer_llm(hotpot, calls), progress=False))
    assert calls == [bad]
    assert read_results(run_dir / "results.jsonl")[("llm_only", hotpot.questions[1].id)].error is None


def test_changed_config_does_not_mix_into_an_old_run(hotpot, tmp_path):
    run_dir = tmp_path / "run"
    asyncio.run(run_eval(config(strategies=["llm_only"]), run_dir, dataset=hotpot, llm=gold_answer_llm(hotpot),
                         progress=False))
    with pytest.raises(MaragError) as e:
        asyncio.run(run_eval(config(strategies=["llm_only"], strategy_configs={"llm_only": {"temperature": 0.3}}),
                             run_dir, dataset=hotpot, llm=gold_answer_llm(hotpot), progress=False))
    assert "different configuration" in str(e.value)


def test_fingerprint_covers_what_changes_answers_and_the_code(monkeypatch):
    from marag.eval import answering
    from marag.llm import LLMConfig

    base = config()
    fast = config(concurrency=8, limit=50, llm=LLMConfig(threads=4, n_parallel=2, verbosity=3, cache_dir="/tmp/c",
                                                          timeout_s=5))
    assert fast.fingerprint() == base.fingerprint()  # how it runs, and how many questions
    assert config(llm=LLMConfig(model_path="/m/other.gguf")).fingerprint() != base.fingerprint()
    assert config(seed=1).fingerprint() != base.fingerprint()
    before = base.fingerprint()
    monkeypatch.setattr(answering, "code_version", lambda: "0.1.0+othercode")
    assert base.fingerprint() != before  # other code, other run


def test_a_raised_limit_extends_the_run(hotpot, tmp_path):
    run_dir = tmp_path / "run"
    calls: list[str] = []
    asyncio.run(run_eval(config(strategies=["llm_only"], limit=2), run_dir, dataset=hotpot,
                         llm=gold_answer_llm(hotpot, calls), progress=False))
    assert len(calls) == 2
    calls.clear()
    asyncio.run(run_eval(config(strategies=["llm_only"], limit=4), run_dir, dataset=hotpot,
                         llm=gold_answer_llm(hotpot, calls), progress=False))
    assert calls == [q.question for q in hotpot.questions[2:4]]  # only the two new questions
    assert len(read_results(run_dir / "results.jsonl")) == 4
    assert json.loads((run_dir / "config.json").read_text())["config"]["limit"] == 4


def test_unknown_metric_fails_before_any_work(hotpot, tmp_path):
    with pytest.raises(UnknownNameError):
        asyncio.run(run_eval(config(metrics=["f2"]), tmp_path / "r", dataset=hotpot, llm=ScriptedLLM(), progress=False))
    assert not (tmp_path / "r").exists()


def test_judged_metrics_repeat_with_mean_and_std(hotpot, tmp_path):
    run_dir = tmp_path / "run"
    verdicts = iter([True, False, True, True] * 10)

    def judge_fn(messages, output):
        return {"justification": "compared with the gold answer", "correct": next(verdicts)}

    cfg = config(strategies=["llm_only"], limit=2, judge_metrics=["judge_correct"], judge_repeats=2)
    asyncio.run(run_eval(cfg, run_dir, dataset=hotpot, llm=gold_answer_llm(hotpot), judge=ScriptedLLM(fn=judge_fn),
                         progress=False))
    rows = sorted(read_results(run_dir / "results.jsonl").values(), key=lambda r: r.qid)
    assert sorted(r.metrics["judge_correct"] for r in rows) == [0.5, 1.0]
    assert sorted(r.metrics_std["judge_correct"] for r in rows) == [0.0, 0.5]
    assert "Judge spread" in build_report([run_dir]).read_text()


def test_report_compares_runs(hotpot, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    asyncio.run(run_eval(config(strategies=["llm_only"]), a, dataset=hotpot, llm=gold_answer_llm(hotpot), progress=False))
    asyncio.run(run_eval(config(strategies=["llm_only"], limit=2), b, dataset=hotpot, llm=ScriptedLLM(fn=lambda m, o: {"answer": "no idea"}), progress=False))
    text = build_report([a, b], tmp_path).read_text()
    # only the questions both runs answered are compared, and the report says so
    assert "| a:llm_only | 2 | 0 | 1.000" in text and "| b:llm_only | 2 | 0 | 0.000" in text
    assert "2 questions answered by every strategy; left out: a:llm_only=2" in text


def test_judge_defaults_and_the_self_grading_warning(hotpot, tmp_path):
    from marag.errors import MaragWarning
    from marag.llm import LLMConfig

    assert config(judge_metrics=["judge_correct"]).repeats == 1  # no separate judge: no repeats
    paper = config(judge_metrics=["judge_correct"], judge=LLMConfig(backend="scripted"))
    assert (paper.repeats, paper.judge_temp) == (5, 0.5)  # the mRAG paper's judge settings
    assert (config(judge_metrics=["judge_correct"], judge_repeats=1, judge=LLMConfig()).judge_temp) == 0.0

    run_dir = tmp_path / "run"
    verdicts = ScriptedLLM(fn=lambda m, o: {"answer": "x"} if o.__name__ == "AnswerOutput" else "not json")
    with pytest.warns(MaragWarning, match="grades itself"):
        asyncio.run(run_eval(config(strategies=["llm_only"], limit=2, judge_metrics=["judge_correct"]), run_dir,
                             dataset=hotpot, llm=verdicts, progress=False))
    meta = json.loads((run_dir / "config.json").read_text())
    assert meta["judge_setup"] == {"self_judged": True, "repeats": 1, "temperature": 0.0, "batch": None}
    rows = list(read_results(run_dir / "results.jsonl").values())
    # the judge's output was never usable: every verdict came from the lexical stand-in
    assert all(r.judge_fallbacks["judge_correct"] == {"decisions": 1, "fallbacks": 1} for r in rows)
    report = build_report([run_dir], plots=False).read_text()
    assert "it grades itself" in report and "2/2 (100%)" in report


def test_the_deadline_grows_with_the_questions_in_flight(hotpot):
    """Each question in flight gets a share of the machine, so its wall-clock deadline
    is the strategy's times the concurrency; a deadline the user sets is kept as given,
    and `--deterministic` has none."""
    from marag.eval.answering import strategy_settings

    def deadline(**kw):
        return strategy_settings(config(strategies=["vanilla_rag", "ginger"], **kw), hotpot)

    assert {s: c["deadline_s"] for s, c in deadline(concurrency=4).items()} == {"vanilla_rag": 3600.0, "ginger": 3600.0}
    assert deadline(concurrency=1)["vanilla_rag"]["deadline_s"] == 900.0
    assert deadline(concurrency=4, strategy_configs={"vanilla_rag": {"deadline_s": 60}})["vanilla_rag"]["deadline_s"] == 60
    assert deadline(concurrency=4, deterministic=True)["ginger"]["deadline_s"] is None
    assert deadline(concurrency=0)["vanilla_rag"]["deadline_s"] == 900.0  # run one at a time, as the runner does


def test_a_variants_own_deadline_is_the_one_scaled(hotpot, monkeypatch):
    from marag.eval.answering import strategy_settings

    k5 = STRATEGIES.get("vanilla_rag_k5")
    monkeypatch.setattr(k5, "defaults", {**k5.defaults, "deadline_s": 100.0})
    settings = strategy_settings(config(strategies=["vanilla_rag_k5"], concurrency=3), hotpot)
    assert settings["vanilla_rag_k5"]["deadline_s"] == 300.0


def test_each_dataset_sets_its_answer_style(data_dir, tmp_path):
    dm = load_dataset("datamorgana_multi", data_dir)
    assert dm.answer_style == "long" and dm.pool == "oracle"
    seen: list[int] = []

    def fn(messages, output):
        seen.append(output.model_json_schema()["properties"]["answer"]["maxLength"])
        return {"answer": "a long answer"}

    cfg = EvalConfig(dataset="datamorgana_multi", strategies=["llm_only"], limit=1)
    asyncio.run(run_eval(cfg, tmp_path / "a", dataset=dm, llm=ScriptedLLM(fn=fn), progress=False))
    assert seen == [1200]  # the long style's limit
    meta = json.loads((tmp_path / "a" / "config.json").read_text())
    assert meta["strategy_settings"]["llm_only"]["answer_style"] == "long"
    assert meta["dataset"]["pool"] == "oracle" and "oracle pool" in meta["dataset"]["pool_note"]
    # the user's choice wins over the dataset's
    cfg = EvalConfig(dataset="datamorgana_multi", strategies=["llm_only"], limit=1,
                     strategy_configs={"llm_only": {"answer_style": "short"}})
    asyncio.run(run_eval(cfg, tmp_path / "b", dataset=dm, llm=ScriptedLLM(fn=fn), progress=False))
    assert seen == [1200, 200]


def test_wiki_mix_hides_each_benchmarks_gold_among_all_pools(data_dir):
    ds = load_dataset("wiki_mix", data_dir)
    sources = {d.metadata["source"] for d in ds.documents}
    assert sources == {"hotpotqa_train100", "musique_train100", "nq_open_oracle"}
    assert 3400 <= len(ds.documents) <= 3600 and ds.pool == "mixed"
    # questions interleave the three benchmarks, so a --limit takes from each
    assert [q.metadata["source"] for q in ds.questions[:3]] == ["hotpotqa_train100", "musique_train100", "nq_open_oracle"]
    ids = {d.id for d in ds.documents}
    assert all(g in ids for q in ds.questions for g in q.gold_doc_ids)
