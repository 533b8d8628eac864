"""One cached index per (dataset corpus, index config), shared by every run on it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from marag.errors import IndexFormatError, MaragError
from marag.eval.datasets import Dataset
from marag.index.pipeline import index_documents
from marag.index.store import Index, IndexConfig, corpus_hash, open_index


def ensure_index(ds: Dataset, config: IndexConfig, cache_root: Path, progress: bool = True) -> Index:
    if not ds.has_corpus or not ds.documents:
        raise MaragError(
            f"dataset {ds.name!r} has no corpus to retrieve from",
            hint="evaluate it with strategies that need no retrieval (e.g. llm_only)",
        )
    digest = hashlib.sha256(
        (corpus_hash(ds.documents) + json.dumps(config.model_dump(mode="json"), sort_keys=True)).encode()
    ).hexdigest()[:10]
    path = Path(cache_root) / f"{ds.name}-{digest}"
    if path.exists():
        try:
            return open_index(path)
        except IndexFormatError:
            pass  # stale or torn: rebuild below
    return index_documents(ds.documents, path, config, overwrite=True, progress=progress)
