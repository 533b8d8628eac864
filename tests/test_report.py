"""Reports: paired statistics over the questions every strategy answered, failures
counted as failures, and the settings printed beside the numbers."""

from __future__ import annotations

import json
import re

import pytest

from marag.eval.report import build_report, common_questions, metric_values
from marag.eval.rundir import ResultRecord
from marag.eval.stats import mean_ci, paired_diff_ci, questions_needed


def test_paired_bootstrap_on_hand_made_values():
    # every question improves by exactly 0.1: the paired interval has zero width, while
    # the two strategies' own intervals overlap almost entirely
    a, b = [0.1, 0.5, 0.9], [0.0, 0.4, 0.8]
    assert paired_diff_ci(a, b) == pytest.approx((0.1, 0.1, 0.1))
    _, lo_a, _ = mean_ci(a)
    _, _, hi_b = mean_ci(b)
    assert lo_a < hi_b
    # differences 1, 0, 0, 1: resampled means lie on {0, .25, .5, .75, 1} with
    # probabilities 1/16, 4/16, 6/16, 4/16, 1/16, so the 2.5% and 97.5% quantiles are 0 and 1
    assert paired_diff_ci([1, 0, 1, 1], [0, 0, 1, 0]) == pytest.approx((0.5, 0.0, 1.0))
    with pytest.raises(ValueError):
        paired_diff_ci([1.0], [1.0, 0.0])


def test_questions_needed_by_hand_and_against_the_bootstrap():
    # differences 1,0,1,1,0,-1,1,0,0,0: mean .3, sd .675 -> (1.96 * .675 / .3)^2 = 19.4 -> 20
    a, b = [1, 0, 1, 1, 0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    assert questions_needed(a, b) == 20
    assert paired_diff_ci(a, b)[1] < 0  # 10 questions: not significant
    assert paired_diff_ci(a * 3, b * 3)[1] > 0  # the same differences on 30 questions are significant
    assert questions_needed(a, a) is None  # no difference: no number of questions helps
    assert questions_needed([0.1, 0.5, 0.9], [0.0, 0.4, 0.8]) == 2  # every question differs alike
    assert questions_needed([0.3, 0.3, 0.0], [0.2, 0.1, 0.3]) is None  # +.1 +.2 -.3: 0 up to rounding
    with pytest.raises(ValueError):
        questions_needed([1.0], [1.0, 0.0])


def _run(tmp_path, name, rows, strategies):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "fingerprint": "x",
                "config": {"dataset": "toy", "strategies": strategies, "llm": {"backend": "scripted"}, "seed": 0},
                "strategy_settings": {s: {"k": 2} for s in strategies},
                "dataset": {"name": "toy", "pool": "oracle", "pool_note": "oracle pool: every document is gold",
                            "answer_style": "short"},
            }
        )
    )
    with (d / "results.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return d


def _row(strategy, qid, f1=None, error=None):
    return {"strategy": strategy, "qid": qid, "metrics": {} if error else {"f1": f1}, "error": error, "cost": {}}


def test_report_pairs_questions_counts_failures_and_prints_settings(tmp_path):
    rows = [
        _row("vanilla_rag", "q1", 0.5), _row("vanilla_rag", "q2", 0.0), _row("vanilla_rag", "q3", 1.0),
        _row("vanilla_rag", "q4", 1.0),  # only the baseline has q4: left out of every table
        _row("mrag", "q1", 1.0), _row("mrag", "q2", 0.5), _row("mrag", "q3", error="LLMError: boom"),
    ]  # fmt: skip
    run = _run(tmp_path, "run", rows, ["vanilla_rag", "mrag"])
    records = [ResultRecord.model_validate(r) for r in rows]
    groups = {"vanilla_rag": [r for r in records if r.strategy == "vanilla_rag"],
              "mrag": [r for r in records if r.strategy == "mrag"]}  # fmt: skip
    common, left = common_questions(groups)
    assert common == {"q1", "q2", "q3"} and left == {"vanilla_rag": 1, "mrag": 0}
    assert metric_values(groups["mrag"], "f1") == {"q1": 1.0, "q2": 0.5, "q3": 0.0}  # the failure is a 0
    # ... the worst value, which for a lower-is-better share is 1, not its best (0)
    for r in groups["mrag"][:2]:
        r.metrics["overlong"] = 0.0
    assert metric_values(groups["mrag"], "overlong") == {"q1": 0.0, "q2": 0.0, "q3": 1.0}

    text = build_report([run], plots=False).read_text()
    assert "3 questions answered by every strategy; left out: vanilla_rag=1" in text
    assert "Failed questions count as failures (0)." in text  # f1 only: no metric whose worst is not 0
    with_overlong = [{**r, "metrics": {**r["metrics"], "overlong": 0.0}} if not r["error"] else r for r in rows]
    text_overlong = build_report([_run(tmp_path, "run2", with_overlong, ["vanilla_rag", "mrag"])], plots=False).read_text()
    assert "Failed questions count as failures (0; 1 for `overlong`)." in text_overlong
    assert "oracle pool" in text
    # means over q1..q3: vanilla (0.5 + 0 + 1) / 3 = 0.5; mrag (1 + 0.5 + 0) / 3 = 0.5
    assert "| vanilla_rag | 3 | 0 | 0.500" in text and "| mrag | 3 | 1 | 0.500" in text
    # paired differences +0.5, +0.5, -1.0 -> mean 0.000
    assert "### Difference from vanilla_rag" in text and "| mrag | +0.000 [" in text and "n=3" in text
    assert "- mrag: k=2" in text
    assert "would need for its interval to exclude 0" in text and "| mrag | – |" in text  # mean 0: no size helps


def test_categories_in_their_own_order_recall_cut_and_zero_bars_plotted(tmp_path):
    from marag.eval.report import category_order

    assert category_order(["hard", "easy", "medium"]) == ["easy", "medium", "hard"]
    assert category_order(["10hop", "2hop", "3hop"]) == ["2hop", "3hop", "10hop"]
    rows = []
    for i, level in enumerate(["hard", "easy", "medium"] * 2):
        for s, f1, docs in (("vanilla_rag", 0.0, ["a", "b"]), ("mrag", 1.0, list("abcdef"))):
            r = _row(s, f"q{i}", f1)
            r["metrics"]["recall@5"] = 1.0
            r["retrieved_doc_ids"], r["metadata"] = docs, {"level": level}
            rows.append(r)
    run = _run(tmp_path, "run", rows, ["vanilla_rag", "mrag"])
    text = build_report([run]).read_text()
    quality = text.split("## Quality", 1)[1].split("###", 1)[0]
    # recall@5 is shown only for the strategy that returned at least 5 documents
    assert "| vanilla_rag | 6 | 0 | 0.000 [0.000, 0.000] | – |" in quality and "| mrag | 6 | 0 | 1.000 [1.000, 1.000] | 1.000" in quality
    by_level = text.split("### level", 1)[1]
    assert [line.split("|")[1].strip() for line in by_level.strip().splitlines()[2:5]] == ["easy", "medium", "hard"]
    assert "| easy | 0.000 (n=2) | 1.000 (n=2) |" in by_level
    png = run / "by_level.png"
    assert png.exists() and png.stat().st_size > 5000  # drawn: zero bars have an edge and a label, each bar its n


def test_settings_of_strategies_with_a_paper_flag_of_their_own(tmp_path):
    # a strategy with a paper mode names the additions that were on
    rows = [_row("kair", "q1", 1.0), _row("mrag_paper", "q1", 0.0)]
    run = _run(tmp_path, "run", rows, ["kair", "mrag_paper"])
    meta = json.loads((run / "config.json").read_text())
    meta["strategy_settings"] = {"kair": {"paper": False, "max_steps": 3}, "mrag_paper": {"paper": True}}
    (run / "config.json").write_text(json.dumps(meta))
    text = build_report([run], plots=False).read_text()
    assert "- kair — our additions on: answer_recheck, answer_type_check, support_check, close_answered, known_first, drop_claims, memory, gap_as_query, agent_angles, context, update_chars, answer_excerpts, answer_passages, named_passages, linked_docs, question_first: paper=false, max_steps=3" in text
    assert "- mrag_paper — paper's behaviour only: paper=true" in text


def test_the_terminal_table_has_whole_unique_headers():
    from marag.eval.report import summary_table

    rows = [
        {"strategy": "vanilla_rag", "n": 3, "errors": 0, "f1": 0.5, "retrieval_precision": 0.25, "llm_calls": 1.0,
         "prompt_tokens": 169.0, "prompt_tokens_reused": 12.0, "completion_tokens": 2.0, "seconds": 5.2},
        {"strategy": "a_much_longer_strategy_name", "n": 3, "errors": 1, "f1": None, "retrieval_precision": 1.0,
         "llm_calls": 19.5, "prompt_tokens": 4012.0, "prompt_tokens_reused": 1808.0, "completion_tokens": 1014.0, "seconds": 66.0},
    ]  # fmt: skip
    lines = summary_table(rows).splitlines()
    header = re.split(r"\s{2,}", lines[0].strip())
    assert header == ["strategy", "n", "errors", "f1", "retrieval_precision", "LLM calls", "prompt tok",
                      "of which reused", "completion tok", "seconds"]  # fmt: skip
    assert len(set(header)) == len(header)
    assert lines[2].startswith("a_much_longer_strategy_name ") and "–" in lines[2] and "4012.0" in lines[2]
    # every column lines up: each value ends where its header ends
    ends = [m.end() for m in re.finditer(r"\S+(?: \S+)*", lines[0])]
    for line in lines[1:]:
        assert [m.end() for m in re.finditer(r"\S+", line)][1:] == ends[1:]
