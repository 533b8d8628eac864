"""A run directory's results file (`marag.eval.rundir`): records written and read back
unchanged, the lines `answer_one` writes, old lines with fields this version does not
know, a torn last line repaired before the next append, and lines that are not records."""

from __future__ import annotations

import asyncio
import json

import pytest

from marag.corpus.models import Question
from marag.eval.answering import EvalConfig, answer_one
from marag.eval.rundir import (
    RESULTS,
    ResultRecord,
    append_result,
    drop_torn_tail,
    parse_result,
    read_results,
    scan_results,
)
from marag.llm import ScriptedLLM
from marag.strategies import make_strategy

# a record as `answer_one` writes an answered question
ANSWERED = {
    "strategy": "vanilla_rag", "qid": "q1", "question": "Where did the author of Salt Winter grow up?",
    "prediction": "Brekke", "cause": "correct", "retrieved_doc_ids": ["salt-winter", "holt"], "source_doc_ids": ["holt"],
    "metrics": {"em": 1.0, "f1": 1.0, "judge_correct": 0.8}, "metrics_std": {"judge_correct": 0.4},
    "judge_details": {"judge_correct": {"verdict": "correct"}},
    "judge_fallbacks": {"judge_correct": {"decisions": 5, "fallbacks": 1}},
    "cost": {"llm_calls": 3.0, "prompt_tokens": 812.0, "completion_tokens": 20.0, "stopped_by_budget": 0.0, "seconds": 1.5},
    "trace_id": "0123456789ab", "error": None, "answers": ["Brekke"], "gold_doc_ids": ["salt-winter", "holt"],
    "metadata": {"type": "bridge", "level": "hard"},
}  # fmt: skip
# and a question that raised: no prediction, documents, metrics or trace
FAILED = {
    "strategy": "mrag", "qid": "q2", "question": "?", "error": "LLMError: the server went away", "cause": "error",
    "cost": {"seconds": 0.25}, "answers": ["Oslo"], "gold_doc_ids": [], "metadata": {},
}  # fmt: skip


def test_a_record_round_trips_through_the_file(tmp_path):
    path = tmp_path / RESULTS
    for data in (ANSWERED, FAILED):
        append_result(path, ResultRecord.model_validate(data))
    lines = path.read_text(encoding="utf-8").splitlines()
    # on disk: the same JSON objects, with the same keys (a failed record gets no defaults)
    assert [json.loads(line) for line in lines] == [ANSWERED, FAILED]
    results = read_results(path)
    assert list(results) == [("vanilla_rag", "q1"), ("mrag", "q2")]
    r = results[("vanilla_rag", "q1")]
    assert r == ResultRecord.model_validate(ANSWERED) and r.key == ("vanilla_rag", "q1")
    assert r.metrics["f1"] == 1.0 and r.judge_fallbacks["judge_correct"]["fallbacks"] == 1 and r.cost["seconds"] == 1.5
    failed = results[("mrag", "q2")]
    assert failed.prediction is None and failed.metrics == {} and failed.trace_id is None and failed.error.startswith("LLMError")
    # written again, a record read from the file is the same line
    assert [results[k].line() for k in results] == lines


def test_the_latest_line_of_a_question_is_its_result(tmp_path):
    path = tmp_path / RESULTS
    append_result(path, ResultRecord.model_validate({**ANSWERED, "error": "LLMError: boom", "prediction": None}))
    append_result(path, ResultRecord.model_validate(ANSWERED))  # retried on resume
    assert len(path.read_text().splitlines()) == 2
    assert [r.error for r in read_results(path).values()] == [None]


def test_an_old_line_with_fields_this_version_does_not_know_loads(tmp_path):
    old = {"strategy": "mrag", "qid": "q7", "prediction": "Oslo", "metrics": {"f1": 0}, "latency": 3.2,
           "notes": {"by": "an older marag"}, "cost": {"llm_calls": 4}}  # fmt: skip
    path = tmp_path / RESULTS
    path.write_text(json.dumps(old) + "\n", encoding="utf-8")
    r = read_results(path)[("mrag", "q7")]
    assert r.prediction == "Oslo" and r.metrics == {"f1": 0.0} and r.cost == {"llm_calls": 4.0}
    assert r.model_extra == {"latency": 3.2, "notes": {"by": "an older marag"}}  # kept, not dropped
    assert r.question == "" and r.cause is None and r.answers == [] and r.gold_doc_ids == []  # fields it lacks: defaults
    assert json.loads(r.line()) == old  # nothing added, nothing lost


def test_fields_of_the_wrong_shape_are_emptied_not_fatal():
    line = json.dumps({**ANSWERED, "metrics": {"f1": "high", "em": None, "accuracy": [1], "rouge_l": 0.5, "ok": True},
                       "cost": "lots", "answers": "Brekke", "gold_doc_ids": 5, "prediction": ["x"], "metadata": [1],
                       "judge_fallbacks": {"judge_correct": {"decisions": "5", "fallbacks": 1}, "other": 3}})  # fmt: skip
    r = parse_result(line)
    assert r.metrics == {"rouge_l": 0.5} and r.cost == {} and r.answers == [] and r.gold_doc_ids == []
    assert r.prediction == "['x']" and r.metadata == {} and r.judge_fallbacks == {"judge_correct": {"fallbacks": 1}}


def test_a_torn_last_line_is_skipped_then_cut_and_the_next_append_is_clean(tmp_path):
    path = tmp_path / RESULTS
    append_result(path, ResultRecord.model_validate(ANSWERED))
    torn = ResultRecord.model_validate(FAILED).line()[:40]
    with path.open("a", encoding="utf-8") as f:
        f.write(torn)  # killed mid-write: no newline
    assert scan_results(path)[1] == 1 and list(read_results(path)) == [("vanilla_rag", "q1")]
    drop_torn_tail(path)
    assert path.read_text(encoding="utf-8") == ResultRecord.model_validate(ANSWERED).line() + "\n"
    append_result(path, ResultRecord.model_validate(FAILED))
    assert [parse_result(line).key for line in path.read_text(encoding="utf-8").splitlines()] == [("vanilla_rag", "q1"), ("mrag", "q2")]
    drop_torn_tail(path)  # a whole file is left as it is
    assert len(read_results(path)) == 2
    drop_torn_tail(tmp_path / "absent.jsonl")  # no file: nothing to do


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"strategy": "mrag", "qid": "q1", "predic', "not JSON"),
        ("[1, 2]", "an array, not a JSON object"),
        ("null", "null, not a JSON object"),
        ('{"strategy": 1, "qid": "q1"}', "strategy: Input should be a valid string"),
        ('{"strategy": "mrag"}', "qid: Field required"),
    ],
)
def test_a_line_that_is_not_a_record_says_why_and_readers_skip_it(tmp_path, line, why):
    with pytest.raises(ValueError, match="not") as e:
        parse_result(line)
    assert why in str(e.value)
    path = tmp_path / RESULTS
    path.write_text(line + "\n\n" + ResultRecord.model_validate(ANSWERED).line() + "\n", encoding="utf-8")
    records, bad = scan_results(path)
    assert list(records) == [("vanilla_rag", "q1")] and bad == 1  # the blank line is not counted
    assert read_results(tmp_path / "absent.jsonl") == {}


def test_answer_one_writes_the_fields_it_always_wrote():
    q = Question(id="q1", question="Who wrote Salt Winter?", answers=["Maren Holt"], metadata={"type": "bridge", "hops": [1]})
    cfg = EvalConfig(dataset="toy", strategies=["llm_only"], metrics=["em", "f1"])
    strategy = make_strategy("llm_only", ScriptedLLM(fn=lambda messages, output: {"answer": "Maren Holt"}), None, {})
    record, trace = asyncio.run(answer_one(cfg, strategy, "llm_only", q, None, None, ("type", "hops")))
    data = json.loads(record.line())
    assert list(data) == ["strategy", "qid", "question", "prediction", "cause", "retrieved_doc_ids", "source_doc_ids", "metrics",
                          "metrics_std", "judge_details", "judge_fallbacks", "cost", "trace_id", "error", "answers",
                          "gold_doc_ids", "metadata"]  # fmt: skip
    assert data["metrics"] == {"em": 1.0, "f1": 1.0} and data["cause"] == "correct" and data["trace_id"] == trace.id
    assert data["metadata"] == {"type": "bridge"}  # scalars only

    class Broken:
        async def run(self, question):
            raise RuntimeError("no model")

    record, trace = asyncio.run(answer_one(cfg, Broken(), "llm_only", q, None, None, ()))
    assert trace is None
    assert list(json.loads(record.line())) == ["strategy", "qid", "question", "cause", "cost", "error", "answers",
                                               "gold_doc_ids", "metadata"]  # fmt: skip
    assert record.error == "RuntimeError: no model" and record.cause == "error"
