"""benchmarks/run_summary.py keeps one row per (strategy, question) of a run and pairs
saved summaries with run directories: checked on a hand-made two-question run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench import load_benchmark


def _mod():
    return load_benchmark("run_summary")


def _run(path: Path, answers: dict[tuple[str, str], tuple[str, float]]) -> Path:
    path.mkdir()
    lines = [
        json.dumps({"strategy": s, "qid": q, "prediction": f"{a}\n(tab\there)", "metrics": {"em": f1 == 1.0, "f1": f1},
                    "cost": {"llm_calls": 3.0, "prompt_tokens_evaluated": 120.0}})  # fmt: skip
        for (s, q), (a, f1) in answers.items()
    ]
    (path / "results.jsonl").write_text("\n".join(lines) + "\n")
    return path


def test_save_keeps_one_flat_row_per_answer_and_pair_reads_both_forms(tmp_path, capsys):
    rs = _mod()
    a = _run(tmp_path / "a", {("x", "q1"): ("Paris", 1.0), ("x", "q2"): ("Lyon", 0.0), ("k5", "q1"): ("Rome", 0.0)})
    b = _run(tmp_path / "b", {("x", "q1"): ("Paris", 1.0), ("x", "q2"): ("Nice", 0.5)})
    saved = rs.save(a, tmp_path / "saved")
    rows = rs.rows_of(saved)
    assert [(r["strategy"], r["qid"]) for r in rows] == [("k5", "q1"), ("x", "q1"), ("x", "q2")]
    assert rows[1]["prediction"] == "Paris (tab here)"  # one line, no tab: the TSV stays a table
    assert float(rows[1]["prompt_tokens_evaluated"]) == 120.0
    rs.pair(saved, b, "x", None)
    out = capsys.readouterr().out
    assert out.startswith("n=2: A 0.500, B 0.750, A - B -0.250")
    assert "(0 better, 1 worse)" in out and "q2: 0.00 'Lyon (tab here)' vs 0.50 'Nice (tab here)'" in out
    with (a / "results.jsonl").open("a") as f:
        f.write(json.dumps({"strategy": "x", "qid": "q3", "prediction": "", "metrics": {}, "error": "boom"}) + "\n")
    rs.pair(a, b, "x", None)  # the errored q3 has no score: still the 2 questions both scored
    assert capsys.readouterr().out.startswith("n=2: A 0.500")
    rs.pair(saved, saved, "x", "k5")  # strategies of one run against each other
    assert capsys.readouterr().out.startswith("n=1: A 1.000, B 0.000")
