"""Collections: named subsets of a corpus, keyed by a metadata field.

RopMura gives each knowledge agent its own collection; the folder loader's `folder`
field, DataMorgana's `file` or hoprag's `source` are natural keys. Documents (or chunks)
without the field, or with an empty value, go to the `missing` collection.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from marag.corpus.models import Chunk, Document

T = TypeVar("T", Document, Chunk)

MISSING = "_other"


def collection_of(item: Document | Chunk, field: str, missing: str = MISSING) -> str:
    """The collection name of one document or chunk: its `metadata[field]` as a string."""
    value: Any = item.metadata.get(field)
    if value is None or value == "":
        return missing
    return str(value)


def split_collections(
    documents: Iterable[T], field: str, missing: str = MISSING
) -> dict[str, list[T]]:
    """Group by `metadata[field]`; keys sorted, input order kept within each group."""
    groups: dict[str, list[T]] = {}
    for item in documents:
        groups.setdefault(collection_of(item, field, missing), []).append(item)
    return {name: groups[name] for name in sorted(groups)}
