"""LoRA fine-tuning on the exported examples, on the CPU, for a small local model
(the `train` extra: torch, transformers, peft, gguf).

The base model is the GGUF file the local backend runs (SmolLM2-135M by default):
transformers reads it directly (dequantized to float32). Low-rank adapters (rank 16 by
default) go on the attention's value and output projections; the loss counts only the
agent's own reply (the exported `weight` 1 turns). Checkpoints are written every
`save_every` steps and the run resumes from the last one.

The adapter is also written as a llama.cpp LoRA GGUF (`adapter.gguf`), which the local
backend loads at inference: `--llm llamacpp` with `lora=PATH` in the LLM config
(`LLMConfig(lora="runs/train-X/lora/adapter.gguf")`). Value and output projections are
stored in GGUF as in Hugging Face checkpoints (unlike the query and key projections,
which llama.cpp permutes), so their adapters carry over unchanged.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

from marag.errors import MaragError

TARGETS = ("v_proj", "o_proj")
_GGUF_NAMES = {"v_proj": "attn_v", "o_proj": "attn_output"}


def _imports():
    try:
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise MaragError(
            f"fine-tuning needs the train extra ({exc.name} is missing)",
            hint="pip install 'marag[train]'  (torch, transformers, peft, gguf; CPU wheels)",
        ) from None
    return torch, LoraConfig, get_peft_model, AutoModelForCausalLM, AutoTokenizer


def _encode(tok, messages: list[dict[str, Any]], max_len: int) -> tuple[list[int], list[int]] | None:
    """Token ids and labels (-100 except on the trained reply) of one example."""
    chat = [{"role": m["role"], "content": m["content"]} for m in messages]
    prompt = tok.apply_chat_template(chat[:-1], tokenize=True, add_generation_prompt=True)
    full = tok.apply_chat_template(chat, tokenize=True)
    prompt, full = list(getattr(prompt, "input_ids", prompt)), list(getattr(full, "input_ids", full))
    if len(full) > max_len or full[: len(prompt)] != prompt or len(full) == len(prompt):
        return None
    return full, [-100] * len(prompt) + full[len(prompt) :]


def prepare_out(out: Path, fingerprint: dict[str, Any], fresh: bool = False) -> None:
    """Make `out` ready for a run with `fingerprint`: keep its checkpoints when they
    come from the same run, clear them when `fresh`, refuse otherwise."""
    stamp = out / "run.json"
    old = [p for p in out.glob("checkpoint-*") if p.is_dir()] if out.is_dir() else []
    if old and fresh:
        for p in old:
            shutil.rmtree(p)
    elif old and (not stamp.exists() or json.loads(stamp.read_text(encoding="utf-8")) != fingerprint):
        raise MaragError(
            f"{out} holds checkpoints of another fine-tuning run (other examples or settings)",
            hint="pass --fresh to start over (the checkpoints are deleted), or move that folder away",
        )
    out.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_suffix(".tmp")
    tmp.write_text(json.dumps(fingerprint, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(stamp)


def finetune(
    sft: str | Path, out: str | Path, model_path: str | Path | None = None, steps: int = 40, rank: int = 16,
    lr: float = 2e-4, batch: int = 4, max_len: int = 1024, save_every: int = 20, seed: int = 0, progress: bool = True,
    fresh: bool = False,
) -> dict[str, Any]:  # fmt: skip
    from marag.llm.llamacpp import default_model_path

    gguf = Path(model_path) if model_path else default_model_path()
    out = Path(out)
    if not Path(sft).is_file():
        raise MaragError(f"no examples at {sft}", hint="export first: `marag train export --dir DIR`")
    # Steps are left out on purpose: asking for more steps extends the same run.
    prepare_out(out, {"examples_sha256": hashlib.sha256(Path(sft).read_bytes()).hexdigest(), "model": str(gguf.resolve()),
                      "rank": rank, "lr": lr, "batch": batch, "max_len": max_len, "seed": seed}, fresh)  # fmt: skip
    torch, LoraConfig, get_peft_model, AutoModelForCausalLM, AutoTokenizer = _imports()
    from tqdm.auto import tqdm

    torch.manual_seed(seed)
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, torch_dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=list(TARGETS), task_type="CAUSAL_LM"))
    rows = [json.loads(line) for line in Path(sft).read_text(encoding="utf-8").splitlines() if line.strip()]
    data = [enc for r in rows if (enc := _encode(tok, r["messages"], max_len))]
    if not data:
        raise MaragError(f"no usable examples in {sft}", hint="export first (`marag train export`), or raise max_len")
    start = 0
    last = sorted(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    if last:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(model, load_file(str(last[-1] / "adapter_model.safetensors")))
        start = int(last[-1].name.split("-")[1])
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    rng = random.Random(seed)
    for _ in range(start * batch):  # a resumed run draws the batches an uninterrupted one would
        rng.randrange(len(data))
    losses: list[float] = []
    model.train()
    bar = tqdm(range(start, steps), desc="finetune", unit="step", disable=not progress)
    for step in bar:
        picked = [data[rng.randrange(len(data))] for _ in range(batch)]
        width = max(len(ids) for ids, _ in picked)
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in picked])
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in picked])
        mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in picked])
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        if (step + 1) % save_every == 0 or step + 1 == steps:
            model.save_pretrained(str(out / f"checkpoint-{step + 1}"))
    model.save_pretrained(str(out / "adapter"))
    adapter = write_gguf_adapter(model, out / "adapter.gguf", rank)
    return {"examples": len(data), "steps": steps, "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
            "seconds": round(time.perf_counter() - t0, 1), "adapter": str(adapter)}  # fmt: skip


def write_gguf_adapter(model, path: Path, rank: int) -> Path:
    """The LoRA weights as a llama.cpp adapter GGUF (lora_a / lora_b per projection)."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(2 * rank))
    for name, module in model.named_modules():
        for proj, gname in _GGUF_NAMES.items():
            if name.endswith(f"self_attn.{proj}") and hasattr(module, "lora_A"):
                layer = int(name.split("layers.")[1].split(".")[0])
                a = module.lora_A["default"].weight.detach().float().numpy()  # (r, in)
                b = module.lora_B["default"].weight.detach().float().numpy()  # (out, r)
                writer.add_tensor(f"blk.{layer}.{gname}.weight.lora_a", np.ascontiguousarray(a))
                writer.add_tensor(f"blk.{layer}.{gname}.weight.lora_b", np.ascontiguousarray(b))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
