"""Building a Milvus index, resumably: the chunks go in by batches, each recorded in the
collection's properties, so a killed build resumes where it stopped when the same
command is run again; a collection marag did not make is never replaced.
"""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import marag
from marag.corpus.models import Chunk
from marag.errors import CorpusError, IndexFormatError, MaragError
from marag.index.config import IndexConfig
from marag.index.embed import embedder_info, get_embedder
from marag.index.milvus.client import _lib_version, connect, disconnect, translated
from marag.index.milvus.layout import DONE_KEY, FORMAT_VERSION, MANIFEST_KEY, _analyzer_record, _manifest_of, _read_properties, bm25_terms
from marag.index.milvus.target import MilvusTarget, parse_target
from marag.index.traced import index_text

MAX_WINDOWS = 1 << 16  # windows per chunk: a window's key is row * MAX_WINDOWS + i
# Bounds of Milvus VARCHAR fields, in bytes; longer values are refused before a build.
_MAX_BYTES = {"chunk_id": 2048, "doc_id": 2048, "title": 8192, "text": 65535, "terms": 65535}


def _check_config(config: IndexConfig) -> None:
    unknown = [k for k in config.retrievers if k not in ("bm25", "dense")]
    if unknown:
        raise MaragError(f"a Milvus index holds bm25 and dense parts, not {unknown[0]!r}", hint="use --retrievers bm25,dense (or one of them)")


def _check_sizes(chunks: Sequence[Chunk]) -> None:
    # BM25 terms are never longer than title and text together: checked as those
    fields = {"chunk_id": "id", "doc_id": "document id", "title": "title", "text": "text", "terms": "title and text together"}
    for c in chunks:
        for field, value in (("chunk_id", c.id), ("doc_id", c.doc_id), ("title", c.title), ("text", c.text), ("terms", f"{c.title}\n{c.text}")):
            size = len(value.encode("utf-8"))
            if size > _MAX_BYTES[field]:
                raise CorpusError(
                    f"chunk {c.id[:80]!r}: its {fields[field]} is {size:,} bytes, more than a Milvus field holds ({_MAX_BYTES[field]:,})",
                    hint="use a smaller --chunk-size" if field in ("text", "terms") else "shorten it in the documents",
                )


def _identity(manifest: dict[str, Any]) -> dict[str, Any]:
    """What must match for a build to resume another (not when it ran, nor its status)."""
    return {k: manifest.get(k) for k in ("format_version", "config", "corpus_hash", "counts", "embedder", "analyzer", "collections")}



def build_milvus(
    chunks: Sequence[Chunk],
    target: str | MilvusTarget,
    config: IndexConfig | None = None,
    corpus_hash: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
    batch_size: int = 256,
    token: str | None = None,
) -> MilvusTarget:
    """Build (or resume building) the index of `chunks` at `target`.

    A collection of the same name is replaced only with `overwrite`, and only if marag
    made it; an unfinished build of the same chunks and settings resumes without it."""
    from marag.index.store import _check_chunks, corpus_hash as hash_of

    t = parse_target(target) if isinstance(target, str) else target
    config = config or IndexConfig()
    chunks = list(chunks)
    _check_config(config)
    chunk_collections = _check_chunks(chunks, config)
    _check_sizes(chunks)
    if batch_size < 1:
        raise MaragError(f"--batch-size must be at least 1, got {batch_size}")
    names = sorted({c for c in chunk_collections if c is not None})
    collection_id = {name: i for i, name in enumerate(names)}
    dense = "dense" in config.retrievers
    embedder = get_embedder(config.embedder) if dense else None
    window_overlap = config.dense_window_overlap if config.dense_long_chunks == "windows" else None
    counts: dict[str, Any] = {"chunks": len(chunks), "documents": len({c.doc_id for c in chunks})}
    if config.collection_field is not None:
        counts["collections"] = {n: sum(1 for c in chunk_collections if c == n) for n in names}
    manifest: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "backend": "milvus",
        "marag_version": marag.__version__,
        "config": config.model_dump(mode="json"),
        "corpus_hash": corpus_hash if corpus_hash is not None else hash_of(chunks),
        "counts": counts,
        "collections": names,
        "embedder": embedder_info(embedder) if embedder else None,
        "analyzer": _analyzer_record(),
        "libraries": {"python": platform.python_version(), "pymilvus": _lib_version("pymilvus"), "milvus-lite": _lib_version("milvus-lite")},
        "status": "building",
    }
    client = connect(t, token)
    try:
        _insert_all(client, t, chunks, chunk_collections, collection_id, embedder, window_overlap, manifest, overwrite, progress, batch_size)
    finally:
        disconnect(client, t)  # on every path: a Lite file's lock is released when the build ends or fails
    return t


def _insert_all(client, t: MilvusTarget, chunks: list[Chunk], chunk_collections: list[str | None], collection_id: dict[str, int],
                embedder, window_overlap: int | None, manifest: dict[str, Any], overwrite: bool, progress: bool, batch_size: int) -> None:  # fmt: skip
    dense = embedder is not None
    from marag.index.dense import embed_chunks

    done = _start_or_resume(client, t, manifest, overwrite)
    if done and progress:
        print(f"resuming the build of {t.shown}: {done:,} of {len(chunks):,} chunks are in", file=sys.stderr)
    from tqdm.auto import tqdm

    bar = tqdm(total=len(chunks), initial=done, unit="chunk", desc=f"milvus {t.collection}", disable=not progress)
    try:
        for start in range(done, len(chunks), batch_size):
            part = chunks[start : start + batch_size]
            terms = bm25_terms([index_text(c) for c in part])
            rows = [
                {"row": start + i, "chunk_id": c.id, "doc_id": c.doc_id, "title": c.title, "text": c.text, "terms": terms[i],
                 "chunk_pos": c.position, "collection": collection_id.get(chunk_collections[start + i], -1), "metadata": c.metadata,
                 "windows": 0}
                for i, c in enumerate(part)
            ]  # fmt: skip
            with translated(t, "insert chunks"):
                if embedder is not None:
                    vectors, layout, _ = embed_chunks(embedder, [index_text(c) for c in part], window_overlap)
                    wins = []
                    for i, u in enumerate(layout.texts.tolist()):
                        first, last = int(layout.windows[u]), int(layout.windows[u + 1])
                        if last - first > MAX_WINDOWS:
                            raise CorpusError(f"chunk {part[i].id[:80]!r} has more than {MAX_WINDOWS} windows", hint="use a smaller --chunk-size")
                        rows[i]["windows"] = last - first
                        wins += [{"wid": (start + i) * MAX_WINDOWS + j, "row": start + i, "collection": rows[i]["collection"],
                                  "dense": vectors[first + j].tolist()} for j in range(last - first)]  # fmt: skip
                    # windows first: a chunk row that is in always has its vectors
                    client.insert(t.windows, wins)
                client.insert(t.collection, rows)
                # the mark that makes the build resumable: everything below it is in
                client.alter_collection_properties(t.collection, properties={DONE_KEY: str(start + len(part))})
            bar.update(len(part))
        with translated(t, "finish the build"):
            for name in ([t.windows] if dense else []) + [t.collection]:
                client.flush(name)
                client.load_collection(name)
            if dense:
                manifest["parts"] = {"dense": {"vectors": _count(client, t.windows), "window_overlap": window_overlap,
                                               "chunks_with_several_windows": _count(client, t.collection, "windows > 1")}}  # fmt: skip
            manifest |= {"status": "complete", "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
            client.alter_collection_properties(t.collection, properties={MANIFEST_KEY: json.dumps(manifest), DONE_KEY: str(len(chunks))})
    finally:
        bar.close()


def _count(client, name: str, flt: str = "") -> int:
    rows = client.query(name, filter=flt, output_fields=["count(*)"])
    return int(rows[0]["count(*)"])


def _start_or_resume(client, t: MilvusTarget, manifest: dict[str, Any], overwrite: bool) -> int:
    """Create the collections, or find the build to resume; returns how many chunks are in."""
    props = _read_properties(client, t)
    if props is not None:
        old = _manifest_of(props, t)  # refuses a collection marag did not make
        same = _identity(old) == _identity(manifest)
        if old.get("status") == "building" and same:
            done = int(props.get(DONE_KEY, 0))
            with translated(t, "resume the build"):
                # rows past the mark are from a batch that was cut short: insert them again
                for name in ([t.windows] if manifest["embedder"] else []) + [t.collection]:
                    if client.has_collection(name):
                        client.delete(name, filter=f"row >= {done}")
                if manifest["embedder"] and not client.has_collection(t.windows):
                    _create_windows(client, t, manifest)
            return done
        if not overwrite:
            state = "a finished index" if old.get("status") == "complete" else "an unfinished build of other chunks or settings"
            raise IndexFormatError(
                f"{t.shown} already holds {state}", hint="pass --overwrite to replace it, or choose another name in the URI"
            )
        with translated(t, "drop the old collections"):
            for name in (t.windows, t.collection):
                if client.has_collection(name):
                    client.drop_collection(name)
    _create(client, t, manifest)
    return 0


def _create(client, t: MilvusTarget, manifest: dict[str, Any]) -> None:
    from pymilvus import DataType, Function, FunctionType

    config = IndexConfig.model_validate(manifest["config"])
    with translated(t, "create the collections"):
        if manifest["embedder"]:
            _create_windows(client, t, manifest)
        schema = client.create_schema(auto_id=False)
        schema.add_field("row", DataType.INT64, is_primary=True)
        for field in ("chunk_id", "doc_id", "title", "text"):
            schema.add_field(field, DataType.VARCHAR, max_length=_MAX_BYTES[field])
        schema.add_field("terms", DataType.VARCHAR, max_length=_MAX_BYTES["terms"], enable_analyzer=True,
                         analyzer_params=manifest["analyzer"]["milvus"])  # fmt: skip
        schema.add_field("chunk_pos", DataType.INT64)  # the chunk's position in its document
        schema.add_field("windows", DataType.INT64)  # how many dense windows it has (0: no dense part)
        schema.add_field("collection", DataType.INT64)  # index into the manifest's "collections"; -1: none
        schema.add_field("metadata", DataType.JSON)
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(Function(name="bm25", function_type=FunctionType.BM25, input_field_names=["terms"], output_field_names=["sparse"]))
        index = client.prepare_index_params()
        index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25",
                        params={"bm25_k1": config.bm25_k1, "bm25_b": config.bm25_b})  # fmt: skip
        # the manifest (status "building") goes in with the collection: a half-built index
        # is always recognised as one
        client.create_collection(t.collection, schema=schema, index_params=index,
                                 properties={MANIFEST_KEY: json.dumps(manifest), DONE_KEY: "0"})  # fmt: skip


def _create_windows(client, t: MilvusTarget, manifest: dict[str, Any]) -> None:
    from pymilvus import DataType

    config = IndexConfig.model_validate(manifest["config"])
    schema = client.create_schema(auto_id=False)
    schema.add_field("wid", DataType.INT64, is_primary=True)
    schema.add_field("row", DataType.INT64)
    schema.add_field("collection", DataType.INT64)
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=int(manifest["embedder"]["dim"]))
    index = client.prepare_index_params()
    if config.ann == "hnsw":
        index.add_index(field_name="dense", index_type="HNSW", metric_type="IP",
                        params={"M": config.hnsw_m, "efConstruction": config.hnsw_ef_construction})  # fmt: skip
    else:
        index.add_index(field_name="dense", index_type="FLAT", metric_type="IP")
    client.create_collection(t.windows, schema=schema, index_params=index)
