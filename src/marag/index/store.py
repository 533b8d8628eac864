"""Index directories: build one atomically, open one lazily (`DirectoryIndex`, an
`Index` of the port, `marag.index.base`).

Layout of `marag index DOCS --out IDX`:

    IDX/manifest.json   format version, marag and library versions, config, corpus hash,
                        counts, what each part recorded when it was built
    IDX/chunks.jsonl    one Chunk per line, in index order (positions are line numbers)
    IDX/bm25/           bm25s files (marag.index.bm25)
    IDX/dense/          vectors.npy, starts.npy, dense.json, hnsw.faiss (marag.index.dense)

A build writes into a hidden sibling directory and renames it into place, so `IDX` is
either the complete old index or the complete new one, never a half-written mix.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tempfile
import threading
import uuid
from collections import Counter
from datetime import datetime, timezone
from functools import cached_property
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from pydantic import ValidationError

import marag
from marag.corpus.models import Chunk, Document
from marag.errors import CorpusError, IndexFormatError, UnknownNameError
from marag.index.base import ClosingIndex, Retriever
from marag.index.config import IndexConfig
from marag.index.embed import EMBEDDERS
from marag.index.kinds import HYBRID, RETRIEVERS

MANIFEST = "manifest.json"
CHUNKS = "chunks.jsonl"
# The on-disk layout this code reads and writes; an index written with another version
# is refused with a message that says to rebuild it. The index layer owns it, since
# only this layer's files change with it.
#   1: one dense vector per chunk
#   2: dense vectors per window of a chunk, with dense/starts.npy mapping them to chunks
INDEX_FORMAT_VERSION = 2

__all__ = ["INDEX_FORMAT_VERSION", "IndexConfig", "DirectoryIndex", "build_index", "open_directory", "corpus_hash"]


def corpus_hash(documents: Iterable[Document | Chunk]) -> str:
    """sha256 over each document's id, title and text, in order. Length-prefixed, so no
    two different corpora can produce the same byte stream."""
    h = hashlib.sha256()
    for d in documents:
        for field in (d.id, d.title, d.text):
            b = field.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return h.hexdigest()


def _rebuild_hint(path: Path) -> str:
    return f"rebuild it with `marag index DOCS --out {path} --overwrite`"


def _lib_version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _collection_of(chunk: Chunk, field: str | None) -> str | None:
    if field is None:
        return None
    if field not in chunk.metadata or chunk.metadata[field] in (None, ""):
        raise CorpusError(
            f"chunk {chunk.id!r} has no metadata field {field!r}, which names its collection",
            hint=f"give every document a {field!r} metadata value, or build without a collection field",
        )
    return str(chunk.metadata[field])


def _check_chunks(chunks: Sequence[Chunk], config: IndexConfig) -> list[str | None]:
    if not chunks:
        raise CorpusError("there are no chunks to index", hint="check that DOCS holds documents with text")
    seen: set[str] = set()
    for c in chunks:
        if c.id in seen:
            raise CorpusError(
                f"chunk id {c.id!r} occurs twice", hint="document ids must be unique in a corpus"
            )
        seen.add(c.id)
    return [_collection_of(c, config.collection_field) for c in chunks]


def _check_config(config: IndexConfig) -> None:
    """Fail on bad names and missing optional packages before any heavy work."""
    for kind in config.retrievers:
        RETRIEVERS.get(kind)
    if "dense" in config.retrievers:
        EMBEDDERS.get(config.embedder)
        if config.ann == "hnsw":
            from marag.index.dense import import_faiss

            import_faiss()


def _restore_aside(out: Path) -> bool:
    """Put back an index `_replace_dir` moved aside when the process died between its two
    renames (a kill in that instant leaves no `out`, only `.NAME.old-*` beside it). Only a
    finished index (one with a manifest) is restored, the newest if several. True if one was."""
    if out.exists() or not out.parent.is_dir():
        return False
    # (a prefix, not a glob: an index name may hold [ ] ? *)
    aside = [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.old-") and (p / MANIFEST).is_file()]
    if not aside:
        return False
    newest = max(aside, key=lambda p: (p.stat().st_mtime, p.name))
    try:
        os.rename(newest, out)
    except OSError:  # a read-only place, or a build finishing its swap right now: not ours to repair
        return False
    return True


def _replace_dir(tmp: Path, out: Path) -> None:
    """Move `tmp` to `out`; an existing `out` is moved aside first and deleted last, so a
    failure at any point leaves either the old or the new index in place."""
    if out.exists():
        old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
        os.rename(out, old)
        try:
            os.rename(tmp, out)
        except BaseException:
            os.rename(old, out)
            raise
        # the manifest goes first: a delete killed halfway leaves no "finished index" to restore
        (old / MANIFEST).unlink(missing_ok=True)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out)


def build_index(
    chunks: Sequence[Chunk],
    out: str | Path,
    config: IndexConfig | None = None,
    corpus_hash: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> Path:
    """Build an index directory at `out` from `chunks` (in order) and return its path.

    `corpus_hash` identifies the source documents (see `corpus_hash()`); when omitted it
    is computed over the chunks. An existing `out` is replaced only with `overwrite`, and
    only if it is a marag index."""
    config = config or IndexConfig()
    out = Path(out)
    chunks = list(chunks)
    collections = _check_chunks(chunks, config)
    _check_config(config)
    _restore_aside(out)  # an earlier build killed mid-swap: its old index is the index
    if out.exists():
        if not overwrite:
            raise IndexFormatError(f"{out} already exists", hint="pass --overwrite or choose another --out")
        if not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST).is_file()):
            raise IndexFormatError(
                f"{out} exists and is not a marag index (no {MANIFEST}); refusing to replace it",
                hint="choose another --out, or remove it yourself",
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; an index is ordinary data
        with open(tmp / CHUNKS, "w", encoding="utf-8") as f:
            for c in chunks:
                f.write(c.model_dump_json() + "\n")
        parts: dict[str, Any] = {}
        for kind in config.retrievers:
            parts[kind] = RETRIEVERS.get(kind).build(chunks, tmp / kind, config, progress)
        manifest = _manifest(chunks, collections, config, corpus_hash, parts)
        # Written last: a directory with a manifest is a finished index.
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False), encoding="utf-8")
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _manifest(
    chunks: Sequence[Chunk],
    collections: list[str | None],
    config: IndexConfig,
    corpus_hash_value: str | None,
    parts: dict[str, Any],
) -> dict[str, Any]:
    libraries = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pydantic": _lib_version("pydantic"),
        "bm25s": _lib_version("bm25s"),
        "onnxruntime": _lib_version("onnxruntime"),
    }
    dense = parts.get("dense") or {}
    if "hnsw" in dense:
        libraries["faiss"] = dense["hnsw"].get("faiss")
    counts: dict[str, Any] = {
        "chunks": len(chunks),
        "documents": len({c.doc_id for c in chunks}),
    }
    if config.collection_field is not None:
        counts["collections"] = dict(sorted(Counter(collections).items()))  # type: ignore[arg-type]
    return {
        "format_version": INDEX_FORMAT_VERSION,
        "marag_version": marag.__version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": config.model_dump(mode="json"),
        "corpus_hash": corpus_hash_value if corpus_hash_value is not None else corpus_hash(chunks),
        "counts": counts,
        "libraries": libraries,
        "embedder": dense.get("embedder"),
        "parts": parts,
    }


class DirectoryIndex(ClosingIndex):
    """An opened index directory (an `Index`, `marag.index.base`). Parts load on first
    use: opening an index reads only its manifest; the chunks, BM25 arrays, vectors and
    embedding model load when a retriever that needs them is asked for. It holds no
    connection: `close()` does nothing, and it may be used in a `with` all the same."""

    def __init__(self, path: Path, manifest: dict[str, Any], embedder_options: dict[str, Any] | None = None):
        self.path = path
        self.manifest = manifest
        try:
            self.config = IndexConfig.model_validate(manifest.get("config", {}))
        except ValidationError as exc:
            raise IndexFormatError(
                f"index at {path} has an invalid config in {MANIFEST}: {exc}", hint=_rebuild_hint(path)
            ) from None
        self.embedder_options = dict(embedder_options or {})
        self._retrievers: dict[tuple[str, str | None], Retriever] = {}
        self._lock = threading.RLock()  # RLock: loading "hybrid" loads its members

    def __repr__(self) -> str:
        return f"DirectoryIndex({str(self.path)!r}, parts={self.parts}, chunks={self.manifest.get('counts', {}).get('chunks')})"

    def close(self) -> None:
        """Nothing to release: the files are read, never held open."""

    # -- contents ---------------------------------------------------------------------------
    @cached_property
    def chunks(self) -> list[Chunk]:
        path = self.path / CHUNKS
        try:
            with open(path, encoding="utf-8") as f:
                chunks = [Chunk.model_validate_json(line) for line in f if line.strip()]
        except (OSError, ValidationError, ValueError) as exc:
            raise IndexFormatError(f"cannot read {path}: {exc}", hint=_rebuild_hint(self.path)) from None
        expected = self.manifest.get("counts", {}).get("chunks")
        if expected is not None and expected != len(chunks):
            raise IndexFormatError(
                f"{path} holds {len(chunks)} chunks but the manifest says {expected}",
                hint=_rebuild_hint(self.path),
            )
        return chunks

    @cached_property
    def _chunk_positions(self) -> dict[str, int]:
        return {c.id: i for i, c in enumerate(self.chunks)}

    def position(self, chunk_id: str) -> int:
        """The chunk's position (its row in the index's arrays)."""
        self.chunk(chunk_id)  # a clear error for an unknown id
        return self._chunk_positions[chunk_id]

    def chunk(self, chunk_id: str) -> Chunk:
        try:
            return self.chunks[self._chunk_positions[chunk_id]]
        except KeyError:
            raise UnknownNameError(
                f"no chunk {chunk_id!r} in the index at {self.path}",
                hint="chunk ids look like DOC_ID#POSITION",
            ) from None

    @property
    def documents_count(self) -> int:
        return int(self.manifest.get("counts", {}).get("documents", len({c.doc_id for c in self.chunks})))

    @property
    def chunks_count(self) -> int:
        return int(self.manifest.get("counts", {}).get("chunks", len(self.chunks)))

    def collections(self) -> list[str]:
        """Names of the collections (empty when built without a collection field)."""
        return sorted(self.manifest.get("counts", {}).get("collections", {}) or {})

    @cached_property
    def chunk_collections(self) -> list[str | None]:
        return [_collection_of(c, self.config.collection_field) for c in self.chunks]

    def collection_mask(self, collection: str) -> np.ndarray:
        names = self.collections()
        if not names:
            raise IndexFormatError(
                f"the index at {self.path} has no collections",
                hint="rebuild it with a collection field (IndexConfig.collection_field)",
            )
        if collection not in names:
            raise UnknownNameError(
                f"unknown collection {collection!r}", hint=f"choose one of: {', '.join(names)}"
            )
        return np.array([c == collection for c in self.chunk_collections], dtype=bool)

    # -- parts and retrievers ------------------------------------------------------------------
    @property
    def parts(self) -> list[str]:
        """The parts built on disk (retriever kinds other than hybrid)."""
        return [k for k in self.config.retrievers if k != HYBRID]

    def has(self, kind: str) -> bool:
        """Whether `retriever(kind)` can be served by this index."""
        if kind == HYBRID:
            members = [n for n, w in self.config.hybrid_weights.items() if w > 0 and n in self.parts]
            return len(members) >= 2
        return kind in self.parts

    @property
    def default_kind(self) -> str:
        return HYBRID if self.has(HYBRID) else self.parts[0]

    def retriever(self, kind: str | None = None, collection: str | None = None) -> Retriever:
        """A retriever of `kind` (default: hybrid when it can be served, else the one part
        built), restricted to `collection` when given. Cached per (kind, collection)."""
        kind = kind or self.default_kind
        key = (kind, collection)
        with self._lock:
            if key in self._retrievers:
                return self._retrievers[key]
            cls = RETRIEVERS.get(kind)
            if not self.has(kind):
                raise IndexFormatError(
                    f"the index at {self.path} has no {kind!r} part (it has: {', '.join(self.parts)})",
                    hint=f"use one of those, or rebuild with the {kind!r} retriever",
                )
            if collection is None:
                r = cls.load(self)
                r.index = self  # type: ignore[attr-defined]  # strategies that need collections (RopMura) find them here
            else:
                r = self.retriever(kind).restrict(self.collection_mask(collection), label=collection)  # type: ignore[attr-defined]
            self._retrievers[key] = r
            return r


def open_directory(path: str | Path, embedder_options: dict[str, Any] | None = None) -> DirectoryIndex:
    """Open an index directory written by `build_index`, checking its format version.
    (`marag.index.open_index` opens any index target: a directory or an index URI.)

    `embedder_options` go to the query embedder when dense search first needs it
    (e.g. `{"threads": 4}` for minilm)."""
    path = Path(path)
    if not path.is_dir() and not _restore_aside(path):
        raise IndexFormatError(
            f"index not found at {path}", hint=f"run `marag index DOCS --out {path}` first"
        )
    mpath = path / MANIFEST
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        raise IndexFormatError(
            f"{path} has no {MANIFEST}: it is not a marag index, or its build did not finish",
            hint=_rebuild_hint(path),
        ) from None
    except (OSError, ValueError) as exc:
        raise IndexFormatError(
            f"the manifest of the index at {path} is unreadable ({exc})", hint=_rebuild_hint(path)
        ) from None
    found = manifest.get("format_version")
    if found != INDEX_FORMAT_VERSION:
        raise IndexFormatError(
            f"the index at {path} was built with index format version {found} "
            f"(marag {manifest.get('marag_version', '?')}); this marag reads version {INDEX_FORMAT_VERSION}",
            hint=_rebuild_hint(path),
        )
    return DirectoryIndex(path, manifest, embedder_options)
