"""`marag train reader`: a run's final reads become examples with the gold answer as the
reply (RA-DIT's reader fine-tuning); reads whose passages hold no gold answer are left
out, a yes/no verdict is kept, the reader's role is each example's."""

from __future__ import annotations

import json

import pytest

from marag.errors import MaragError
from marag.eval.rundir import ResultRecord
from marag.trace import Trace
from marag.train.reader import reader_examples, reader_roles


def _call(user: str, reply: str) -> dict:
    return {"model": "m", "messages": [{"role": "system", "content": "Answer from the passages."}, {"role": "user", "content": user}],
            "response": reply}  # fmt: skip


def _planted_run(path, rows: list[tuple[str, str, list[str], list[dict]]]) -> None:
    """rows: (qid, strategy, gold answers, steps)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"config": {"strategies": sorted({r[1] for r in rows}), "dataset": "planted"}}))
    results, traces = [], []
    for qid, strategy, golds, steps in rows:
        trace = Trace(question=f"question {qid}", strategy=strategy, steps=steps)
        traces.append(trace.model_dump_json())
        results.append(ResultRecord(strategy=strategy, qid=qid, prediction="Lyon", answers=golds, trace_id=trace.id).line())
    (path / "results.jsonl").write_text("\n".join(results) + "\n")
    (path / "traces.jsonl").write_text("\n".join(traces) + "\n")


def test_final_reads_become_examples_with_the_gold_answer(tmp_path):
    read = "Passages:\n\n[1] The Louvre is in Paris.\n\nQuestion: Where is the Louvre?"
    _planted_run(tmp_path / "run", [
        ("q1", "vanilla_rag", ["Paris"], [{"agent": "answerer", "llm_calls": [_call(read, '{"answer": "Lyon"}')]}]),
        ("q2", "vanilla_rag", ["Rome"], [{"agent": "answerer", "llm_calls": [_call(read, '{"answer": "Paris"}')]}]),  # not in its passages
        ("q3", "unirag", ["no"], [{"agent": "planner", "llm_calls": [_call("plan it", '{"action": "search"}')]},
                                  {"agent": "final_answer", "llm_calls": [_call("Is the Louvre in Rome?", '{"answer": "Yes"}')]}]),
        ("q4", "vanilla_rag", ["A very long reference answer that is a whole paragraph of text, not a short one at all"],
         [{"agent": "answerer", "llm_calls": [_call(read, '{"answer": "x"}')]}]),
        ("q5", "unirag", ["Paris"], [{"agent": "planner", "llm_calls": [_call(read, '{"action": "search"}')]}]),  # no final read
    ])  # fmt: skip
    rows, tally = reader_examples([tmp_path / "run"])
    assert [(r["qid"], r["role"]) for r in rows] == [("q1", "vanilla_rag.answerer"), ("q3", "unirag.final_answer")]
    assert rows[0]["messages"][-1] == {"role": "assistant", "content": '{"answer": "Paris"}', "weight": 1}
    assert [m["weight"] for m in rows[0]["messages"]] == [0, 0, 1] and rows[0]["messages"][1]["content"] == read
    assert rows[1]["messages"][-1]["content"] == '{"answer": "no"}'  # a verdict is read, not found in the text
    assert rows[1]["messages"][1]["content"] == "Is the Louvre in Rome?"  # the final read, not the planner's call
    assert tally == {"kept": 2, "gold not in the passages": 1, "no short gold answer": 1, "no final read": 1}
    assert {"vanilla_rag.answerer", "unirag.final_answer", "mrag.answerer"} <= reader_roles()


def test_the_command_writes_examples_and_finetune_asks_for_the_model(tmp_path, marag):
    read = "Passages:\n\n[1] The Louvre is in Paris.\n\nQuestion: Where is the Louvre?"
    _planted_run(tmp_path / "run", [("q1", "vanilla_rag", ["Paris"], [{"agent": "answerer", "llm_calls": [_call(read, "{}")]}])])
    code, out, err = marag("train", "reader", str(tmp_path / "run"), "--dir", str(tmp_path / "reader"))
    assert code == 0, out + err
    assert "1 kept" in out and (tmp_path / "reader" / "sft.jsonl").read_text().count("\n") == 1
    assert json.loads((tmp_path / "reader" / "reader.json").read_text())["runs"] == [str(tmp_path / "run")]
    code, out, err = marag("train", "finetune", "--dir", str(tmp_path / "reader"))
    assert code != 0 and "--model" in out + err  # reader examples name no sampling model

    _planted_run(tmp_path / "none", [("q1", "vanilla_rag", ["Rome"], [{"agent": "answerer", "llm_calls": [_call(read, "{}")]}])])
    with pytest.raises(MaragError, match="no reader examples in these runs: 1 gold not in the passages"):
        from marag.train.reader import write_reader_examples

        write_reader_examples([tmp_path / "none"], tmp_path / "x" / "sft.jsonl")


def _trajectory(qid: str, t: int, golds: list[str], read: str) -> dict:
    trace = Trace(question=f"question {qid}", strategy="unirag",
                  steps=[{"agent": "planner", "llm_calls": [_call("plan it", '{"action": "search"}')]},
                         {"agent": "final_answer", "llm_calls": [_call(read, '{"answer": "Lyon"}')]}])  # fmt: skip
    return {"qid": qid, "t": t, "question": trace.question, "answer": "Lyon", "answers": golds,
            "trace": trace.model_dump(mode="json")}  # fmt: skip


def test_a_teachers_trajectories_give_reads_and_the_same_read_counts_once(tmp_path):
    """`train run` directories hold one trajectories file per source: each trajectory's
    final read is an example, two trajectories that read the same passages give one."""
    paris = "Passages:\n\n[1] The Louvre is in Paris.\n\nQuestion: Where is the Louvre?"
    other = "Passages:\n\n[1] The Louvre, in Paris, opened in 1793.\n\nQuestion: Where is the Louvre?"
    source = tmp_path / "plan" / "sources" / "hotpotqa_train100-1-2"
    source.mkdir(parents=True)
    rows = [_trajectory("q1", 0, ["Paris"], paris), _trajectory("q1", 1, ["Paris"], paris),  # the same read twice
            _trajectory("q1", 2, ["Paris"], other), _trajectory("q2", 0, ["Rome"], paris)]  # fmt: skip
    (source / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples, tally = reader_examples([tmp_path / "plan"])
    assert [(e["qid"], e["run"]) for e in examples] == [("q1", "hotpotqa_train100-1-2/t0"), ("q1", "hotpotqa_train100-1-2/t2")]
    assert {e["role"] for e in examples} == {"unirag.final_answer"}
    assert [e["messages"][1]["content"] for e in examples] == [paris, other]
    assert examples[0]["messages"][-1]["content"] == '{"answer": "Paris"}' and not examples[0]["was_right"]
    assert tally == {"kept": 2, "the same read again": 1, "gold not in the passages": 1}
    # a training directory on its own reads the same
    assert len(reader_examples([source])[0]) == 2
    with pytest.raises(MaragError, match="no run or trajectories at"):
        reader_examples([tmp_path / "empty"])
