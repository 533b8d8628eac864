"""Where an index lives, named by one string: an index *target*.

    idx/hotpot                         an index directory (marag.index.store)
    milvus:kb.db#hotpot                a collection in a Milvus Lite file
    milvus://10.0.0.5:19530/hotpot     a collection on a Milvus server or cluster

Every command that takes an index (`marag index --out`, `ask --index`, `eval --index`,
`serve --indexes`, the Ray workers) resolves it here, so a new kind of store is one
entry in `INDEX_SCHEMES`, not a branch in each command. A target with no registered
scheme is a directory path. Credentials never appear in a target: a backend reads them
from an environment variable, so a target can be written to config.json, logs and argv.

A backend offers:

    open(target, embedder_options) -> Index      (marag.index.base: manifest, config,
                                      retriever(kind, collection), collections(), ...,
                                      close())
    build(chunks, target, config, corpus_hash, overwrite, progress, batch_size) -> None
    shared(target) -> bool           several processes (Ray workers) may open it at once
    share_hint(target) -> str        when not: how to make it so
    skipped_file(target) -> Path     where `marag index` lists records it skipped
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

from marag.corpus.models import Chunk
from marag.errors import MaragError
from marag.index.base import Index
from marag.index.config import IndexConfig
from marag.registry import Registry

SKIPPED_FILE = "skipped-records.txt"
# Two or more letters: "C:\\idx" stays a (Windows) path.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")


class IndexBackend(Protocol):
    def open(self, target: str, embedder_options: dict[str, Any] | None = None) -> Index: ...

    def build(
        self, chunks: Sequence[Chunk], target: str, config: IndexConfig, corpus_hash: str, overwrite: bool, progress: bool,
        batch_size: int,
    ) -> None: ...  # fmt: skip

    def shared(self, target: str) -> bool: ...

    def share_hint(self, target: str) -> str: ...

    def skipped_file(self, target: str) -> Path: ...


INDEX_SCHEMES: Registry[IndexBackend] = Registry("index_schemes")


def scheme_of(target: str | Path) -> str:
    """The registered scheme that handles `target`; "dir" for a plain path."""
    if isinstance(target, Path):
        return "dir"
    m = _SCHEME.match(target)
    if m and m.group(1).lower() in INDEX_SCHEMES:
        return m.group(1).lower()
    if m and target[m.end() : m.end() + 2] == "//":  # looks like a URI, but no backend knows it
        INDEX_SCHEMES.get(m.group(1).lower())  # raises, listing the known schemes
    return "dir"


def backend(target: str | Path) -> IndexBackend:
    return INDEX_SCHEMES.get(scheme_of(target))


def open_index(target: str | Path, embedder_options: dict[str, Any] | None = None) -> Index:
    """The index at `target` (a directory or an index URI), checked and ready to search;
    `close()` it (or open it in a `with`) when done: a Milvus index holds a connection."""
    return backend(target).open(str(target), embedder_options)


def close_index(index: Index | None) -> None:
    """Release what an opened index holds (a server connection; a Milvus Lite file's
    lock). A no-op for None (and for an object without `close`, e.g. the `index` a
    third-party retriever may carry)."""
    close = getattr(index, "close", None)
    if callable(close):
        close()


@contextmanager
def opened_index(target: str | Path, embedder_options: dict[str, Any] | None = None) -> Iterator[Index]:
    """`open_index` for a `with` block: the index is closed when the block ends, so a
    command that reads an index for a moment does not keep a Lite file locked."""
    index = open_index(target, embedder_options)
    try:
        yield index
    finally:
        close_index(index)


def build_index_at(
    chunks: Sequence[Chunk], target: str | Path, config: IndexConfig, corpus_hash: str, overwrite: bool = False,
    progress: bool = True, batch_size: int = 256,
) -> None:  # fmt: skip
    """Build the index of `chunks` at `target`. `batch_size`: chunks per step of a
    resumable build (server-backed stores; a directory is built in one piece)."""
    backend(target).build(chunks, str(target), config, corpus_hash, overwrite, progress, batch_size)


def require_shared(target: str | Path, who: str) -> None:
    """Refuse a target that one process at a time may open, when `who` (e.g. "Ray
    workers") are several processes."""
    b = backend(target)
    if not b.shared(str(target)):
        raise MaragError(f"{target} can be opened by one process at a time, and {who} are many", hint=b.share_hint(str(target)))


def shared(target: str | Path) -> bool:
    """Whether several processes may open `target` at once (what Ray workers need)."""
    return backend(target).shared(str(target))


# -- the built-in schemes: thin shims, the code lives in the backend's module (imported on use)
@INDEX_SCHEMES.register("dir")
class DirectoryBackend:
    """An index directory (`marag.index.store`)."""

    @staticmethod
    def open(target: str, embedder_options: dict[str, Any] | None = None) -> Index:
        from marag.index.store import open_directory

        return open_directory(target, embedder_options)

    @staticmethod
    def build(chunks, target, config, corpus_hash, overwrite, progress, batch_size) -> None:
        from marag.index.store import build_index

        build_index(chunks, Path(target), config, corpus_hash=corpus_hash, overwrite=overwrite, progress=progress)

    @staticmethod
    def shared(target: str) -> bool:
        return True  # read-only files: every process may read them (on a shared file system)

    @staticmethod
    def share_hint(target: str) -> str:
        return ""

    @staticmethod
    def skipped_file(target: str) -> Path:
        return Path(target) / SKIPPED_FILE


@INDEX_SCHEMES.register("milvus")
class MilvusBackend:
    """A Milvus collection (`marag.index.milvus`): `milvus:PATH.db#NAME` or
    `milvus://HOST:PORT/NAME`."""

    @staticmethod
    def open(target: str, embedder_options: dict[str, Any] | None = None) -> Index:
        from marag.index.milvus import open_milvus

        return open_milvus(target, embedder_options)

    @staticmethod
    def build(chunks, target, config, corpus_hash, overwrite, progress, batch_size) -> None:
        from marag.index.milvus import build_milvus

        build_milvus(chunks, target, config, corpus_hash=corpus_hash, overwrite=overwrite, progress=progress, batch_size=batch_size)

    @staticmethod
    def shared(target: str) -> bool:
        from marag.index.milvus import parse_target

        return not parse_target(target).local_file  # a Lite file is opened by one process at a time

    @staticmethod
    def share_hint(target: str) -> str:
        from marag.index.milvus import parse_target, serve_hint

        return serve_hint(parse_target(target))

    @staticmethod
    def skipped_file(target: str) -> Path:
        from marag.index.milvus import parse_target

        return Path(".marag") / f"skipped-records-{parse_target(target).collection}.txt"


__all__ = ["INDEX_SCHEMES", "IndexBackend", "SKIPPED_FILE", "backend", "build_index_at", "close_index", "open_index", "opened_index", "require_shared", "scheme_of", "shared"]
