"""`marag eval`: run, write as it goes, resume, report — on real HotpotQA questions."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from marag.errors import MaragError, UnknownNameError
from marag.eval.datasets import DATASETS, load_dataset
from marag.eval.report import build_report
from marag.eval.runner import EvalConfig, read_results, run_eval
from marag.index.store import IndexConfig
from marag.llm import ScriptedLLM


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
    assert r["error"] is None and r["metrics"]["em"] == 1.0 and r["metrics"]["f1"] == 1.0
    assert len(r["retrieved_doc_ids"]) == 2 and "recall@2" in r["metrics"]
    assert r["metadata"]["type"] in {"bridge", "comparison"} and r["cost"]["llm_calls"] == 1
    lo = results[("llm_only", hotpot.questions[0].id)]
    assert "recall@2" not in lo["metrics"] and lo["metrics"]["em"] == 1.0  # no retrieval: no retrieval metrics
    traces = (run_dir / "traces.jsonl").read_text().splitlines()
    assert len(traces) == 8
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["versions"]["marag"] and cfg["config"]["strategies"] == ["llm_only", "vanilla_rag"]

    report = build_report([run_dir]).read_text()
    assert "## Quality" in report and "| vanilla_rag | 1.000 [1.000, 1.000]" in report
    assert "## Cost per question" in report and "### type" in report
    assert "| vanilla_rag | answerer |" in report
    assert (run_dir / "accuracy_vs_tokens.png").stat().st_size > 1000
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


def test_a_failing_question_is_recorded_and_retried(hotpot, tmp_path):
    run_dir = tmp_path / "run"
    bad = hotpot.questions[1].question
    cfg = config(strategies=["llm_only"])
    asyncio.run(run_eval(cfg, run_dir, dataset=hotpot, llm=gold_answer_llm(hotpot, fail_on=bad), progress=False))
    results = read_results(run_dir / "results.jsonl")
    assert len(results) == 4
    failed = results[("llm_only", hotpot.questions[1].id)]
    assert "backend exploded" in failed["error"]
    assert sum(1 for r in results.values() if r["error"] is None) == 3
    calls: list[str] = []
    asyncio.run(run_eval(cfg, run_dir, dataset=hotpot, llm=gold_answer_llm(hotpot, calls), progress=False))
    assert calls == [bad]
    assert read_results(run_dir / "results.jsonl")[("llm_only", hotpot.questions[1].id)]["error"] is None


def test_changed_config_does_not_mix_into_an_old_run(hotpot, tmp_path):
    run_dir = tmp_path / "run"
    asyncio.run(run_eval(config(strategies=["llm_only"]), run_dir, dataset=hotpot, llm=gold_answer_llm(hotpot),
                         progress=False))
    with pytest.raises(MaragError) as e:
        asyncio.run(run_eval(config(strategies=["llm_only"], limit=5), run_dir, dataset=hotpot,
                             llm=gold_answer_llm(hotpot), progress=False))
    assert "different configuration" in str(e.value)


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
    rows = sorted(read_results(run_dir / "results.jsonl").values(), key=lambda r: r["qid"])
    assert sorted(r["metrics"]["judge_correct"] for r in rows) == [0.5, 1.0]
    assert sorted(r["metrics_std"]["judge_correct"] for r in rows) == [0.0, 0.5]
    assert "Judge spread" in build_report([run_dir]).read_text()


def test_report_compares_runs(hotpot, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    asyncio.run(run_eval(config(strategies=["llm_only"]), a, dataset=hotpot, llm=gold_answer_llm(hotpot), progress=False))
    asyncio.run(run_eval(config(strategies=["llm_only"], limit=2), b, dataset=hotpot, llm=ScriptedLLM(fn=lambda m, o: {"answer": "no idea"}), progress=False))
    text = build_report([a, b], tmp_path).read_text()
    assert "| a:llm_only | 1.000" in text and "| b:llm_only | 0.000" in text
