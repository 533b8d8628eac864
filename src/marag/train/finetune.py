"""LoRA fine-tuning on the exported examples, on the CPU, for a small local model
(the `train` extra: torch, transformers, peft, gguf).

The base model is the GGUF file the local backend runs (the catalogue default, Qwen2.5 1.5B, unless named; any
llama.cpp model transformers can read, e.g. Qwen2.5's Qwen2 architecture): transformers
reads it directly (dequantized to float32). Low-rank adapters (rank 16 by default) go on
the attention's value and output projections; the loss counts only the agent's own reply
(the exported `weight` 1 turns). Checkpoints (adapter, optimizer state, losses) are
written every `save_every` steps and the run resumes from the last one exactly where it
stopped.

The adapter is also written as a llama.cpp LoRA GGUF (`adapter.gguf`, tagged with the
base model's architecture), which the local backend loads at inference: `--lora PATH`
(`LLMConfig(lora=...)`). Beside it `adapter.json` names the roles the adapter is for
(the trainable roles): the backend applies it to those roles' calls only and keeps the
others (the answerer) on the base weights (see `marag.llm.llamacpp`). Value and output
projections are stored in GGUF as in Hugging Face checkpoints (unlike the query and key
projections, which llama.cpp permutes), so their adapters carry over unchanged.
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
    fresh: bool = False, roles: list[str] | None = None, provenance: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """LoRA on `sft` (the exported examples) over the GGUF model at `model_path`; writes
    checkpoints (adapter + optimizer state) to `out`, the final adapter as `adapter.gguf`
    and beside it `adapter.json`, which names the roles it is for (`roles`: the trainable
    roles; default, the roles of the examples), so the local backend applies it to those
    roles only. `provenance` (the teacher, the questions the examples came from) is
    recorded in adapter.json beside what the run itself knows (base model, steps, loss)."""
    from marag.llm.models import catalogue_entry_for, resolve_model_file

    out = Path(out)
    if not Path(sft).is_file():
        raise MaragError(f"no examples at {sft}", hint="export first: `marag train export --dir DIR`")
    gguf = resolve_model_file(model_path)
    # Steps are left out on purpose: asking for more steps extends the same run.
    prepare_out(out, {"examples_sha256": hashlib.sha256(Path(sft).read_bytes()).hexdigest(), "model": str(gguf.resolve()),
                      "rank": rank, "lr": lr, "batch": batch, "max_len": max_len, "seed": seed}, fresh)  # fmt: skip
    torch, LoraConfig, get_peft_model, AutoModelForCausalLM, AutoTokenizer = _imports()

    torch.manual_seed(seed)
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, **_float32(torch))
    model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=list(TARGETS), task_type="CAUSAL_LM"))
    rows = [json.loads(line) for line in Path(sft).read_text(encoding="utf-8").splitlines() if line.strip()]
    data = [enc for r in rows if (enc := _encode(tok, r["messages"], max_len))]
    if not data:
        raise MaragError(f"no usable examples in {sft}", hint="export first (`marag train export`), or raise max_len")
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    result = train_lora(model, data, out, steps=steps, lr=lr, batch=batch, save_every=save_every, seed=seed, pad=pad, progress=progress)
    model.save_pretrained(str(out / "adapter"))
    arch = gguf_architecture(gguf)
    adapter = write_gguf_adapter(model, out / "adapter.gguf", rank, arch)
    trained = sorted({r.get("role") for r in rows if r.get("role")})
    entry = catalogue_entry_for(gguf)
    # the base model by catalogue name and file name: `--lora` refuses the adapter on any
    # other model (marag.llm.llamacpp.check_adapter_base)
    sidecar = {"roles": sorted(roles) if roles else trained, "trained_roles": trained, "model": entry.name if entry else None,
               "base_file": gguf.name, "base_model": str(gguf.resolve()), "architecture": arch, "rank": rank, "lr": lr,
               "batch": batch, "steps": steps, "examples": len(data),
               "examples_sha256": hashlib.sha256(Path(sft).read_bytes()).hexdigest(),
               "first_loss": result.get("first_loss"), "last_loss": result.get("last_loss"), **(provenance or {})}  # fmt: skip
    adapter.with_suffix(".json").write_text(json.dumps(sidecar, indent=1), encoding="utf-8")
    return {"examples": len(data), "examples_too_long": len(rows) - len(data), **result, "seconds": round(time.perf_counter() - t0, 1), "adapter": str(adapter),
            "adapter_bytes": adapter.stat().st_size, "architecture": arch, "roles": sidecar["roles"]}  # fmt: skip


def _float32(torch) -> dict[str, Any]:
    """The keyword that asks transformers for float32 weights (`dtype` since 4.56)."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": torch.float32}


def _checkpoints(out: Path) -> list[Path]:
    found = [p for p in out.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[1].isdigit()]  # not a torn "*.tmp"
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def train_lora(
    model, data: list[tuple[list[int], list[int]]], out: Path, steps: int, lr: float = 2e-4, batch: int = 4,
    save_every: int = 20, seed: int = 0, pad: int = 0, progress: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """The optimizer loop over encoded examples (token ids, labels) for a peft model.

    Every `save_every` steps (and at the last) a checkpoint holds the adapter, the
    optimizer's state (AdamW's moments and step counts) and the losses so far, so a run
    resumed from it continues exactly as an uninterrupted one would: the same weights,
    the same optimizer state, the same batches drawn next."""
    import torch
    from tqdm.auto import tqdm

    start, losses, restored = 0, [], None
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    if last := _checkpoints(Path(out)):
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(model, load_file(str(last[-1] / "adapter_model.safetensors")))
        start = int(last[-1].name.split("-")[1])
        if (last[-1] / "optimizer.pt").is_file():
            opt.load_state_dict(torch.load(last[-1] / "optimizer.pt", weights_only=True))
            restored = True
        else:  # a checkpoint written before optimizer state was kept: the moments start over
            restored = False
        if (last[-1] / "state.json").is_file():
            losses = json.loads((last[-1] / "state.json").read_text(encoding="utf-8")).get("losses", [])
    rng = random.Random(seed)
    for _ in range(start * batch):  # a resumed run draws the batches an uninterrupted one would
        rng.randrange(len(data))
    model.train()
    bar = tqdm(range(start, steps), desc="finetune", unit="step", disable=not progress)
    for step in bar:
        picked = [data[rng.randrange(len(data))] for _ in range(batch)]
        width = max(len(ids) for ids, _ in picked)
        ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in picked])
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in picked])
        mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in picked])
        loss = reply_loss(model, ids, mask, labels)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        if (step + 1) % save_every == 0 or step + 1 == steps:
            save_checkpoint(model, opt, Path(out) / f"checkpoint-{step + 1}", losses)
    return {"steps": steps, "resumed_from": start, "optimizer_restored": restored,
            "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None}  # fmt: skip


# architectures whose logits are lm_head(last hidden state) and whose loss is the
# cross-entropy alone (no logit scale or soft cap, no auxiliary router loss)
PLAIN_OUTPUT = frozenset({"llama", "qwen2", "qwen3", "mistral"})


def reply_loss(model, ids, mask, labels):
    """The causal LM loss over the labelled tokens (the agent's own reply), with the
    vocabulary's logits computed at those positions only.

    The model's own loss computes logits for every position of every example first: with
    Qwen's 152k-token vocabulary that is 4 x 1,024 x 152k floats a batch, ~2.5 GB, kept
    again for its softmax and gradient, for prompts that carry no loss (a reply is ~5-15%
    of an example's tokens). The mean cross-entropy over the same tokens is the same
    number. Only architectures whose logits are the output layer's product of the last
    hidden state take this path (others scale, cap or add losses: the model's own)."""
    import torch

    causal = model.get_base_model() if hasattr(model, "get_base_model") else model
    targets = labels[:, 1:]  # position t predicts token t + 1
    keep = targets != -100
    if not keep.any():  # _encode keeps only examples with a reply: a batch without one is a bug
        raise ValueError("a training batch without any labelled token")
    if causal.config.model_type not in PLAIN_OUTPUT:
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss
    hidden = causal.get_decoder()(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    logits = causal.get_output_embeddings()(hidden[:, :-1][keep]).float()
    return torch.nn.functional.cross_entropy(logits, targets[keep])


def save_checkpoint(model, opt, path: Path, losses: list[float]) -> None:
    """Adapter, optimizer state and losses, written to a temporary folder and renamed,
    so an interrupted save never leaves a half checkpoint to resume from."""
    import torch

    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    torch.save(opt.state_dict(), tmp / "optimizer.pt")
    (tmp / "state.json").write_text(json.dumps({"step": int(path.name.split("-")[1]), "losses": losses}), encoding="utf-8")
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


def gguf_architecture(path: Path) -> str:
    """`general.architecture` of a GGUF model (llama, qwen2, ...): llama.cpp loads an
    adapter only for a model of its own architecture."""
    import gguf

    return str(gguf.GGUFReader(str(path)).fields["general.architecture"].contents())


def write_gguf_adapter(model, path: Path, rank: int, arch: str = "llama") -> Path:
    """The LoRA weights as a llama.cpp adapter GGUF (lora_a / lora_b per projection) for
    a base model of architecture `arch`."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), arch=arch)
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
