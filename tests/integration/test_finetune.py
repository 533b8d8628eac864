"""LoRA fine-tuning of the local model (`marag train finetune`) and the adapter it
writes, loaded by llama.cpp: the training loss falls, the tuned role answers differently
from the base model, and a role the adapter was not trained for stays on the base
weights in the same llama.cpp instance."""

from __future__ import annotations

import asyncio
import json

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
