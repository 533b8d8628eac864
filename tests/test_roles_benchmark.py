"""benchmarks/roles.py reads a run's traces and says which roles broke their protocol:
checked here on a hand-made run whose KAIR filter drops the gold passage, whose query
planner writes the answer into a query, and whose knowledge update leaves an index as
a gap."""

from __future__ import annotations

import json

from bench import load_benchmark

from marag.eval.rundir import RESULTS, ResultRecord, append_result


def _roles():
    return load_benchmark("roles")


def _step(agent, inputs, outputs, status="ok"):
    return {"agent": agent, "status": status, "inputs": inputs, "outputs": outputs, "llm_calls": [{}], "searches": []}


def test_roles_flags_a_dropped_gold_passage_a_guessed_query_and_an_index_gap(tmp_path):
    q = "Which country is the birthplace of the author of Dune?"
    passages = [{"id": "Dune#0", "title": "Dune", "text": "Dune is a novel by Frank Herbert."},
                {"id": "Frank Herbert#0", "title": "Frank Herbert", "text": "Herbert was born in Tacoma, in the United States."}]  # fmt: skip
    steps = [
        _step("query_planner", {}, {"candidates": [{"query": "Dune author", "gap": 1}]}),
        _step("context_filter", {"passages": passages}, {"keep": [1]}),  # the second gold passage dropped
        _step("knowledge_update", {"passages": passages}, {"facts": [], "new_gaps": ["/70's", "Where was Herbert born?"]}),
        _step("query_planner", {}, {"candidates": [{"query": "Frank Herbert United States", "gap": 1}]}),  # read: fine
        _step("query_planner", {}, {"candidates": [{"query": "Dune author born in Canada", "gap": 1}]}),  # not a gold answer
        _step("query_planner", {}, {"candidates": [{"query": "Herbert Tacoma Washington state", "gap": 1}]}),
    ]
    trace = {"id": "t1", "question": q, "strategy": "kair", "steps": steps, "answer": "United States", "read": [{"doc_id": "Dune"}]}
    (tmp_path / "traces.jsonl").write_text(json.dumps(trace) + "\n")
    append_result(tmp_path / RESULTS, ResultRecord(strategy="kair", qid="q1", question=q, prediction="United States",
                  trace_id="t1", answers=["United States", "Washington state"], gold_doc_ids=["Dune", "Frank Herbert"]))  # fmt: skip

    rows = {agent: t for _, agent, t in _roles().tally([tmp_path])}
    assert rows["context_filter"].checks["gold kept (all)"] == [0, 1]
    assert rows["knowledge_update"].checks["gaps as text"] == [0, 1]
    # "Washington state" was never read before the last query: a guess; "United States" was read
    assert rows["query_planner"].steps == 4 and rows["query_planner"].checks["no guessed answer"] == [3, 4]
    assert rows["(final answer)"].checks["read a passage"] == [1, 1]
