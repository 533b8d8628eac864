"""Self-training: sampling (role temperatures, seeds, resume; mRAG and UniRAG), the
judged and the reference rewards and their spread, no self-judging by default, selection
with ties, the export that trains only the agents' own turns, and a fine-tuning run that
resumes exactly (optimizer state included)."""

from __future__ import annotations

import asyncio
import json

import pytest
from judging import judge_page
from twohop import mrag_replies

from marag.errors import MaragError
from marag.llm import ScriptedLLM
from marag.agents.mrag import Judgement
from marag.train import TrainConfig, combine, examples, export, reference_reward, reward, reward_spread, sample, select, select_file


def mrag_script(messages, output):
    name = output.__name__
    if name == "PageJudgement":  # one judgement per document of the page
        return judge_page(lambda doc: mrag_script(messages, Judgement), messages[-1]["content"])
    return mrag_replies(query="the question", answer="an answer")[name]


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
    assert rows[0]["trace"]["config"]["role_temperatures"]["mrag.answerer"] == 0.1 and rows[0]["trace"]["config"]["temperature"] == 0.7
    assert {r["trace"]["config"]["seed"] for r in rows} == {0, 1, 2}

    calls = []

    async def fake_score(ex, names, judge=None, seed=None, temperature=0.0, batch=None):
        from marag.eval.metrics import MetricResult

        calls.append(seed)
        return {"mrag_correctness": MetricResult(value=1.0 if ex.question.id.endswith("0") else 0.5),
                "mrag_faithfulness": MetricResult(value=0.0)}  # fmt: skip

    monkeypatch.setattr("marag.eval.metrics.score_example", fake_score)
    with pytest.raises(MaragError, match="judge its own trajectories"):  # the sampling model may not grade itself
        asyncio.run(reward(cfg, directory, judge=llm, progress=False))
    llm = ScriptedLLM(fn=mrag_script, model="another-judge")
    asyncio.run(reward(cfg, directory, judge=llm, progress=False))
    rewards = [json.loads(x) for x in (directory / "rewards.jsonl").read_text().splitlines()]
    assert len(rewards) == 6 and len(calls) == 12  # R = 2 judge runs per trajectory
    assert {round(r["quality"], 3) for r in rewards} <= {0.8, 0.4}
    assert all(0 < r["quality"] - r["reward"] <= 0.05 for r in rewards)  # less the cost term, never more than its weight
    with pytest.raises(MaragError, match="averaged over \\[2\\] judge runs, not 5"):  # no mixing of R on resume
        asyncio.run(reward(cfg.model_copy(update={"judge_runs": 5}), directory, judge=llm, progress=False))
    chosen = [json.loads(x) for x in select_file(cfg, directory).read_text().splitlines()]
    assert len(chosen) == 6  # every trajectory of a question ties here: at most 3 per question
    sft = [json.loads(x) for x in export(cfg, directory).read_text().splitlines()]
    assert sft and {e["role"] for e in sft} <= set(cfg.trainable_roles) and "mrag.answerer" not in {e["role"] for e in sft}


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


# -- the reference reward, the judge, the spread --------------------------------------


def _planted(qid: str, t: int, answer: str, sources: list[str], answers=("Paris",), gold=("d1", "d2"), style="short",
             tokens: tuple[int, int] = (0, 0)) -> dict:  # fmt: skip
    call = {"model": "sampler.gguf", "messages": [], "response": "{}", "prompt_tokens": tokens[0], "completion_tokens": tokens[1]}
    return {"qid": qid, "t": t, "question": "Where is the Louvre?", "answer": answer, "answers": list(answers),
            "reference": answers[0] if answers else "", "answer_style": style, "gold_doc_ids": list(gold),
            "sources": [f"text of {d}" for d in sources], "source_doc_ids": sources,
            "trace": {"steps": [{"agent": "coordinator", "llm_calls": [call]}]}}  # fmt: skip


def _train_dir(tmp_path, rows, **cfg) -> tuple[TrainConfig, object]:
    directory = tmp_path / "train"
    directory.mkdir()
    (directory / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = TrainConfig(dataset="planted", **cfg)
    (directory / "train.json").write_text(config.model_dump_json())
    return config, directory


def test_reference_reward_by_hand_on_planted_trajectories(tmp_path):
    rows = [
        _planted("q1", 0, "Paris", ["d1", "d2"]),  # the gold answer, both gold documents in S
        _planted("q1", 1, "It is Paris, France", ["d1", "d9"]),  # the answer inside a longer reply, one gold document
        _planted("q1", 2, "London", ["d9"]),  # wrong, no gold document
        _planted("q1", 3, "Paris", []),  # the gold answer, but S holds no gold document
        _planted("q2", 0, "Paris", ["d1"]),
        _planted("q2", 1, "paris.", ["d1"]),  # the same after normalization: a tie, no signal
    ]
    cfg, directory = _train_dir(tmp_path, rows, reward="reference", trajectories=4)
    asyncio.run(reward(cfg, directory, progress=False))  # no judge is made or called
    got = {(r["qid"], r["t"]): r for r in map(json.loads, (directory / "rewards.jsonl").read_text().splitlines())}
    # short style: correctness = (token F1 + contained) / 2; reward = (2 x correctness + 1 x gold recall) / 3
    assert got["q1", 0]["reference_correctness"] == 1.0 and got["q1", 0]["gold_recall"] == 1.0
    assert got["q1", 0]["reward"] == pytest.approx(1.0)
    f1 = 2 * 0.25 * 1.0 / 1.25  # 4 answer tokens, 1 of them the gold one
    assert got["q1", 1]["reference_correctness"] == pytest.approx((f1 + 1) / 2)
    assert got["q1", 1]["reward"] == pytest.approx((2 * (f1 + 1) / 2 + 0.5) / 3)
    assert got["q1", 2]["reward"] == 0.0
    assert got["q1", 3]["reward"] == pytest.approx(2 / 3)  # right answer, no gold document: below t=0
    assert got["q1", 0]["reward"] > got["q1", 3]["reward"] and got["q1", 0]["reward"] > got["q1", 1]["reward"] > got["q1", 2]["reward"]
    assert [(r["qid"], r["t"]) for r in select(list(got.values()))] == [("q1", 0), ("q2", 0), ("q2", 1)]
    assert got["q2", 0]["reward"] == pytest.approx((2 + 0.5) / 3)
    assert [(r["qid"], r["t"]) for r in select(list(got.values()), min_reward=0.9)] == [("q1", 0)]  # q2's best falls short
    assert reference_reward(_planted("q", 0, "Paris", ["d1"], gold=()))["reference_reward"] == 1.0  # no gold docs: correctness alone
    # a yes/no gold counts as given only as the reply's first word
    verdict = reference_reward(_planted("q", 0, "No.", ["d1"], answers=("no",), gold=()))["reference_correctness"]
    hedge = reference_reward(_planted("q", 0, "There is no record.", ["d1"], answers=("no",), gold=()))["reference_correctness"]
    assert verdict == 1.0 and hedge == pytest.approx(2 * 0.25 / 1.25 / 2)  # token F1 alone, nothing contained
    long = _planted("q", 0, "The Louvre is in Paris, on the Seine.", [], answers=("The Louvre stands in Paris on the right bank of the Seine.",), style="long")
    assert 0 < reference_reward(long)["reference_correctness"] < 1  # long style: token F1 against the reference

    report = (directory / "rewards.md").read_text()
    assert "1 of 2 questions have a unique best trajectory" in report and "1 have every answer rewarded alike" in report
    assert "| q1 | 4 | 1.000 " in report and "| 0 | yes |" in report
    assert [q["unique_best"] for q in reward_spread(list(got.values()))] == [True, False]
    saved = json.loads((directory / "train.json").read_text())
    assert saved["reward"] == "reference" and saved["judged_by"] is None  # no judge took part


def test_the_cost_term_picks_the_cheaper_of_trajectories_that_answer_alike(tmp_path):
    rows = [
        _planted("q1", 0, "Paris", ["d1", "d2"], tokens=(4000, 500)),  # 6k prompt-equivalent tokens
        _planted("q1", 1, "Paris", ["d1", "d2"], tokens=(1000, 250)),  # the same answer and sources for 2k
        _planted("q1", 2, "Paris", ["d1"], tokens=(500, 100)),  # cheaper still, one gold document fewer
        _planted("q2", 0, "London", [], tokens=(3000, 0)),
        _planted("q2", 1, "Rome", [], tokens=(30000, 0)),  # past the scale: the term is whole, no more
    ]
    cfg, directory = _train_dir(tmp_path, rows, reward="reference", trajectories=3)
    asyncio.run(reward(cfg, directory, progress=False))
    got = {(r["qid"], r["t"]): r for r in map(json.loads, (directory / "rewards.jsonl").read_text().splitlines())}
    assert got["q1", 0]["cost_units"] == 6.0 and got["q1", 1]["cost_units"] == 2.0
    assert got["q1", 0]["quality"] == got["q1", 1]["quality"] == 1.0
    assert got["q1", 0]["reward"] == pytest.approx(1.0 - 0.05 * 0.6) and got["q1", 1]["reward"] == pytest.approx(1.0 - 0.05 * 0.2)
    assert got["q1", 1]["reward"] > got["q1", 2]["reward"]  # a gold document more outweighs the cheaper search
    assert got["q2", 1]["reward"] == pytest.approx(-0.05)
    assert [(r["qid"], r["t"]) for r in select(list(got.values()))] == [("q1", 1), ("q2", 0)]
    spread = reward_spread(list(got.values()))
    assert [(q["unique_best"], q["unique_by_quality"]) for q in spread] == [(True, False), (True, False)]
    report = (directory / "rewards.md").read_text()
    assert "2 of 2 questions have a unique best trajectory** (0 by the answer and its sources alone" in report
    assert "minus 0.05 x the trajectory's cost" in report

    # without the term the two right answers tie, as rewards written before it did
    (directory / "rewards.jsonl").unlink()
    asyncio.run(reward(cfg.model_copy(update={"cost_weight": 0.0}), directory, progress=False))
    flat = [json.loads(x) for x in (directory / "rewards.jsonl").read_text().splitlines()]
    assert [q["best"] for q in reward_spread(flat)] == [[0, 1], [0, 1]]
    assert "cost_weight" not in flat[0]["signature"]
    with pytest.raises(MaragError, match="rewards of other settings"):  # not mixed with costed rewards
        asyncio.run(reward(cfg, directory, progress=False))


def test_reference_reward_needs_gold_answers_and_sources_by_document(tmp_path):
    cfg, directory = _train_dir(tmp_path, [_planted("q1", 0, "Paris", ["d1"], answers=())], reward="reference")
    with pytest.raises(MaragError, match="no gold answer"):
        asyncio.run(reward(cfg, directory, progress=False))


def test_self_judging_is_refused_unless_allowed(tmp_path, monkeypatch):
    from marag.eval.metrics import MetricResult
    from marag.llm import LLMConfig

    async def fake_score(ex, names, judge=None, seed=None, temperature=0.0, batch=None):
        return {"mrag_correctness": MetricResult(value=1.0), "mrag_faithfulness": MetricResult(value=1.0)}

    monkeypatch.setattr("marag.eval.metrics.score_example", fake_score)
    rows = [_planted("q1", 0, "Paris", ["d1"]), _planted("q1", 1, "Rome", [])]
    cfg, directory = _train_dir(tmp_path, rows, judge_runs=1, llm=LLMConfig(backend="scripted", model="sampler.gguf"))
    with pytest.raises(MaragError, match="no judge was given") as err:  # the default: the sampling model would judge
        asyncio.run(reward(cfg, directory, progress=False))
    assert "--allow-self-judge" in err.value.hint and "--reward reference" in err.value.hint
    same = cfg.model_copy(update={"judge": LLMConfig(backend="scripted", model="sampler.gguf", threads=1)})
    with pytest.raises(MaragError, match="is the model that sampled"):  # configured, but the same model
        asyncio.run(reward(same, directory, progress=False))
    with pytest.raises(MaragError, match="the judge sampler.gguf is the model that sampled"):  # an LLM object, by the calls' model
        asyncio.run(reward(cfg, directory, judge=ScriptedLLM(model="sampler.gguf"), progress=False))
    assert not (directory / "rewards.jsonl").exists() or not (directory / "rewards.jsonl").read_text()

    other = cfg.model_copy(update={"judge": LLMConfig(backend="scripted", model="bigger-judge")})
    asyncio.run(reward(other, directory, progress=False))
    saved = json.loads((directory / "train.json").read_text())
    assert saved["judged_by"] == "bigger-judge" and saved["judge"]["model"] == "bigger-judge"  # train.json names the judge
    rewards = [json.loads(x) for x in (directory / "rewards.jsonl").read_text().splitlines()]
    assert {r["signature"]["judge"] for r in rewards} == {"bigger-judge"}

    (directory / "rewards.jsonl").unlink()
    asyncio.run(reward(cfg.model_copy(update={"allow_self_judge": True}), directory, progress=False))  # asked for: allowed
    assert json.loads((directory / "train.json").read_text())["judged_by"] == "sampler.gguf"
    with pytest.raises(MaragError, match="rewards of other settings"):  # no mixing of judges in one file
        asyncio.run(reward(other, directory, progress=False))


def test_train_reward_command_refuses_self_judging_and_prints_the_spread(tmp_path, marag):
    from marag.llm import LLMConfig

    rows = [_planted("q1", 0, "Paris", ["d1", "d2"]), _planted("q1", 1, "Rome", [])]
    _, directory = _train_dir(tmp_path, rows, llm=LLMConfig(backend="scripted", model="sampler"))
    code, out, err = marag("train", "reward", "--dir", str(directory))
    assert code != 0 and "judge its own trajectories" in out + err
    code, out, err = marag("train", "reward", "--dir", str(directory), "--judge", "scripted:sampler")
    assert code != 0 and "judge its own trajectories" in out + err
    code, out, err = marag("train", "reward", "--dir", str(directory), "--reward", "reference")
    assert code == 0, out + err
    assert "1 of 1 questions have a unique best trajectory" in out and "| q1 | 2 | 1.000 0.000 | 1.000 | 0 | yes |" in out


# -- UniRAG's agent, on synthetic questions -----------------------------------------


class TemperatureLog:
    """An LLM that records each call's temperature by output model, around a scripted one."""

    def __init__(self, inner):
        self.inner, self.model, self.temperatures = inner, inner.model, {}

    async def generate(self, messages, output=None, temperature=0.0, max_tokens=512, seed=None):
        self.temperatures.setdefault(output.__name__ if output else "", set()).add(temperature)
        return await self.inner.generate(messages, output=output, temperature=temperature, max_tokens=max_tokens, seed=seed)


def synth_writer(messages, output):
    import re

    user = messages[-1]["content"]
    if output.__name__ == "QA":
        title = re.search(r"^\[1\] (.*)$", user, re.MULTILINE).group(1)
        return {"question": f"What is {title} known for?", "answer": title}
    if output.__name__ == "Solution":
        return {"steps": [{"thought": "look it up", "query": "the topic", "evidence": "the document"}], "final_answer": "it"}
    return {"reason": "fine", "score": 5}


def unirag_script(messages, output):
    user = messages[-1]["content"]
    done = "it is known for something" in user  # the evidence of the first search is in the working memory
    return {
        "PlanStep": {"thought": "answer" if done else "search first", "action": "final_answer" if done else "search", "query": "" if done else "what is it known for"},
        "Reflection": {"found": True, "evidence": [{"doc": 1, "text": "it is known for something"}]},
    }.get(output.__name__, {"answer": "an answer"})  # fmt: skip


def test_unirag_trajectories_on_synagent_questions_train_planner_and_reflector(data_dir, tmp_path):
    from marag.eval.datasets import load_dataset
    from marag.index.pipeline import index_documents
    from marag.index.store import IndexConfig
    from marag.synth import generate

    ds = load_dataset("hotpotqa_train100", data_dir)
    idx = index_documents(ds.documents[:300], tmp_path / "idx", IndexConfig(retrievers=["bm25"]), progress=False)
    qfile = tmp_path / "synagent.jsonl"
    asyncio.run(generate(ScriptedLLM(fn=synth_writer), idx, 2, qfile, style="synagent", seed=1, progress=False))
    cfg = TrainConfig(dataset=str(qfile), strategy="unirag", index_path=str(tmp_path / "idx"), trajectories=2,
                      settings={"max_searches": 2}, concurrency=1)  # fmt: skip
    assert cfg.trainable_roles == ["unirag.planner", "unirag.reflector"]
    llm = TemperatureLog(ScriptedLLM(fn=unirag_script))
    directory = tmp_path / "train"
    asyncio.run(sample(cfg, directory, llm=llm, progress=False))  # the index comes from index_path
    rows = [json.loads(x) for x in (directory / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["gold_doc_ids"] and r["source_doc_ids"] is not None for r in rows)
    agents = {s["agent"] for r in rows for s in r["trace"]["steps"]}
    assert {"planner", "reflector", "final_answer"} <= agents
    assert llm.temperatures["PlanStep"] == {0.7} and llm.temperatures["Reflection"] == {0.7}  # trainable roles sampled hot
    assert {t for name, ts in llm.temperatures.items() if name not in ("PlanStep", "Reflection") for t in ts} == {0.1}  # the answer cool
    asyncio.run(reward(cfg.model_copy(update={"reward": "reference"}), directory, progress=False))
    asyncio.run(sample(cfg, directory, llm=llm, progress=False))  # sampling again (nothing left) keeps the reward settings
    assert json.loads((directory / "train.json").read_text())["reward"] == "reference"
    select_file(cfg, directory)
    sft = [json.loads(x) for x in export(cfg, directory).read_text().splitlines()]
    assert {e["role"] for e in sft} == {"unirag.planner", "unirag.reflector"}  # never the final answer


def test_trainable_roles_follow_the_strategy():
    assert "mrag.coordinator" in TrainConfig(dataset="d").trainable_roles and "mrag.answerer" not in TrainConfig(dataset="d").trainable_roles
    assert TrainConfig(dataset="d", strategy="unirag_paper").trainable_roles == ["unirag.planner", "unirag.reflector"]
    # a train.json from before roles were qualified reads as the same settings
    assert TrainConfig(dataset="d", strategy="unirag", trainable_roles=["planner", "reflector"]) == TrainConfig(dataset="d", strategy="unirag")
    with pytest.raises(ValueError, match="no trainable roles known for strategy 'kair'"):
        TrainConfig(dataset="d", strategy="kair")
    assert TrainConfig(dataset="d", strategy="kair", trainable_roles=["agent"]).trainable_roles == ["agent"]


# -- fine-tuning resumes exactly -------------------------------------------------------


def _tiny_lora(lora_seed: int = 0):
    """A two-layer Llama of a few thousand weights with LoRA on v/o projections: the
    shape `finetune` trains, small enough for a unit test."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft", reason="fine-tuning needs the train extra: pip install torch==2.13.0 'marag[train]'")
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from marag.train.finetune import TARGETS

    torch.manual_seed(0)  # the base weights: the same in every run, as a GGUF file's are
    base = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                                        num_key_value_heads=1, max_position_embeddings=64))  # fmt: skip
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=list(TARGETS), task_type="CAUSAL_LM")
    torch.manual_seed(lora_seed)  # the adapter's initial weights
    return get_peft_model(base, lora)


def _lora_weights(model) -> dict:
    return {k: v.detach().clone() for k, v in model.named_parameters() if "lora_" in k}


def test_a_resumed_finetune_continues_as_an_uninterrupted_one(tmp_path):
    torch = pytest.importorskip("torch")
    from marag.train.finetune import train_lora

    rng = __import__("random").Random(1)
    data = []
    for _ in range(6):
        ids = [rng.randrange(40) for _ in range(rng.randrange(6, 12))]
        data.append((ids, [-100] * 3 + ids[3:]))
    kw = {"lr": 5e-2, "batch": 2, "save_every": 2, "seed": 3}

    straight = _tiny_lora()
    res = train_lora(straight, data, tmp_path / "a", steps=4, **kw)
    assert res["resumed_from"] == 0 and len({round(x, 6) for x in [res["first_loss"], res["last_loss"]]}) == 2

    first = _tiny_lora()
    train_lora(first, data, tmp_path / "b", steps=2, **kw)  # stopped after 2 steps
    assert {p.name for p in (tmp_path / "b" / "checkpoint-2").iterdir()} >= {"adapter_model.safetensors", "optimizer.pt", "state.json"}
    resumed = _tiny_lora(lora_seed=99)  # a new process: other initial adapter weights, a fresh optimizer
    res = train_lora(resumed, data, tmp_path / "b", steps=4, **kw)
    assert res["resumed_from"] == 2 and res["optimizer_restored"] is True
    a, b = _lora_weights(straight), _lora_weights(resumed)
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a), "2 + 2 steps differ from 4 straight"
    assert res["first_loss"] is not None  # the losses of the steps before the resume are kept

    opt = torch.load(tmp_path / "b" / "checkpoint-4" / "optimizer.pt", weights_only=True)
    assert {s["step"].item() for s in opt["state"].values()} == {4.0}  # AdamW counted every step, across the resume


def test_rewards_written_before_signatures_are_judged_ones(tmp_path):
    # a file of judged rewards from before rewards were signed: a reference run must not mix into it
    old = {**_planted("q1", 0, "Paris", ["d1"]), "reward": 0.7, "judge_runs": 1}
    cfg, directory = _train_dir(tmp_path, [old, _planted("q1", 1, "Rome", [])], reward="reference")
    (directory / "rewards.jsonl").write_text(json.dumps(old) + "\n")
    with pytest.raises(MaragError, match="rewards of other settings"):
        asyncio.run(reward(cfg, directory, progress=False))


def test_sampling_questions_without_documents_leaves_no_training_directory(tmp_path):
    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps({"id": "q1", "question": "Where is the Louvre?", "answers": ["Paris"]}) + "\n")
    directory = tmp_path / "train"
    with pytest.raises(MaragError, match="no documents to search"):
        asyncio.run(sample(TrainConfig(dataset=str(questions)), directory, progress=False))
    assert not directory.exists()


def test_the_reply_loss_is_the_models_own_loss_without_the_prompts_logits():
    torch = pytest.importorskip("torch")
    from marag.train.finetune import reply_loss

    model = _tiny_lora()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 0, 0], [11, 12, 13, 14, 15, 16, 17, 18]])
    mask = torch.tensor([[1] * 6 + [0] * 2, [1] * 8])
    labels = torch.tensor([[-100, -100, -100, 8, 9, 10, -100, -100], [-100] * 5 + [16, 17, 18]])
    ours = reply_loss(model, ids, mask, labels)
    ours.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    theirs = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    theirs.backward()
    assert torch.allclose(ours, theirs, atol=1e-6), (ours, theirs)
    # the LoRA weights get the same gradient through the decoder alone
    assert grads and any(g.abs().sum() > 0 for n, g in grads.items() if "lora_B" in n)
    assert all(torch.allclose(g, dict(model.named_parameters())[n].grad, atol=1e-6) for n, g in grads.items())
    with pytest.raises(ValueError, match="without any labelled token"):
        reply_loss(model, ids, mask, torch.full_like(labels, -100))


def test_an_architecture_not_known_plain_takes_the_models_own_loss(monkeypatch):
    torch = pytest.importorskip("torch")
    import marag.train.finetune as ft

    model = _tiny_lora()
    ids, mask = torch.tensor([[5, 6, 7, 8]]), torch.ones(1, 4, dtype=torch.long)
    labels = torch.tensor([[-100, -100, 7, 8]])
    calls = []
    monkeypatch.setattr(ft, "PLAIN_OUTPUT", frozenset())
    monkeypatch.setattr(model, "forward", lambda **kw: calls.append(kw) or type("Out", (), {"loss": torch.tensor(1.5)})())
    assert ft.reply_loss(model, ids, mask, labels).item() == 1.5 and calls[0]["labels"] is labels
