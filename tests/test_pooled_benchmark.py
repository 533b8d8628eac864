"""benchmarks/pooled.py pairs questions by dataset and id: runs of one strategy by
different models compare when labelled (`LABEL=RUN`), per set and pooled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench import load_benchmark

from marag.eval.rundir import ResultRecord


def _run(path: Path, dataset: str, f1s: dict[str, float]) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"config": {"strategies": ["unirag"], "dataset": dataset, "skip": 40, "limit": len(f1s)}}))
    rows = [ResultRecord(strategy="unirag", qid=q, prediction="x", answers=["x"], metrics={"f1": v},
                         cost={"prompt_tokens_evaluated": 600.0, "completion_tokens": 26.0}).line() for q, v in f1s.items()]  # fmt: skip
    (path / "results.jsonl").write_text("\n".join(rows) + "\n")
    return path


def test_labelled_runs_of_two_models_pair_by_dataset_and_question(tmp_path, capsys, monkeypatch):
    pooled = load_benchmark("pooled")
    args = [f"base={_run(tmp_path / 'b-hp', 'hotpot', {'q1': 0.0, 'q2': 1.0})}",
            f"base={_run(tmp_path / 'b-2w', 'wiki', {'q1': 0.0})}",
            f"tuned={_run(tmp_path / 't-hp', 'hotpot', {'q1': 1.0, 'q2': 1.0})}",
            f"tuned={_run(tmp_path / 't-2w', 'wiki', {'q1': 1.0})}"]  # fmt: skip
    runs, labels = pooled.labelled(args)
    groups = pooled.pooled(runs, labels)
    assert sorted(groups) == ["base:unirag", "tuned:unirag"]
    assert sorted(groups["tuned:unirag"]) == [("hotpot", "q1"), ("hotpot", "q2"), ("wiki", "q1")]
    monkeypatch.setattr("sys.argv", ["pooled.py", *args, "--baselines", "base:unirag"])
    pooled.main()
    out = capsys.readouterr().out
    assert "### hotpot, questions 41-42: n=2" in out and "### wiki, questions 41-41: n=1" in out and "### pooled, n=3" in out
    tuned_pooled = [line for line in out.splitlines() if line.startswith("| tuned:unirag | 3 |")]
    monkeypatch.setattr("sys.argv", ["pooled.py", *args, "--baselines", "unirag"])  # labelled: no bare "unirag"
    with pytest.raises(SystemExit, match="--baselines: unirag not in every run"):
        pooled.main()
    assert tuned_pooled and "+0.667" in tuned_pooled[0] and "2/0" in tuned_pooled[0]
    assert tuned_pooled[0].endswith("| 12.0 |")  # machine seconds: 600 evaluated / 60 + 26 generated / 13


def test_one_strategy_answering_a_question_twice_is_refused(tmp_path):
    pooled = load_benchmark("pooled")
    runs, labels = pooled.labelled([str(_run(tmp_path / "a", "hotpot", {"q1": 1.0})), str(_run(tmp_path / "b", "hotpot", {"q1": 0.0}))])
    with pytest.raises(SystemExit, match="answers hotpot/q1 in two runs"):
        pooled.pooled(runs, labels)
