"""One cached index per (dataset corpus, index config), shared by every run on it."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from marag.errors import IndexFormatError, MaragError
from marag.eval.datasets import Dataset
from marag.index.pipeline import index_documents
from marag.index.store import IndexConfig, corpus_hash
from marag.index.uri import close_index, open_index


def ensure_index(
    ds: Dataset, config: IndexConfig, cache_root: Path, progress: bool = True, existing: str | Path | None = None
):
    """The index of `ds`'s corpus: `existing` when given (a directory or an index URI;
    it must hold exactly that corpus; a questions file without a corpus, e.g. from
    `marag synth`, takes it as is), else the cached directory built with `config`, built
    now if there is none."""
    if existing is not None and not ds.documents:
        return open_index(existing)
    if not ds.has_corpus or not ds.documents:
        raise MaragError(
            f"dataset {ds.name!r} has no corpus to retrieve from",
            hint="evaluate it with strategies that need no retrieval (e.g. llm_only)",
        )
    wanted = corpus_hash(ds.documents)
    if existing is not None:
        idx = open_index(existing)
        if idx.manifest.get("corpus_hash") != wanted:
            close_index(idx)
            raise MaragError(
                f"the index at {existing} does not hold the corpus of {ds.name!r}",
                hint=f"build it from the dataset (marag index {ds.name} --out {existing} --overwrite), or leave out --index",
            )
        return idx
    digest = hashlib.sha256((wanted + json.dumps(config.model_dump(mode="json"), sort_keys=True)).encode()).hexdigest()[:10]
    path = Path(cache_root) / f"{ds.name}-{digest}"
    if path.exists():
        try:
            return open_index(path)
        except IndexFormatError:
            pass  # stale or torn: rebuild below
    if progress:
        print(
            f"building the index of {ds.name} ({len(ds.documents)} documents; {', '.join(config.retrievers)}), "
            f"cached in {path} for later runs (or pass --index IDX to use one you built)",
            file=sys.stderr,
        )
    return index_documents(ds.documents, path, config, overwrite=True, progress=progress)
