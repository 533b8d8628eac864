"""LoRA fine-tuning of the local model (`marag train finetune`) and the adapter it
writes, loaded by llama.cpp: the training loss falls, the tuned role answers differently
from the base model, and a role the adapter was not trained for stays on the base
weights in the same llama.cpp instance."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from marag.llm import make_llm
from marag.trace import Trace, activate, step

pytestmark = pytest.mark.integration


def _example(question: str, answer: str) -> dict:
    return {"role": "answerer", "qid": question, "messages": [
        {"role": "system", "content": "Answer in JSON.", "weight": 0},
        {"role": "user", "content": question, "weight": 0},
        {"role": "assistant", "content": json.dumps({"answer": answer}), "weight": 1},
    ]}  # fmt: skip


def test_a_few_lora_steps_give_an_adapter_llama_cpp_applies(tmp_path, smoke_model):
    pytest.importorskip("peft", reason="fine-tuning needs the train extra: pip install torch==2.13.0 'marag[train]'")
    from marag.train.finetune import finetune

    sft = tmp_path / "sft.jsonl"
    sft.write_text("\n".join(json.dumps(_example(q, a)) for q, a in [("Capital of France?", "Paris"), ("Capital of Italy?", "Rome")]))
    out = finetune(sft, tmp_path / "lora", smoke_model, steps=3, rank=4, lr=1e-3, batch=2, progress=False)
    assert out["examples"] == 2 and out["last_loss"] < out["first_loss"]
    assert (tmp_path / "lora" / "checkpoint-3" / "optimizer.pt").is_file()  # a resumable checkpoint, optimizer included

    described = json.loads((tmp_path / "lora" / "adapter.json").read_text())
    assert described["roles"] == ["answerer"]  # the examples' role
    # it names its base model (catalogue name and file) and how it was trained
    assert described["base_file"] == smoke_model.name and described["last_loss"] == out["last_loss"] and described["steps"] == 3
    other = tmp_path / "other-model.gguf"
    other.write_bytes(b"GGUF")
    from marag.errors import LLMError
    from marag.llm.llamacpp import LlamaCppLLM

    with pytest.raises(LLMError, match=f"trained for .*, not {other.name}"):
        LlamaCppLLM(other, lora=tmp_path / "lora")  # the folder names its adapter.gguf

    def replies(**kw) -> dict[str, tuple[str, str]]:
        """role -> (model recorded, reply) for one call in each role's step."""
        llm = make_llm(f"llamacpp:{smoke_model}", threads=2, deterministic=True, **kw)
        trace = Trace()

        async def go():
            with activate(trace):
                for role in ("answerer", "coordinator"):
                    with step(role):
                        await llm.generate([{"role": "user", "content": "Capital of France?"}], max_tokens=20)

        try:
            asyncio.run(go())
        finally:
            llm.close()
        return {s.agent: (s.llm_calls[0].model, s.llm_calls[0].response) for s in trace.steps}

    base, tuned = replies(), replies(lora=out["adapter"])  # roles: adapter.json's
    assert tuned["answerer"][0].endswith("+adapter.gguf") and tuned["answerer"][1].strip()
    assert tuned["answerer"][1] != base["answerer"][1]  # the trained role runs on the adapter
    assert tuned["coordinator"] == (base["coordinator"][0], base["coordinator"][1])  # the other on the base weights
    everywhere = replies(lora=out["adapter"], lora_roles=["*"])
    assert everywhere["coordinator"][1] == tuned["answerer"][1]  # the same prompt, the adapter on: the tuned reply


def test_train_run_end_to_end_with_the_135m_as_student(tmp_path, smoke_model):
    """`marag train run`'s whole loop with a real student: a scripted teacher samples
    UniRAG on two sample questions, SmolLM2-135M is fine-tuned for two LoRA steps on the
    CPU, then teacher, base and tuned student answer a held-back question. Killed between
    export and fine-tuning, the second start resumes without sampling again; the adapter
    it wrote is refused by another model."""
    pytest.importorskip("peft", reason="fine-tuning needs the train extra: pip install torch==2.13.0 'marag[train]'")
    from test_train import unirag_script

    from marag.errors import LLMError
    from marag.index.pipeline import index_corpus
    from marag.index.store import IndexConfig
    from marag.llm import LLMConfig, ScriptedLLM
    from marag.llm.llamacpp import LlamaCppLLM
    from marag.train.finetune import finetune
    from marag.train.plan import Plan, PlanRun

    repo = Path(__file__).resolve().parents[2]
    index = tmp_path / "idx"
    index_corpus(repo / "samples" / "corpus", index, IndexConfig(retrievers=["bm25"]), progress=False)
    questions = str(repo / "samples" / "questions.jsonl")
    plan = Plan.model_validate({
        "strategy": "unirag", "teacher": "scripted:teacher", "student": f"llamacpp:{smoke_model}", "trajectories": 2,
        "settings": {"max_searches": 1}, "concurrency": 2, "min_reward": None,  # the scripted teacher answers wrong
        "questions": [{"dataset": questions, "index": str(index), "limit": 2}],
        "finetune": {"steps": 2, "rank": 4, "batch": 2, "max_len": 512, "save_every": 1},
        "evaluate": {"dataset": questions, "index": str(index), "skip": 2, "limit": 1, "retriever": "bm25", "concurrency": 1}})  # fmt: skip
    sampled: list[int] = []

    def models(cfg: LLMConfig):
        if cfg.backend == "scripted":
            llm = ScriptedLLM(fn=unirag_script, model="teacher")
            sampled.append(id(llm))
            return llm
        return make_llm(cfg.model_copy(update={"n_parallel": 1, "deterministic": True}))

    def killed(*a, **kw):
        raise KeyboardInterrupt  # the machine went down after the export

    with pytest.raises(KeyboardInterrupt):
        PlanRun(plan, tmp_path / "loop", make_llm=models, finetune=killed, echo=lambda _: None, progress=False).run()
    stages = json.loads((tmp_path / "loop" / "plan.json").read_text())["stages"]
    assert stages["export questions-1-2"]["state"] == "done" and stages["finetune"]["state"] == "interrupted"
    sft = (tmp_path / "loop" / "sources" / "questions-1-2" / "sft.jsonl").read_text().splitlines()
    assert sft and {json.loads(x)["role"] for x in sft} <= {"unirag.planner", "unirag.reflector"}

    said: list[str] = []
    report = PlanRun(plan, tmp_path / "loop", make_llm=models, finetune=finetune, echo=said.append, progress=False).run()
    assert "[sample questions-1-2] done earlier" in "\n".join(said)  # the trajectories were not sampled again
    stages = json.loads((tmp_path / "loop" / "plan.json").read_text())["stages"]
    assert all(rec["state"] == "done" for rec in stages.values()), stages
    assert stages["finetune"]["first_loss"] > 0 and stages["finetune"]["examples"] == len(sft)
    adapter = tmp_path / "loop" / "adapters" / smoke_model.stem
    described = json.loads((adapter / "adapter.json").read_text())
    assert described["teacher"] == "teacher" and described["steps"] == 2 and described["base_file"] == smoke_model.name
    text = report.read_text()
    assert all(label in text for label in ("teacher:unirag", "student-base:unirag", "student-tuned:unirag"))
    tuned = [json.loads(x) for x in (tmp_path / "loop" / "eval" / "student-tuned" / "results.jsonl").read_text().splitlines()]
    assert len(tuned) == 1 and not tuned[0].get("error")

    other = tmp_path / "other-model.gguf"
    other.write_bytes(b"GGUF")
    with pytest.raises(LLMError, match=f"trained for .*, not {other.name}"):
        LlamaCppLLM(other, lora=adapter)
