"""A cross-encoder the user supplies as an ONNX file (plus its `tokenizer.json`): scores
(query, passage) pairs for GINGER's pointwise reranking. No cross-encoder ships with
marag (none on the reachable package registries runs offline), so this is the plug-in
point: `--set cross_encoder='{"model": "ce.onnx", "tokenizer": "tokenizer.json"}'`.

The model must take `input_ids` and `attention_mask` (and `token_type_ids` if it lists
them) as int64 [batch, length] and return logits [batch, 1] or [batch, 2] (the last
column is read as relevance), as MS MARCO cross-encoders exported to ONNX do.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from marag.errors import MaragError


class OnnxCrossEncoder:
    def __init__(self, model: str | Path, tokenizer: str | Path, max_length: int = 384, threads: int = 1):
        model, tokenizer = Path(model).expanduser(), Path(tokenizer).expanduser()
        for p, what in ((model, "cross-encoder model"), (tokenizer, "tokenizer")):
            if not p.is_file():
                raise MaragError(f"{what} not found: {p}", hint="give the path of an ONNX cross-encoder and its tokenizer.json")
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(tokenizer))
        self._tok.enable_truncation(max_length=max_length)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        self._session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= self._inputs:
            raise MaragError(f"{model} does not take input_ids and attention_mask", hint="export the cross-encoder with those inputs")

    def score(self, query: str, passages: Sequence[str], batch_size: int = 16) -> np.ndarray:
        out = np.zeros(len(passages), dtype=np.float32)
        for start in range(0, len(passages), batch_size):
            enc = self._tok.encode_batch([(query, p) for p in passages[start : start + batch_size]])
            n = max(len(e.ids) for e in enc)
            ids = np.zeros((len(enc), n), dtype=np.int64)
            mask = np.zeros_like(ids)
            types = np.zeros_like(ids)
            for i, e in enumerate(enc):
                ids[i, : len(e.ids)], mask[i, : len(e.ids)], types[i, : len(e.ids)] = e.ids, 1, e.type_ids
            feed = {"input_ids": ids, "attention_mask": mask} | ({"token_type_ids": types} if "token_type_ids" in self._inputs else {})
            logits = np.asarray(self._session.run(None, feed)[0], dtype=np.float32).reshape(len(enc), -1)
            out[start : start + len(enc)] = logits[:, -1]
        return out
