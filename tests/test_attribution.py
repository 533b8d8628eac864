"""Failure attribution: one cause per question, by hand on planted outcomes, and in the
report a run writes."""

from __future__ import annotations

import json

from marag.eval.attribution import Outcome, attribute, cause_of_record
from marag.eval.report import build_report
from marag.eval.rundir import ResultRecord

GOLD = ["Maren Holt", "Salt Winter"]


def outcome(**over) -> Outcome:
    base = dict(
        prediction="Oslo",
        answers=["Brekke"],
        gold_docs=GOLD,
        read_docs=["Maren Holt", "Herring"],
        source_text="Maren Holt grew up in Oslo.",
        retrieves=True,
        steps=8,
    )
    return Outcome(**{**base, **over})


def test_each_cause_by_hand():
    assert attribute(outcome(prediction="She grew up in Brekke.")) == "correct"  # the gold answer is contained
    assert attribute(outcome(error=True)) == "error"
    assert attribute(outcome(stopped=True)) == "budget_stop"
    assert attribute(outcome(prediction="")) == "protocol_failure"
    assert attribute(outcome(prediction="I could not produce an answer.")) == "protocol_failure"
    assert attribute(outcome(answer_fell_back=True)) == "protocol_failure"
    assert attribute(outcome(bad_steps=3)) == "protocol_failure"  # 3 of 8 steps fell back or were refused
    assert attribute(outcome(bad_steps=2)) == "reading_miss"  # 2 of 8 is not more than a quarter
    assert attribute(outcome(read_docs=["Herring"])) == "retrieval_miss"
    assert attribute(outcome(source_text="Maren Holt grew up in Brekke, a village.")) == "answer_not_extracted"
    assert attribute(outcome()) == "reading_miss"
    # a yes/no answer is a judgement, not a span: "no" in the sources says nothing
    assert attribute(outcome(answers=["no"], prediction="yes", source_text="no one knows")) == "reading_miss"
    assert attribute(outcome(gold_docs=[])) == "wrong"  # no gold documents: retrieval cannot be told from reading
    assert attribute(outcome(retrieves=False, read_docs=[])) == "wrong"


def test_precedence_budget_before_protocol_before_retrieval():
    o = outcome(stopped=True, prediction="", read_docs=[])
    assert attribute(o) == "budget_stop"
    assert attribute(outcome(prediction="", read_docs=[])) == "protocol_failure"


def record(**fields) -> ResultRecord:
    return ResultRecord(strategy="vanilla_rag", qid="q1", **fields)


def test_records_without_a_stored_cause_get_the_ones_that_need_no_trace():
    rec = {"prediction": "Oslo", "answers": ["Brekke"], "gold_doc_ids": GOLD, "retrieved_doc_ids": ["Herring"], "cost": {}}
    assert cause_of_record(record(**rec)) == "retrieval_miss"
    assert cause_of_record(record(**{**rec, "retrieved_doc_ids": ["Salt Winter"]})) == "reading_miss"
    assert cause_of_record(record(**{**rec, "cause": "answer_not_extracted"})) == "answer_not_extracted"
    assert cause_of_record(record(**{**rec, "cause": "bad luck"})) == "retrieval_miss"  # not a cause: decided again
    assert cause_of_record(record(error="boom")) == "error"


def _write_run(path, results: list[dict]):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"config": {"dataset": "planted", "strategies": ["vanilla_rag", "mrag"], "seed": 0, "llm": {}}}))
    with (path / "results.jsonl").open("w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")


def test_the_report_counts_causes_lists_questions_and_prices_a_correct_answer(tmp_path):
    def rec(strategy, qid, pred, cause, calls):
        return {"strategy": strategy, "qid": qid, "question": "?", "prediction": pred, "answers": ["Brekke"], "gold_doc_ids": GOLD,
                "retrieved_doc_ids": ["Maren Holt"], "metrics": {"f1": float(pred == "Brekke")}, "cause": cause,
                "cost": {"llm_calls": calls, "prompt_tokens": 100 * calls, "seconds": 2.0 * calls}}  # fmt: skip

    run = tmp_path / "run"
    _write_run(run, [
        rec("vanilla_rag", "q1", "Brekke", "correct", 1), rec("vanilla_rag", "q2", "Oslo", "retrieval_miss", 1),
        rec("mrag", "q1", "Brekke", "correct", 10), rec("mrag", "q2", "Brekke", "correct", 20),
    ])  # fmt: skip
    text = build_report([run], plots=False).read_text()
    section = text[text.index("## Why answers fail"):]
    assert "| vanilla_rag | 1 | 1 |" in section and "| mrag | 2 | 0 |" in section  # correct, retrieval_miss
    assert "- vanilla_rag / retrieval_miss (1): q2" in section
    per_correct = text[text.index("### Cost per correct answer"):]
    # vanilla_rag: 2 calls for 1 correct answer; mrag: 30 calls for 2
    assert "| vanilla_rag | 1/2 | 2.0 | 200.0 |" in per_correct and "| mrag | 2/2 | 15.0 | 1,500.0 |" in per_correct


def test_a_yes_no_gold_is_the_answers_first_word():
    # "no" occurs in a reply that gives no verdict: containment and token F1 (0.5) would count it
    assert attribute(outcome(answers=["no"], prediction="No information found.")) == "correct"  # first word: a verdict
    assert attribute(outcome(answers=["no"], prediction="There is no information about it.")) == "reading_miss"
    assert attribute(outcome(answers=["no"], prediction="Information: no")) == "reading_miss"
    assert attribute(outcome(answers=["yes"], prediction="Yes, both are board games.")) == "correct"
    # a stored 'correct' from before the rule is re-decided; other stored causes stand
    old = {"prediction": "There is no record.", "answers": ["no"], "gold_doc_ids": GOLD, "cause": "correct",
           "retrieved_doc_ids": ["Herring"]}  # fmt: skip
    assert cause_of_record(record(**old)) == "retrieval_miss"
    assert cause_of_record(record(**{**old, "prediction": "No.", "cause": "correct"})) == "correct"
    assert cause_of_record(record(**{**old, "cause": "budget_stop"})) == "budget_stop"


def test_the_framework_ending_a_searcher_run_is_not_counted_as_a_bad_model_step():
    from marag.eval.attribution import outcome_of
    from marag.strategies.base import Answer
    from marag.trace.records import Step, Trace

    # one rejected query (the model's), then the framework ends the run: 1 bad step of 4, not 2 of 5
    steps = [Step(agent="coordinator"), Step(agent="searcher.query"), Step(agent="searcher.query_rejected", status="refused"),
             Step(agent="searcher.no_new_query", status="refused"), Step(agent="answerer", outputs={"answer": "Oslo"})]  # fmt: skip
    o = outcome_of(Answer(question="q", answer="Oslo", strategy="mrag", trace=Trace(steps=steps)), ["Brekke"], GOLD, retrieves=True)
    assert (o.steps, o.bad_steps) == (4, 1)
    assert attribute(o) == "retrieval_miss"  # not a protocol failure (1 of 4 is not over a quarter)
