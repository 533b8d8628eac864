"""LoRA fine-tuning of the local model (`marag train finetune`) and the adapter it
writes, loaded by llama.cpp: the training loss falls and the tuned model answers
differently from the base model."""

from __future__ import annotations

import asyncio
import json

import pytest

from marag.errors import LLMError
from marag.llm import make_llm
from marag.llm.llamacpp import default_model_path

pytestmark = pytest.mark.integration


def _example(question: str, answer: str) -> dict:
    return {"role": "answerer", "qid": question, "messages": [
        {"role": "system", "content": "Answer in JSON.", "weight": 0},
        {"role": "user", "content": question, "weight": 0},
        {"role": "assistant", "content": json.dumps({"answer": answer}), "weight": 1},
    ]}  # fmt: skip


def test_a_few_lora_steps_give_an_adapter_llama_cpp_applies(tmp_path):
    pytest.importorskip("peft", reason="fine-tuning needs the train extra: pip install torch==2.13.0 'marag[train]'")
    try:
        default_model_path()
    except LLMError as exc:
        pytest.skip(exc.message)
    from marag.train.finetune import finetune

    sft = tmp_path / "sft.jsonl"
    sft.write_text("\n".join(json.dumps(_example(q, a)) for q, a in [("Capital of France?", "Paris"), ("Capital of Italy?", "Rome")]))
    out = finetune(sft, tmp_path / "lora", steps=3, rank=4, lr=1e-3, batch=2, progress=False)
    assert out["examples"] == 2 and out["last_loss"] < out["first_loss"]
    assert (tmp_path / "lora" / "checkpoint-3").is_dir()  # a resumable checkpoint

    def reply(**kw) -> str:
        llm = make_llm("llamacpp", threads=2, deterministic=True, **kw)
        try:
            return asyncio.run(llm.generate([{"role": "user", "content": "Capital of France?"}], max_tokens=20)).text
        finally:
            llm.close()

    base, tuned = reply(), reply(lora=out["adapter"])
    assert tuned.strip() and tuned != base
