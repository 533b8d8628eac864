"""The README's main job with the real local model: index the bundled sample corpus,
answer with vanilla_rag through the CLI, and evaluate both baselines on real NQ data."""

from __future__ import annotations

import json
import sys

import pytest

from marag import cli

pytestmark = pytest.mark.integration


def run(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["marag", *args])
    try:
        cli.main()
        code = 0
    except SystemExit as e:
        code = e.code or 0
    out, err = capsys.readouterr()
    return code, out, err


def test_index_and_ask_sample_corpus(repo, tmp_path, monkeypatch, capsys):
    idx = tmp_path / "idx"
    code, out, err = run(monkeypatch, capsys, "index", str(repo / "samples/corpus"), "--out", str(idx), "--quiet")
    assert code == 0, err
    questions = [json.loads(x) for x in (repo / "samples/questions.jsonl").read_text().splitlines()][:3]
    trace = tmp_path / "trace.jsonl"
    code, out, err = run(monkeypatch, capsys, "ask", *[q["question"] for q in questions], "--index", str(idx),
                         "--json", "--trace-out", str(trace))
    assert code == 0, err
    answers = [json.loads(line) for line in out.strip().splitlines()]
    assert len(answers) == 3
    for a, q in zip(answers, questions):
        assert a["answer"].strip()
        assert len(a["sources"]) == 2
        # hybrid retrieval puts the gold document first for these sample questions
        assert a["sources"][0]["doc_id"] == q["gold_doc_ids"][0]
        assert a["usage"]["prompt_tokens"] > 0 and a["usage"]["completion_tokens"] > 0
    traces = [json.loads(x) for x in trace.read_text().splitlines()]
    assert all(t["steps"][-1]["llm_calls"][0]["model"].endswith(".gguf") for t in traces)


def test_eval_both_baselines_on_nq(data_dir, tmp_path, monkeypatch, capsys):
    code, out, err = run(monkeypatch, capsys, "eval", "nq_open_oracle", "--limit", "4", "--retrievers", "bm25",
                         "--runs", str(tmp_path / "runs"), "--run-id", "nq", "--quiet", "--data-dir", str(data_dir))
    assert code == 0, err
    run_dir = tmp_path / "runs" / "nq"
    rows = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(r["error"] is None for r in rows)
    assert all("f1" in r["metrics"] for r in rows)
    assert all("recall@2" in r["metrics"] for r in rows if r["strategy"] == "vanilla_rag")
    report = (run_dir / "report.md").read_text()
    assert "| llm_only |" in report and "| vanilla_rag |" in report
    assert list(run_dir.glob("*.png"))
