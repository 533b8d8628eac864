"""Self-training: sampling (role temperatures, seeds, resume), reward weighting,
selection with ties, and the export that trains only the agents' own turns."""

from __future__ import annotations

import asyncio
import json

import pytest

from marag.errors import MaragError
from marag.llm import ScriptedLLM
from marag.train import TrainConfig, combine, examples, export, reward, sample, select, select_file


def mrag_script(messages, output):
    name = output.__name__
    return {
        "CoordinatorDecision": {"agent": "finisher", "input": "", "reason": "done?"},
        "Query": {"query": "the question"},
        "Judgement": {"explanation": "about it", "fact": "", "relevant": True},
        "Move": {"action": "end", "new_query": "", "reason": ""},
        "AnswerOutput": {"answer": "an answer"},
    }[name]


def test_combine_and_select_by_hand():
    assert combine(1.0, 0.0) == pytest.approx(0.8) and combine(0.5, 1.0) == pytest.approx(0.6)
    assert combine(0.25, 0.75, 1, 1) == pytest.approx(0.5)
    rewards = [{"qid": "a", "t": t, "reward": r} for t, r in enumerate([0.2, 0.9, 0.9, 0.9, 0.9, 0.1])]
    rewards += [{"qid": "b", "t": 0, "reward": 0.3}, {"qid": "b", "t": 1, "reward": 0.4}]
    chosen = select(rewards, max_ties=3)
    assert [(r["qid"], r["t"]) for r in chosen] == [("a", 1), ("a", 2), ("a", 3), ("b", 1)]  # four tie, three kept
    assert all(r["normalized"] == 1.0 for r in chosen)


def test_export_trains_only_the_agents_own_turns():
    trace = {"steps": [
        {"agent": "coordinator", "llm_calls": [{"model": "m", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], "response": "{\"agent\":\"searcher\"}"}]},
        {"agent": "answerer", "llm_calls": [{"model": "m", "messages": [{"role": "user", "content": "A?"}], "response": "{\"answer\":\"x\"}"}]},
        {"agent": "searcher.judge", "status": "fallback", "llm_calls": [{"model": "m", "messages": [{"role": "user", "content": "J"}], "response": "garbage"}]},
    ]}  # fmt: skip
    out = examples(trace, ["coordinator", "searcher.judge"])
    assert len(out) == 1 and out[0]["role"] == "coordinator"  # the answerer is not trainable; a fallback is not learnt
    msgs = out[0]["messages"]
    assert [m["weight"] for m in msgs] == [0, 0, 1] and msgs[-1] == {"role": "assistant", "content": '{"agent":"searcher"}', "weight": 1}


def test_sample_reward_select_export_with_resume(data_dir, tmp_path, monkeypatch):
    cfg = TrainConfig(dataset="hotpotqa_train100", limit=2, trajectories=3, judge_runs=2, settings={"max_agent_calls": 4},
                      concurrency=2)  # fmt: skip
    llm = ScriptedLLM(fn=mrag_script)
    directory = tmp_path / "train"
    from marag.index.pipeline import index_documents
    from marag.eval.datasets import load_dataset
    from marag.index.store import IndexConfig

    ds = load_dataset("hotpotqa_train100", data_dir)
    retriever = index_documents(ds.documents, tmp_path / "idx", IndexConfig(retrievers=["bm25"]), progress=False).retriever()
    asyncio.run(sample(cfg.model_copy(update={"limit": 1}), directory, data_dir, retriever=retriever, llm=llm, progress=False))
    lines = (directory / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 3
    (directory / "trajectories.jsonl").write_text("\n".join(lines[:2]) + "\n" + lines[2][:50])  # interrupted mid-write
    asyncio.run(sample(cfg, directory, data_dir, retriever=retriever, llm=llm, progress=False))
    rows = [json.loads(x) for x in (directory / "trajectories.jsonl").read_text().splitlines() if x.endswith("}")]
    assert sorted((r["qid"], r["t"]) for r in rows) == sorted({(r["qid"], r["t"]) for r in rows}) and len(rows) == 6
    temps = {c["model"] for r in rows for s in r["trace"]["steps"] for c in s["llm_calls"]}
    assert temps  # calls were made; their temperatures are in the strategy config below
    assert rows[0]["trace"]["config"]["role_temperatures"]["answerer"] == 0.1 and rows[0]["trace"]["config"]["temperature"] == 0.7
    assert {r["trace"]["config"]["seed"] for r in rows} == {0, 1, 2}

    calls = []

    async def fake_score(ex, names, judge=None, seed=None, temperature=0.0, batch=None):
        from marag.eval.metrics import MetricResult

        calls.append(seed)
        return {"mrag_correctness": MetricResult(value=1.0 if ex.question.id.endswith("0") else 0.5),
                "mrag_faithfulness": MetricResult(value=0.0)}  # fmt: skip

    monkeypatch.setattr("marag.eval.metrics.score_example", fake_score)
    asyncio.run(reward(cfg, directory, judge=llm, progress=False))
    rewards = [json.loads(x) for x in (directory / "rewards.jsonl").read_text().splitlines()]
    assert len(rewards) == 6 and len(calls) == 12  # R = 2 judge runs per trajectory
    assert {round(r["reward"], 3) for r in rewards} <= {0.8, 0.4}
    with pytest.raises(MaragError, match="averaged over \\[2\\] judge runs, not 5"):  # no mixing of R on resume
        asyncio.run(reward(cfg.model_copy(update={"judge_runs": 5}), directory, judge=llm, progress=False))
    chosen = [json.loads(x) for x in select_file(cfg, directory).read_text().splitlines()]
    assert len(chosen) == 6  # every trajectory of a question ties here: at most 3 per question
    sft = [json.loads(x) for x in export(cfg, directory).read_text().splitlines()]
    assert sft and {e["role"] for e in sft} <= set(cfg.trainable_roles) and "answerer" not in {e["role"] for e in sft}


def test_finetune_resumes_only_its_own_checkpoints(tmp_path):
    from marag.train.finetune import prepare_out

    out, run = tmp_path / "lora", {"examples_sha256": "a", "rank": 16}
    prepare_out(out, run)  # a new folder is made and stamped
    (out / "checkpoint-20").mkdir()
    prepare_out(out, run)  # same run: its checkpoint stays for the resume
    assert (out / "checkpoint-20").is_dir()
    with pytest.raises(MaragError, match="another fine-tuning run") as err:
        prepare_out(out, {**run, "examples_sha256": "b"})  # new examples must not resume old weights
    assert "--fresh" in err.value.hint and (out / "checkpoint-20").is_dir()
    prepare_out(out, {**run, "examples_sha256": "b"}, fresh=True)
    assert not (out / "checkpoint-20").exists()
    assert json.loads((out / "run.json").read_text())["examples_sha256"] == "b"
