"""Text embedders for dense retrieval: a protocol, a registry and two built-ins.

- `minilm` (default): all-MiniLM-L6-v2, int8 ONNX, run with onnxruntime; mean pooling
  over the attention mask, L2-normalised, 384 dims. It reads 256 tokens; `embed_windows`
  covers longer texts with several windows. Its file is the catalogue model
  `minilm-int8`, pulled at set-up (`marag models pull minilm-int8`) into the models
  folder and checked here against the sha256 pinned in marag/resources/minilm/model.json.
- `wordllama` (optional extra `fast-embed`): static token embeddings averaged, 256 dims;
  about 100x faster than MiniLM on a CPU (3,500 vs 32 passages/s of ~85 words on two
  shared cores) and weaker, for corpora too large to encode with MiniLM.
- `hashing`: signed feature hashing of words; no model at all. For tests and examples.

Every embedder returns float32 rows of unit length (an all-zero row for a text with no
usable tokens), so a dot product is the cosine similarity. An embedder with an input
limit may also offer `embed_windows(texts, overlap)` -> (vectors, starts): several
vectors per text that together read all of it (see `marag.index.dense`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from marag.config import models_dir
from marag.errors import MaragError
from marag.registry import Registry


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: Sequence[str], batch_size: int = 32, progress: bool = False) -> np.ndarray:
        """float32 array (len(texts), dim), rows L2-normalised."""
        ...


EMBEDDERS: Registry[Callable[..., Embedder]] = Registry("embedders")

# The catalogue name of its ONNX file (marag.llm.models registers it from the same pin).
MINILM_MODEL = "minilm-int8"
# Pinned hash of the bundled tokenizer (see marag/resources/minilm/NOTICE.md).
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"


def _minilm_resource(name: str):
    return resources.files("marag").joinpath("resources", "minilm", name)


def minilm_model_file() -> tuple[Path, str]:
    """Where the pulled MiniLM ONNX file is and the sha256 it must have. Read from the
    pin the model catalogue registers it by (the index port may not import the LLM
    port's store), so `marag models pull` and this check name the same bytes."""
    pin = json.loads(_minilm_resource("model.json").read_text(encoding="utf-8"))
    return models_dir() / pin["file"], pin["sha256"]


_verified: set[tuple[str, str]] = set()
_verified_lock = threading.Lock()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_sha256(path: Path, expected: str, what: str, hint: str) -> None:
    """Raise unless `path` hashes to `expected`; each (path, hash) is checked once per process."""
    key = (str(path), expected)
    with _verified_lock:
        if key in _verified:
            return
        if not path.is_file():
            raise MaragError(f"{what} not found at {path}", hint=hint)
        actual = sha256_file(path)
        if actual != expected:
            raise MaragError(f"{what} at {path} has sha256 {actual}, expected {expected}", hint=hint)
        _verified.add(key)


def normalize_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def similarity_to(embedder: "Embedder", text: str, vectors: np.ndarray) -> np.ndarray:
    """Cosine similarity of `text` to each row of `vectors` (rows of any length; an
    all-zero row scores 0): how routing, reranking and facet ranking compare a query
    with stored or freshly embedded texts."""
    q = normalize_rows(np.asarray(embedder.embed([text]), dtype=np.float32))[0]
    return normalize_rows(vectors) @ q


def _batches(order: np.ndarray, batch_size: int, progress: bool, desc: str):
    from tqdm.auto import tqdm

    starts = range(0, len(order), batch_size)
    bar = tqdm(total=len(order), desc=desc, unit="text", disable=not progress, leave=False)
    try:
        for s in starts:
            idx = order[s : s + batch_size]
            yield idx
            bar.update(len(idx))
    finally:
        bar.close()


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")


@EMBEDDERS.register("minilm")
class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX). `threads` = onnxruntime intra-op threads."""

    name = "minilm"
    dim = 384
    max_length = 256

    def __init__(self, threads: int = 2, max_length: int = 256, spin: bool = True):
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise MaragError(
                f"the minilm embedder needs a package that is not installed ({exc.name})",
                hint="pip install onnxruntime tokenizers",
            ) from None
        model_path, model_sha256 = minilm_model_file()
        # Never fetched here: a pull is a network download, done at set-up or when asked,
        # not in the middle of `marag index` or a search.
        if not model_path.is_file():
            raise MaragError(
                f"the minilm embedder's model ({MINILM_MODEL}) is not pulled: no {model_path}",
                hint=f"run `marag models pull {MINILM_MODEL}` (`make setup` does)",
            )
        verify_sha256(model_path, model_sha256, "MiniLM ONNX model",
                      hint=f"pull it again: marag models pull --force {MINILM_MODEL}")  # fmt: skip
        self.model_sha256: str = model_sha256
        tok_res = _minilm_resource("tokenizer.json")
        with resources.as_file(tok_res) as tok_path:
            verify_sha256(
                Path(tok_path),
                MINILM_TOKENIZER_SHA256,
                "MiniLM tokenizer",
                hint="reinstall marag; the file ships in marag/resources/minilm/",
            )
            self._tokenizer = Tokenizer.from_file(str(tok_path))
        self.max_length = max_length
        self._tokenizer.enable_truncation(max_length=max_length)
        self._tokenizer.no_padding()  # batches are padded here, to their own longest text
        self._whole_tokenizer: Any = None  # untruncated copy for embed_windows, made on first use
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        if not spin:
            # idle onnxruntime workers otherwise busy-wait for the next batch, taking cores
            # from llama.cpp between the few queries an agent embeds (benchmarks/threads.py)
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - self._inputs
        if missing:
            raise MaragError(
                f"MiniLM ONNX model at {model_path} lacks inputs {sorted(missing)}",
                hint=f"pull it again: marag models pull --force {MINILM_MODEL}",
            )
        self.threads = threads

    def info(self) -> dict[str, Any]:
        import onnxruntime

        return {
            "name": self.name,
            "dim": self.dim,
            "model_sha256": self.model_sha256,
            "max_length": self.max_length,
            "onnxruntime": onnxruntime.__version__,
        }

    def embed(self, texts: Sequence[str], batch_size: int = 32, progress: bool = False) -> np.ndarray:
        """One vector per text, from its first `max_length` tokens ([CLS] and [SEP] included)."""
        _check_batch_size(batch_size)
        encodings = self._tokenizer.encode_batch(list(texts))
        return self._run([e.ids for e in encodings], batch_size, progress)

    def embed_windows(
        self, texts: Sequence[str], overlap: int, batch_size: int = 32, progress: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Vectors of every text read whole: each text is cut into windows of up to
        `max_length - 2` tokens (room for [CLS] and [SEP]) overlapping by `overlap`
        tokens. Returns (vectors, starts): text i's windows are rows starts[i] ..
        starts[i+1]-1. A text that fits gets one window, with exactly `embed`'s vector.

        Windows are cut from the token ids, not re-tokenised from text, so a window
        never exceeds the model's limit however its edges fall inside words."""
        _check_batch_size(batch_size)
        size = self.max_length - 2
        if not 0 <= overlap < size:
            raise ValueError(f"window overlap must be in 0..{size - 1} tokens, got {overlap}")
        if self._whole_tokenizer is None:
            from tokenizers import Tokenizer

            whole = Tokenizer.from_str(self._tokenizer.to_str())
            whole.no_truncation()
            self._whole_tokenizer = whole
        cls_id, sep_id = self._tokenizer.token_to_id("[CLS]"), self._tokenizer.token_to_id("[SEP]")
        windows: list[list[int]] = []
        counts = []
        for e in self._whole_tokenizer.encode_batch(list(texts), add_special_tokens=False):
            spans = token_windows(len(e.ids), size, overlap)
            windows += [[cls_id, *e.ids[a:b], sep_id] for a, b in spans]
            counts.append(len(spans))
        starts = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        return self._run(windows, batch_size, progress), starts

    def _run(self, id_lists: list[list[int]], batch_size: int, progress: bool) -> np.ndarray:
        """Mean-pooled, L2-normalised model outputs for token id sequences (specials included)."""
        out = np.zeros((len(id_lists), self.dim), dtype=np.float32)
        if not id_lists:
            return out
        lengths = np.array([len(ids) for ids in id_lists])
        # Batches of similar length waste little compute on padding (2-3x faster on
        # passages of mixed length); a stable sort keeps the result deterministic.
        order = np.argsort(lengths, kind="stable")
        for idx in _batches(order, batch_size, progress, "embedding (minilm)"):
            width = int(lengths[idx].max())
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, j in enumerate(idx):
                ids[row, : lengths[j]] = id_lists[j]
                mask[row, : lengths[j]] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)  # single segment
            hidden = self._session.run(None, feeds)[0]  # (batch, width, dim)
            m = mask[..., None].astype(np.float32)
            out[idx] = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
        return normalize_rows(out)


def token_windows(n_tokens: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """[start, end) of the fewest windows of `size` tokens that cover `n_tokens` with
    neighbours sharing at least `overlap` tokens, spread evenly: every window is full
    (as much context as the model takes), rather than a last window of a few leftover
    tokens. Fewer than `size` tokens (even zero) make one window."""
    if n_tokens <= size:
        return [(0, n_tokens)]
    count = -(-(n_tokens - overlap) // (size - overlap))  # ceil division
    starts = [i * (n_tokens - size) // (count - 1) for i in range(count)]  # integers: the last is exact
    return [(a, a + size) for a in starts]


def _import_wordllama():
    """Import wordllama without letting it reconfigure the application's logging
    (its inference module calls logging.basicConfig at import time)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        import wordllama
        from wordllama import WordLlama
    except ImportError:
        raise MaragError(
            "the wordllama embedder needs the optional package 'wordllama'",
            hint="pip install 'marag[fast-embed]'  (or: pip install wordllama)",
        ) from None
    finally:
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
        root.setLevel(level)
    return wordllama, WordLlama


@EMBEDDERS.register("wordllama")
class WordLlamaEmbedder:
    """WordLlama `l2_supercat`, 256 dims, loaded from the files inside its wheel
    (never downloads)."""

    name = "wordllama"
    dim = 256

    def __init__(self, config: str = "l2_supercat"):
        wordllama, WordLlama = _import_wordllama()
        package_dir = Path(wordllama.__file__).parent
        try:
            self._model = WordLlama.load(
                config=config, dim=self.dim, cache_dir=package_dir, disable_download=True
            )
        except FileNotFoundError as exc:
            raise MaragError(
                f"wordllama's bundled weights were not found ({exc})",
                hint="reinstall it: pip install --force-reinstall wordllama",
            ) from None
        weights = package_dir / "weights" / f"{config}_{self.dim}.safetensors"
        self.model_sha256: str | None = sha256_file(weights) if weights.is_file() else None
        self.version: str = getattr(wordllama, "__version__", "unknown")

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dim": self.dim,
            "model_sha256": self.model_sha256,
            "wordllama": self.version,
        }

    def embed(self, texts: Sequence[str], batch_size: int = 256, progress: bool = False) -> np.ndarray:
        _check_batch_size(batch_size)
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        order = np.argsort([len(t) for t in texts], kind="stable")
        for idx in _batches(order, batch_size, progress, "embedding (wordllama)"):
            vecs = self._model.embed([texts[j] for j in idx], norm=False, batch_size=len(idx))
            out[idx] = np.nan_to_num(vecs)  # a text without tokens pools to 0/0
        return normalize_rows(out)


@EMBEDDERS.register("hashing")
class HashingEmbedder:
    """Signed feature hashing of lower-cased words: no model, no dependencies,
    deterministic across processes. Lexical only (no synonyms); meant for tests and
    examples that need a dense index without loading a network."""

    name = "hashing"
    model_sha256 = None

    def __init__(self, dim: int = 256):
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.dim = dim

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "dim": self.dim, "model_sha256": None}

    def _bucket(self, word: str) -> tuple[int, float]:
        h = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
        return h % self.dim, (1.0 if (h >> 63) & 1 else -1.0)

    def embed(self, texts: Sequence[str], batch_size: int = 1024, progress: bool = False) -> np.ndarray:
        import re

        _check_batch_size(batch_size)
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        cache: dict[str, tuple[int, float]] = {}
        for idx in _batches(np.arange(len(texts)), batch_size, progress, "embedding (hashing)"):
            for i in idx:
                for word in re.findall(r"\w+", texts[i].lower()):
                    b = cache.get(word) or cache.setdefault(word, self._bucket(word))
                    out[i, b[0]] += b[1]
        return normalize_rows(out)


def get_embedder(name: str, **options: Any) -> Embedder:
    """An embedder by registry name, e.g. `get_embedder("minilm", threads=2)`."""
    return EMBEDDERS.get(name)(**options)


def embedder_info(embedder: Embedder) -> dict[str, Any]:
    info = getattr(embedder, "info", None)
    if callable(info):
        return info()
    return {
        "name": embedder.name,
        "dim": embedder.dim,
        "model_sha256": getattr(embedder, "model_sha256", None),
    }
