"""What a Milvus index stores, as both the build and the opening read it.

An index NAME is two collections:

    NAME           one row per chunk: row (its position in the index, the primary key),
                   chunk_id, doc_id, title, text, the chunk's collection and metadata,
                   its BM25 terms, and the sparse vector Milvus computes from them
    NAME__windows  one row per dense window of a chunk: row, collection, vector

The manifest (config, corpus hash, embedder, counts) is stored with the collection as
its property "marag.manifest"; "marag.done" counts the chunks a build has put in.
The BM25 terms are marag's own (`bm25_terms`), which Milvus only splits at spaces.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from marag.errors import IndexFormatError
from marag.index.milvus.client import translated
from marag.index.milvus.target import MilvusTarget

# The layout of the two collections; another version is refused with a rebuild hint.
FORMAT_VERSION = 1
MANIFEST_KEY, DONE_KEY = "marag.manifest", "marag.done"


# The terms are marag's; Milvus only splits them again at the spaces between them.
MILVUS_ANALYZER = {"tokenizer": "standard"}


def bm25_terms(texts: Sequence[str]) -> list[str]:
    """Each text's BM25 terms as the local index sees them, space-separated."""
    from marag.index.bm25 import tokenize

    return [" ".join(words) for words in tokenize(texts)]


def _analyzer_record() -> dict[str, Any]:
    from marag.index.bm25 import TOKENIZER_SPEC

    return {"terms": TOKENIZER_SPEC, "milvus": MILVUS_ANALYZER}


def _read_properties(client, t: MilvusTarget) -> dict[str, Any] | None:
    """The collection's properties, or None when there is no such collection."""
    with translated(t, "read the collection"):
        if not client.has_collection(t.collection):
            return None
        return dict(client.describe_collection(t.collection).get("properties") or {})


def _manifest_of(props: dict[str, Any], t: MilvusTarget) -> dict[str, Any]:
    raw = props.get(MANIFEST_KEY)
    if raw is None:
        raise IndexFormatError(
            f"the collection {t.collection!r} in {t.where} was not made by marag (it has no manifest)",
            hint="choose another name in the URI; marag does not replace collections it did not make",
        )
    try:
        manifest = json.loads(raw)
        if not isinstance(manifest, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        raise IndexFormatError(f"the manifest of {t.collection!r} in {t.where} is unreadable ({exc})", hint=f"rebuild it: marag index DOCS --out {t.shown} --overwrite") from None
    return manifest
