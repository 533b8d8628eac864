"""Generic JSON Lines: one document per line.

    {"id": "d1", "title": "Optional", "text": "Required body", "lang": "en"}

- `text` (string) is required. An empty one is allowed: the document is kept (its id
  stays known, e.g. as a gold id) and gives no chunk; a file whose every text is empty
  is an error ("no documents found").
- `id` (string or integer) is optional: without it the id is `<file stem>:<line>`
  (1-based line number; for a `.json` list, the 1-based record number), which is stable
  as long as the file is not reordered.
- `title` is optional (string or null).
- Every other field goes into `metadata`; a `metadata` object is merged in first, so a
  `Document.model_dump()` written as a line reads back as the same document.

A `.json` file holding a list of such objects, or a folder of `.jsonl` files, works too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marag.corpus.loaders._io import (
    JSON_SUFFIXES,
    LoadContext,
    files_matching,
    iter_records,
    peek,
    require_str,
)
from marag.corpus.loaders.base import LoadedCorpus, OnError, register_loader
from marag.corpus.models import Document

_RESERVED = ("id", "title", "text", "metadata")


def _is_generic(file: Path) -> bool:
    if file.suffix.lower() not in JSON_SUFFIXES:
        return False
    kind, rec = peek(file)
    if kind in ("list", "record"):
        return isinstance(rec, dict) and isinstance(rec.get("text"), str)
    # Empty or unparseable from the first line on: still ours, so the user gets
    # "no documents found" or the exact bad line instead of "unknown format".
    return file.suffix.lower() != ".json" or kind == "empty"


def detect(path: Path) -> bool:
    return bool(files_matching(path, _is_generic))


def to_document(rec: dict[str, Any], fallback_id: str) -> Document:
    text = require_str(rec, "text")
    raw_id = rec.get("id")
    if raw_id is None or raw_id == "":
        doc_id = fallback_id
    elif isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool):
        doc_id = str(raw_id)
    else:
        raise ValueError(f"field 'id' must be a string or integer, got {type(raw_id).__name__}")
    title = rec.get("title") or ""
    if not isinstance(title, str):
        raise ValueError(f"field 'title' must be a string, got {type(title).__name__}")
    meta = rec.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise ValueError(f"field 'metadata' must be an object, got {type(meta).__name__}")
    metadata = dict(meta or {})
    metadata.update((k, v) for k, v in rec.items() if k not in _RESERVED)
    return Document(id=doc_id, title=title, text=text, metadata=metadata)


@register_loader(
    "jsonl",
    detect=detect,
    description="JSON Lines (or a .json list): one {id?, title?, text, ...} object per document",
    has_questions=False,
    priority=90,
)
def load_jsonl(path: Path, on_error: OnError = "fail") -> LoadedCorpus:
    ctx = LoadContext(path, on_error)
    files = [path] if path.is_file() else files_matching(path, _is_generic)
    documents: list[Document] = []
    first_seen: dict[str, str] = {}
    for file in files:
        for n, unit, rec in iter_records(ctx, file):
            try:
                doc = to_document(rec, f"{file.stem}:{n}")
                if doc.id in first_seen:
                    raise ValueError(
                        f"duplicate id {doc.id!r} (first seen at {first_seen[doc.id]})"
                    )
            except ValueError as e:
                ctx.bad(file, n, str(e), unit)
                continue
            first_seen[doc.id] = f"{file.name} {unit} {n}"
            documents.append(doc)
    return ctx.result(documents, [], "jsonl")
