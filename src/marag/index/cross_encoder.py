"""A cross-encoder reranking model as an ONNX file plus its `tokenizer.json`: scores
(query, passage) pairs by reading both together (GINGER's pointwise step; the
`cross_encoder` reranker of `marag.index.rerank` for any strategy).

No cross-encoder ships with marag: none of the packages on the registries marag installs
from carries one it can run offline (FlashRank and the like download their ONNX files
from a model hub on first use; the packaged "rerankers" that do ship weights are not
cross-encoders). So the user supplies one, once:

- a directory holding `model.onnx` (or `onnx/model.onnx`, as model hubs lay it out) and
  `tokenizer.json`, named by the environment variable `MARAG_CROSS_ENCODER`: then
  `get_reranker("cross_encoder")` and `ginger_paper` find it with no further setting;
- or explicit paths: `get_reranker("cross_encoder", model="ce.onnx", tokenizer="tokenizer.json")`,
  GINGER's `--set 'cross_encoder={"model": "ce.onnx", "tokenizer": "tokenizer.json"}'`.

For example the MS MARCO MiniLM-L6 cross-encoder (`cross-encoder/ms-marco-MiniLM-L6-v2`),
downloaded on a machine with hub access: its repository has ONNX exports under `onnx/`,
or `optimum-cli export onnx --model cross-encoder/ms-marco-MiniLM-L6-v2 --task
text-classification ce/` writes `ce/model.onnx` and `ce/tokenizer.json`.

The model must take `input_ids` and `attention_mask` (and `token_type_ids` if it lists
them) as int64 [batch, length] and return logits [batch, 1] or [batch, 2] (the last
column is read as relevance), as MS MARCO cross-encoders exported to ONNX do.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from marag.errors import MaragError
from marag.index.base import Hit

CROSS_ENCODER_ENV = "MARAG_CROSS_ENCODER"
SUPPLY_HINT = (
    f"set {CROSS_ENCODER_ENV}=DIR (a directory with model.onnx or onnx/model.onnx, and tokenizer.json), "
    "or give the paths (cross_encoder={\"model\": \"ce.onnx\", \"tokenizer\": \"tokenizer.json\"}); "
    "see marag.index.cross_encoder"
)


def installed_cross_encoder() -> dict[str, str] | None:
    """The cross-encoder the user installed (`$MARAG_CROSS_ENCODER`), as {"model",
    "tokenizer"} paths, or None when none is."""
    root = os.environ.get(CROSS_ENCODER_ENV, "").strip()
    if not root:
        return None
    d = Path(root).expanduser()
    model = next((p for p in (d / "model.onnx", d / "onnx" / "model.onnx") if p.is_file()), None)
    tokenizer = d / "tokenizer.json"
    if model is None or not tokenizer.is_file():
        raise MaragError(f"{CROSS_ENCODER_ENV}={root} holds no model.onnx (or onnx/model.onnx) and tokenizer.json", hint=SUPPLY_HINT)
    return {"model": str(model), "tokenizer": str(tokenizer)}


class OnnxCrossEncoder:
    name = "cross_encoder"

    def __init__(self, model: str | Path, tokenizer: str | Path, max_length: int = 384, threads: int = 1):
        model, tokenizer = Path(model).expanduser(), Path(tokenizer).expanduser()
        for p, what in ((model, "cross-encoder model"), (tokenizer, "tokenizer")):
            if not p.is_file():
                raise MaragError(f"{what} not found: {p}", hint="give the path of an ONNX cross-encoder and its tokenizer.json")
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.model_path = str(model)
        self._tok = Tokenizer.from_file(str(tokenizer))
        self._tok.enable_truncation(max_length=max_length)
        self._tok.no_padding()  # each batch is padded to its longest pair below, pads masked out
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        self._session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= self._inputs:
            raise MaragError(f"{model} does not take input_ids and attention_mask", hint="export the cross-encoder with those inputs")

    def score(self, query: str, passages: Sequence[str], batch_size: int = 16) -> np.ndarray:
        """Relevance of each passage to `query` (higher is more relevant)."""
        out = np.zeros(len(passages), dtype=np.float32)
        for start in range(0, len(passages), batch_size):
            enc = self._tok.encode_batch([(query, p) for p in passages[start : start + batch_size]])
            n = max(len(e.ids) for e in enc)
            ids = np.zeros((len(enc), n), dtype=np.int64)
            mask = np.zeros_like(ids)
            types = np.zeros_like(ids)
            for i, e in enumerate(enc):
                ids[i, : len(e.ids)], mask[i, : len(e.ids)], types[i, : len(e.ids)] = e.ids, e.attention_mask, e.type_ids
            feed = {"input_ids": ids, "attention_mask": mask} | ({"token_type_ids": types} if "token_type_ids" in self._inputs else {})
            logits = np.asarray(self._session.run(None, feed)[0], dtype=np.float32).reshape(len(enc), -1)
            out[start : start + len(enc)] = logits[:, -1]
        return out

    def rerank(self, query: str, hits: Sequence[Hit], k: int | None = None) -> list[Hit]:
        """`hits` ordered by the model's relevance (ties keep their order), the top `k`,
        each carrying its relevance as its score."""
        if not hits:
            return []
        scores = self.score(query, [f"{h.title}\n{h.text}" if h.title else h.text for h in hits])
        order = sorted(range(len(hits)), key=lambda i: (-float(scores[i]), i))
        return [hits[i].model_copy(update={"score": float(scores[i])}) for i in order[: k or len(hits)]]
