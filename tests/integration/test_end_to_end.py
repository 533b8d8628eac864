"""The README's main job with the real default model: index the bundled sample corpus
and answer `make demo`'s questions (and the README's first) through the CLI; and
evaluate both baselines on real NQ data with the smallest model (wiring)."""

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


# `make demo`'s four questions, then the README's first `marag ask`
DEMO = {
    "Who is often called the first computer programmer?": ["ada lovelace"],
    "Which two elements did Marie Curie discover in 1898?": ["polonium", "radium"],
    "Who made the first confirmed ascent of Mount Everest?": ["hillary", "tenzing norgay"],
    "What is the name of the Linux mascot?": ["tux"],
}
README_QUESTION = "Who created Python?"


def test_the_default_model_answers_the_demo(repo, tmp_path, monkeypatch, capsys, default_model):
    idx = tmp_path / "idx"
    code, out, err = run(monkeypatch, capsys, "index", str(repo / "samples/corpus"), "--out", str(idx),
                         "--collection-field", "folder", "--quiet")  # fmt: skip
    assert code == 0, err
    trace = tmp_path / "trace.jsonl"
    code, out, err = run(monkeypatch, capsys, "ask", *DEMO, README_QUESTION, "--index", str(idx), "--json",
                         "--trace-out", str(trace))  # fmt: skip
    assert code == 0, err
    answers = [json.loads(line) for line in out.strip().splitlines()]
    assert len(answers) == len(DEMO) + 1
    right = [all(w in a["answer"].lower() for w in words) for a, words in zip(answers, DEMO.values())]
    print("\n" + "\n".join(f"{'ok' if r else 'WRONG'}: {a['question']} -> {a['answer']}" for a, r in zip(answers, right)))
    assert sum(right) >= 3, [a["answer"] for a in answers]
    assert "guido van rossum" in answers[-1]["answer"].lower()
    for a in answers:
        assert len(a["sources"]) == 2 and a["usage"]["llm_calls"] == 1
        assert a["usage"]["prompt_tokens"] > 0 and 0 < a["usage"]["completion_tokens"] <= 64
    traces = [json.loads(x) for x in trace.read_text().splitlines()]
    calls = [t["steps"][-1]["llm_calls"][0] for t in traces]
    assert all(c["model"] == default_model.name for c in calls)
    assert all(c["response"].startswith('{"answer": "') for c in calls)  # the default model's "spaced" JSON layout


def test_eval_both_baselines_on_nq(data_dir, tmp_path, monkeypatch, capsys, smoke_model):
    code, out, err = run(monkeypatch, capsys, "eval", "nq_open_oracle", "--limit", "4", "--retrievers", "bm25", "--llm", "smollm2-135m",
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
