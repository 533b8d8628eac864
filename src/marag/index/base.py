"""The retrieval port: anything with `search` is a retriever (`Retriever`), and an
opened index, whatever stores it, is an `Index` that serves retrievers."""

from __future__ import annotations

import json
import os
from numbers import Real
from typing import TYPE_CHECKING, Any, Iterable, Protocol, Self, Sequence, runtime_checkable

if TYPE_CHECKING:
    from marag.corpus.models import Chunk
    from marag.index.config import IndexConfig

_FIELDS = ("doc_id", "chunk_id", "score", "text", "title")


class Hit:
    """One ranked chunk: its document and chunk ids, score, text and title.

    A slotted class rather than a pydantic model: every search makes one per result, and
    on a small corpus ten pydantic objects cost a fifth of a whole single search (issue
    28). It keeps the part of a model's interface that callers use: keyword
    construction with type checks, `model_copy`, `model_dump`, `model_validate`, `==`,
    pickling, and it validates and serializes as a field of pydantic models."""

    __slots__ = _FIELDS
    FIELDS = _FIELDS

    def __init__(self, *, doc_id: str, chunk_id: str, score: float, text: str, title: str = ""):
        for name, value in (("doc_id", doc_id), ("chunk_id", chunk_id), ("text", text), ("title", title)):
            if not isinstance(value, str):
                raise TypeError(f"Hit.{name} must be a string, got {type(value).__name__}")
        if isinstance(score, bool) or not isinstance(score, Real):
            raise TypeError(f"Hit.score must be a number, got {type(score).__name__}")
        self.doc_id, self.chunk_id, self.score, self.text, self.title = doc_id, chunk_id, float(score), text, title

    @classmethod
    def many(cls, rows: Iterable[tuple[str, str, str, str]], scores: Iterable[float]) -> list["Hit"]:
        """Hits from (doc_id, chunk_id, text, title) rows and Python float scores, with
        no checks: for values taken from validated chunks (the retrievers' hot path)."""
        new, out = object.__new__, []
        append = out.append
        for (doc_id, chunk_id, text, title), score in zip(rows, scores):
            h = new(cls)
            h.doc_id, h.chunk_id, h.score, h.text, h.title = doc_id, chunk_id, score, text, title
            append(h)
        return out

    # -- the pydantic-like interface --------------------------------------------------------
    @classmethod
    def model_validate(cls, obj: Any) -> "Hit":
        if isinstance(obj, cls):
            return obj
        if isinstance(obj, dict):
            unknown = set(obj) - set(_FIELDS)
            if unknown:
                raise ValueError(f"unknown Hit field(s) {sorted(unknown)}; a hit has {', '.join(_FIELDS)}")
            return cls(**obj)
        raise TypeError(f"a Hit is made from a Hit or a dict, got {type(obj).__name__}")

    def model_dump(self, *, mode: str = "python", include: Iterable[str] | None = None, exclude: Iterable[str] | None = None) -> dict[str, Any]:
        # (every field is a str or a float: the "json" mode's dict is the same)
        names = [n for n in _FIELDS if (include is None or n in include) and (exclude is None or n not in exclude)]
        return {n: getattr(self, n) for n in names}

    def model_dump_json(self) -> str:
        return json.dumps(self.model_dump(), ensure_ascii=False)

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> "Hit":
        """A copy with `update` applied, unchecked (as pydantic's `model_copy`); the
        fields are immutable values, so `deep` changes nothing."""
        h = object.__new__(type(self))
        h.doc_id, h.chunk_id, h.score, h.text, h.title = self.doc_id, self.chunk_id, self.score, self.text, self.title
        for name, value in (update or {}).items():
            if name not in _FIELDS:
                raise ValueError(f"unknown Hit field {name!r}; a hit has {', '.join(_FIELDS)}")
            setattr(h, name, value)
        return h

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema as cs

        fields = cs.typed_dict_schema(
            {
                "doc_id": cs.typed_dict_field(cs.str_schema()),
                "chunk_id": cs.typed_dict_field(cs.str_schema()),
                "score": cs.typed_dict_field(cs.float_schema()),
                "text": cs.typed_dict_field(cs.str_schema()),
                "title": cs.typed_dict_field(cs.with_default_schema(cs.str_schema(), default=""), required=False),
            }
        )
        from_dict = cs.no_info_after_validator_function(lambda d: cls(**d), fields)
        return cs.json_or_python_schema(
            json_schema=from_dict,
            python_schema=cs.union_schema([cs.is_instance_schema(cls), from_dict]),
            serialization=cs.plain_serializer_function_ser_schema(lambda h: h.model_dump(), return_schema=fields),
        )

    # -- value semantics -----------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return (self.doc_id, self.chunk_id, self.score, self.text, self.title) == (
            other.doc_id, other.chunk_id, other.score, other.text, other.title  # type: ignore[attr-defined]
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, as the model it replaces

    def __repr__(self) -> str:
        return "Hit(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in _FIELDS) + ")"

    def __reduce__(self):
        # unchecked on the way back: the values were checked when the hit was made
        return (_restored, (self.doc_id, self.chunk_id, self.score, self.text, self.title))


def _restored(doc_id: str, chunk_id: str, score: float, text: str, title: str) -> Hit:
    return Hit.many(((doc_id, chunk_id, text, title),), (score,))[0]


@runtime_checkable
class Retriever(Protocol):
    """`search(query, k, offset)` returns hits ranked `offset .. offset+k-1`.

    Paging by offset lets the mRAG searcher ask for "the next two" with the same query.
    Ties are broken by chunk order in the index, so results are deterministic.
    `search_batch` returns one page per query: any read-only sequence of hits (the
    built-in retrievers make a batch's hits when a page is first read); `list(page)`
    when you need a list to change.
    """

    name: str

    def search(self, query: str, k: int = 10, offset: int = 0) -> list[Hit]: ...

    def search_batch(
        self, queries: Sequence[str], k: int = 10, offset: int = 0
    ) -> list[Sequence[Hit]]: ...


class Index(Protocol):
    """An opened index, whatever stores it: an index directory
    (`marag.index.store.DirectoryIndex`) or a Milvus collection
    (`marag.index.milvus.MilvusIndex`). `marag.index.open_index(target)` opens one by its
    target (a directory or an index URI, `marag.index.uri`); commands, strategies and the
    evaluation use only what is declared here.

    Not runtime-checkable: an `isinstance` test would read `chunks` (a whole collection,
    for Milvus) to see that it is there."""

    #: config, corpus hash, counts, embedder, library versions: what the index was built from
    manifest: dict[str, Any]
    config: "IndexConfig"

    @property
    def path(self) -> str | os.PathLike[str]:
        """Where it is, as messages name it (a directory, or a URI without its options)."""
        ...

    @property
    def parts(self) -> list[str]:
        """The retriever kinds it holds data for (e.g. bm25, dense; hybrid fuses them)."""
        ...

    def has(self, kind: str) -> bool:
        """Whether `retriever(kind)` can be served."""
        ...

    @property
    def default_kind(self) -> str:
        """hybrid when it can be served, else the one part built."""
        ...

    def retriever(self, kind: str | None = None, collection: str | None = None) -> Retriever:
        """A retriever of `kind` (default: `default_kind`), of `collection` only when given."""
        ...

    @property
    def chunks(self) -> list["Chunk"]:
        """Every chunk, in index order (read on first use)."""
        ...

    @property
    def chunks_count(self) -> int: ...

    @property
    def documents_count(self) -> int: ...

    def collections(self) -> list[str]:
        """The names of its collections (empty when built without a collection field)."""
        ...

    @property
    def chunk_collections(self) -> list[str | None]:
        """Each chunk's collection, in index order."""
        ...

    def position(self, chunk_id: str) -> int:
        """The chunk's position in index order."""
        ...

    def close(self) -> None:
        """Release what it holds (a connection; a Milvus Lite file's lock). Idempotent."""
        ...

    def __enter__(self) -> "Index": ...

    def __exit__(self, *exc: object) -> None: ...


class ClosingIndex:
    """`with` for an index: `__enter__` returns it, `__exit__` calls its `close()`. The
    one pair every `Index` (a directory, a Milvus collection) takes."""

    def close(self) -> None:  # pragma: no cover - each index has its own
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
