"""An opened Milvus index (`MilvusIndex`, an `Index` as an index directory is) and its
retrievers (`MilvusRetriever`): BM25, dense (each chunk's best window, a grouped search)
and their weighted reciprocal rank fusion, ranked as the local index ranks them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from marag.corpus.models import Chunk
from marag.errors import IndexFormatError, MaragError, UnknownNameError
from marag.index.base import ClosingIndex, Hit
from marag.index.config import IndexConfig
from marag.index.embed import get_embedder
from marag.index.milvus.client import _one_line, connect, disconnect, translated
from marag.index.milvus.layout import DONE_KEY, FORMAT_VERSION, _analyzer_record, _manifest_of, _read_properties, bm25_terms
from marag.index.milvus.target import WINDOWS, MilvusTarget, _build_hint, parse_target
from marag.index.traced import check_paging, recording
from marag.trace import SearchCall, record_search

KINDS = ("bm25", "dense", "hybrid")
_HIT_FIELDS = ["row", "chunk_id", "doc_id", "title", "text"]
_ALL_FIELDS = [*_HIT_FIELDS, "chunk_pos", "collection", "metadata"]
_QUERY_LIMIT = 16384  # the most rows one Milvus query returns
_PAGE = 1000  # rows per query when reading a whole collection
_SEARCH_BATCH = 256  # queries per search request (keeps replies well under gRPC's limits)
_TIE_DECIMALS = 12  # as marag.index.hybrid: fused sums that differ in the last bits are ties


def open_milvus(target: str | MilvusTarget, embedder_options: dict[str, Any] | None = None, token: str | None = None) -> "MilvusIndex":
    """The finished index at `target`: refuses a missing, unfinished or foreign
    collection and another format version; the embedder is checked when dense search
    is first asked for (`retriever`)."""
    t = parse_target(target) if isinstance(target, str) else target
    if t.local_file and not os.path.exists(t.uri):  # the client would create an empty one
        raise IndexFormatError(f"no Milvus Lite file at {t.uri}", hint=_build_hint(t))
    client = connect(t, token)
    try:
        return _checked(client, t, embedder_options)
    except BaseException:
        disconnect(client, t)  # a failed open holds no connection (for a Lite file: no lock)
        raise


def _checked(client, t: MilvusTarget, embedder_options: dict[str, Any] | None) -> "MilvusIndex":
    props = _read_properties(client, t)
    if props is None:
        with translated(t, "list collections"):
            others = sorted(n for n in client.list_collections() if not n.endswith(WINDOWS))
        there = f" (it has: {', '.join(others[:10])}{', …' if len(others) > 10 else ''})" if others else ""
        raise IndexFormatError(f"no collection {t.collection!r} in {t.where}{there}", hint=_build_hint(t))
    manifest = _manifest_of(props, t)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise IndexFormatError(
            f"{t.shown} was built by marag {manifest.get('marag_version', '?')} in Milvus layout {manifest.get('format_version')}; "
            f"this marag reads layout {FORMAT_VERSION}",
            hint=f"rebuild it: marag index DOCS --out {t.shown} --overwrite",
        )
    if (manifest.get("analyzer") or {}).get("terms") != _analyzer_record()["terms"]:
        raise IndexFormatError(
            f"{t.shown} holds BM25 terms made by another analyzer than this marag's",
            hint=f"rebuild it: marag index DOCS --out {t.shown} --overwrite",
        )
    if manifest.get("status") != "complete":
        done, total = int(props.get(DONE_KEY, 0)), manifest.get("counts", {}).get("chunks", "?")
        raise IndexFormatError(
            f"{t.shown} is not finished: {done:,} of {total:,} chunks are in",
            hint=f"finish it by rerunning the same `marag index DOCS --out {t.shown}` (it resumes)",
        )
    with translated(t, "load the collections"):
        for name in ([t.windows] if manifest.get("embedder") else []) + [t.collection]:
            client.load_collection(name)
    return MilvusIndex(t, client, manifest, embedder_options)


def check_embedder(embedder, recorded: dict[str, Any], t: MilvusTarget) -> None:
    """Refuse to embed queries with another model than the one that made the vectors."""
    sha, want = getattr(embedder, "model_sha256", None), recorded.get("model_sha256")
    if embedder.dim != recorded.get("dim") or (sha and want and sha != want):
        mine = f"{embedder.name} ({embedder.dim}-dim{f', sha256 {sha[:12]}' if sha else ''})"
        theirs = f"{recorded.get('name')} ({recorded.get('dim')}-dim{f', sha256 {want[:12]}' if want else ''})"
        raise IndexFormatError(
            f"embedder mismatch: {t.shown} holds vectors of {theirs}, but this installation's is {mine}",
            hint=f"rebuild it with this installation: marag index DOCS --out {t.shown} --overwrite (or install the model it was built with)",
        )


class MilvusIndex(ClosingIndex):
    """An opened Milvus index, an `Index` (marag.index.base) as an index directory is:
    manifest, config, retriever(kind, collection), collections(), chunks,
    position(chunk_id), close().

    It holds a connection (for a Lite file, the file's lock, released when the last
    index of the file in this process closes): `close()` it, or use it in a `with`."""

    def __init__(self, target: MilvusTarget, client, manifest: dict[str, Any], embedder_options: dict[str, Any] | None = None):
        self.target, self._client, self.manifest = target, client, manifest
        self.path = target.shown  # what messages call it (no ?options)
        self.name = target.collection
        try:
            self.config = IndexConfig.model_validate(manifest.get("config", {}))
        except Exception as exc:
            raise IndexFormatError(f"{target.shown} has an invalid config in its manifest: {_one_line(exc)}",
                                   hint=f"rebuild it: marag index DOCS --out {target.shown} --overwrite") from None  # fmt: skip
        self.embedder_options = dict(embedder_options or {})
        self._embedder = None
        self._chunks: list[Chunk] | None = None  # read on first use (strategies that need them)
        self._chunk_collections: list[str | None] = []
        self._positions: dict[str, int] | None = None
        self._retrievers: dict[tuple[str, str | None], MilvusRetriever] = {}
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"MilvusIndex({self.target.shown!r}, parts={self.parts}, chunks={self.chunks_count})"

    # -- the connection ------------------------------------------------------------------------
    @property
    def client(self):
        client = self._client
        if client is None:
            raise MaragError(f"the index {self.target.shown} is closed", hint="open it again (marag.index.open_index) to search it")
        return client

    @property
    def closed(self) -> bool:
        return self._client is None

    def close(self) -> None:
        """Close the connection (a Lite file's lock goes with the last one). Idempotent."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            disconnect(client, self.target)

    # -- what it holds ------------------------------------------------------------------------
    @property
    def parts(self) -> list[str]:
        return list(self.config.retrievers)

    def has(self, kind: str) -> bool:
        if kind == "hybrid":
            return sum(1 for n, w in self.config.hybrid_weights.items() if w > 0 and n in self.parts) >= 2
        return kind in self.parts

    @property
    def default_kind(self) -> str:
        return "hybrid" if self.has("hybrid") else self.parts[0]

    @property
    def chunks_count(self) -> int:
        return int(self.manifest.get("counts", {}).get("chunks", 0))

    @property
    def documents_count(self) -> int:
        return int(self.manifest.get("counts", {}).get("documents", 0))

    def collections(self) -> list[str]:
        return list(self.manifest.get("collections") or [])

    def collection_id(self, name: str) -> int:
        names = self.collections()
        if not names:
            raise IndexFormatError(f"{self.target.shown} has no collections", hint="rebuild it with --collection-field FIELD or --split kmeans:N")
        if name not in names:
            raise UnknownNameError(f"unknown collection {name!r}", hint=f"choose one of: {', '.join(names)}")
        return names.index(name)

    @property
    def embedder(self):
        """The query embedder, loaded on first use and checked against the manifest."""
        with self._lock:
            if self._embedder is None:
                recorded = self.manifest.get("embedder") or {}
                name = recorded.get("name") or self.config.embedder
                # as the local dense index: queries come one or two at a time while a local
                # model computes on the same cores, so one thread that sleeps when idle
                options = ({"threads": 1, "spin": False} if name == "minilm" else {}) | self.embedder_options
                emb = get_embedder(name, **options)
                check_embedder(emb, recorded, self.target)
                self._embedder = emb
            return self._embedder

    # -- rows ----------------------------------------------------------------------------------
    def _pages(self, name: str, fields: list[str], flt: str = "") -> Iterator[dict[str, Any]]:
        """Every row of collection `name` (matching `flt`), read by ranges of chunk rows;
        a range whose reply may have been cut at Milvus's limit is read again in halves."""
        ranges = [(lo, min(lo + _PAGE, self.chunks_count)) for lo in range(0, self.chunks_count, _PAGE)]
        with translated(self.target, "read the collection"):
            while ranges:
                lo, hi = ranges.pop(0)
                cond = f"row >= {lo} and row < {hi}" + (f" and ({flt})" if flt else "")
                got = self.client.query(name, filter=cond, output_fields=fields, limit=_QUERY_LIMIT)
                if len(got) >= _QUERY_LIMIT and hi - lo > 1:
                    mid = (lo + hi) // 2
                    ranges[:0] = [(lo, mid), (mid, hi)]
                    continue
                yield from got

    @property
    def chunks(self) -> list[Chunk]:
        """Every chunk, in index order (read from Milvus on first use)."""
        with self._lock:
            if self._chunks is None:
                rows = sorted(self._pages(self.target.collection, _ALL_FIELDS), key=lambda r: r["row"])
                self._chunks = [Chunk(id=r["chunk_id"], doc_id=r["doc_id"], text=r["text"], title=r["title"],
                                      position=int(r["chunk_pos"]), metadata=dict(r.get("metadata") or {})) for r in rows]  # fmt: skip
                names = self.collections()
                self._chunk_collections = [names[r["collection"]] if r["collection"] >= 0 else None for r in rows]
            return self._chunks

    @property
    def chunk_collections(self) -> list[str | None]:
        self.chunks
        return self._chunk_collections

    def position(self, chunk_id: str) -> int:
        with self._lock:
            if self._positions is None:
                self._positions = {c.id: i for i, c in enumerate(self.chunks)}
        try:
            return self._positions[chunk_id]
        except KeyError:
            raise UnknownNameError(f"no chunk {chunk_id!r} in {self.target.shown}", hint="chunk ids look like DOC_ID#POSITION") from None

    def hits_fields(self, rows: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The hit fields of the chunks at `rows` (one request)."""
        if not rows:
            return {}
        got = self.client.get(self.target.collection, ids=list(rows), output_fields=_HIT_FIELDS)
        return {int(r["row"]): r for r in got}

    def chunk_vectors(self, collection: str | None = None) -> np.ndarray:
        """One unit vector per chunk (in index order; of `collection` only when given):
        the normalised mean of its windows, as `DenseRetriever.chunk_vectors`."""
        flt = f"collection == {self.collection_id(collection)}" if collection is not None else ""
        rows, vectors = [], []
        for r in self._pages(self.target.windows, ["row", "dense"], flt):
            rows.append(int(r["row"]))
            vectors.append(r["dense"])
        if not rows:
            return np.zeros((0, int(self.manifest["embedder"]["dim"])), dtype=np.float32)
        rows_arr, vecs = np.asarray(rows), np.asarray(vectors, dtype=np.float32)
        order = np.argsort(rows_arr, kind="stable")
        rows_arr, vecs = rows_arr[order], vecs[order]
        starts = np.flatnonzero(np.r_[True, rows_arr[1:] != rows_arr[:-1]])
        sums = np.add.reduceat(vecs, starts, axis=0)
        return sums / np.linalg.norm(sums, axis=1, keepdims=True).clip(1e-12)

    # -- retrievers ------------------------------------------------------------------------------
    def retriever(self, kind: str | None = None, collection: str | None = None) -> "MilvusRetriever":
        kind = kind or self.default_kind
        if kind not in KINDS:
            raise UnknownNameError(f"unknown retriever {kind!r}", hint=f"choose one of: {', '.join(KINDS)}")
        if not self.has(kind):
            raise IndexFormatError(f"{self.target.shown} has no {kind!r} part (it has: {', '.join(self.parts)})",
                                   hint="use one of those, or rebuild with --retrievers bm25,dense")  # fmt: skip
        key = (kind, collection)
        with self._lock:
            if key not in self._retrievers:
                if kind != "bm25":
                    self.embedder  # a mismatched embedder fails now, before any question
                flt = f"collection == {self.collection_id(collection)}" if collection is not None else ""
                self._retrievers[key] = MilvusRetriever(self, kind, flt, collection)
            return self._retrievers[key]

    def _rank_bm25(self, queries: list[str], want: int, flt: str, fields: bool) -> list[list[tuple[int, float, dict | None]]]:
        out: list[list[tuple[int, float, dict | None]]] = [[] for _ in queries]
        terms = bm25_terms(queries)
        # a query of stop words only has no terms: no hits (a server may refuse it outright)
        asked = [i for i, q in enumerate(terms) if q]
        for lo in range(0, len(asked), _SEARCH_BATCH):
            part = asked[lo : lo + _SEARCH_BATCH]
            res = self.client.search(self.target.collection, data=[terms[i] for i in part], anns_field="sparse", limit=want, filter=flt,
                                     output_fields=_HIT_FIELDS if fields else ["row"], search_params={"metric_type": "BM25"})  # fmt: skip
            for i, hits in zip(part, res):
                # Milvus Lite reports a BM25 match as a distance (minus the score), a server
                # as the score itself: the magnitude is the score either way
                out[i] = [(int(h["entity"]["row"]), abs(float(h["distance"])), h["entity"] if fields else None) for h in hits]
        return [_by_score(r) for r in out]

    def _rank_dense(self, queries: list[str], want: int, flt: str, fields: bool = False) -> list[list[tuple[int, float, dict | None]]]:
        vectors = np.asarray(self.embedder.embed(queries), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True).clip(1e-12)
        params: dict[str, Any] = {"metric_type": "IP"}
        if self.config.ann == "hnsw":
            params["params"] = {"ef": max(self.config.hnsw_ef_search, want)}
        out = []
        for lo in range(0, len(queries), _SEARCH_BATCH):
            # grouped by chunk: each chunk's best window, as the local index's max pooling
            res = self.client.search(self.target.windows, data=vectors[lo : lo + _SEARCH_BATCH].tolist(), anns_field="dense", limit=want,
                                     filter=flt, group_by_field="row", output_fields=["row"], search_params=params)  # fmt: skip
            out += [_by_score([(int(h["entity"]["row"]), float(h["distance"]), None) for h in hits]) for hits in res]
        return out

    def _rank_hybrid(self, queries: list[str], want: int, flt: str, fields: bool = False) -> list[list[tuple[int, float, dict | None]]]:
        cfg = self.config
        depth = max(want, cfg.hybrid_depth)
        members = [(n, w) for n, w in cfg.hybrid_weights.items() if w > 0 and n in self.parts]
        rankings = {n: (self._rank_bm25(queries, depth, flt, False) if n == "bm25" else self._rank_dense(queries, depth, flt)) for n, _ in members}
        out = []
        for qi in range(len(queries)):
            fused: dict[int, float] = {}
            for name, w in members:
                for rank, (row, _, _) in enumerate(rankings[name][qi], 1):
                    fused[row] = fused.get(row, 0.0) + w / (cfg.rrf_k + rank)
            best = sorted(fused.items(), key=lambda item: (-round(item[1], _TIE_DECIMALS), item[0]))[:want]
            out.append([(row, score, None) for row, score in best])
        return out


def _by_score(ranking: list[tuple[int, float, dict | None]]) -> list[tuple[int, float, dict | None]]:
    # equal scores by position, as every marag retriever (Milvus orders ties as it likes)
    return sorted(ranking, key=lambda r: (-r[1], r[0]))


class MilvusRetriever:
    """`search(query, k, offset)` over a Milvus index (the `Retriever` protocol), of one
    collection when `flt` says so; every search is recorded in the current trace like
    marag's own retrievers'."""

    def __init__(self, index: MilvusIndex, kind: str, flt: str = "", collection: str | None = None):
        self.index, self.kind, self._filter, self.collection = index, kind, flt, collection
        self.name = f"milvus-{kind}" + (f"[{collection}]" if collection else "")

    def __repr__(self) -> str:
        return f"MilvusRetriever(name={self.name!r}, index={self.index.target.shown!r})"

    @property
    def embedder(self):
        return self.index.embedder

    def chunk_vectors(self) -> np.ndarray:
        return self.index.chunk_vectors(self.collection)

    def search(self, query: str, k: int = 10, offset: int = 0) -> list[Hit]:
        return self.search_batch([query], k, offset)[0]

    def search_batch(self, queries: Sequence[str], k: int = 10, offset: int = 0) -> list[list[Hit]]:
        check_paging(k, offset)
        if isinstance(queries, str):
            raise TypeError("search_batch() takes a list of queries; use search() for one query")
        queries = list(queries)
        if not queries:
            return []
        t0, wall = time.perf_counter(), time.time()
        idx = self.index
        with translated(idx.target, "search"):
            ranked = getattr(idx, f"_rank_{self.kind}")(queries, k + offset, self._filter, True)
            pages = [r[offset:] for r in ranked]
            known = {row: fields for page in pages for row, _, fields in page if fields is not None}
            known |= idx.hits_fields(sorted({row for page in pages for row, _, _ in page} - set(known)))
        results = [
            [Hit(doc_id=known[row]["doc_id"], chunk_id=known[row]["chunk_id"], score=score, text=known[row]["text"], title=known[row]["title"])
             for row, score, _ in page if row in known]
            for page in pages
        ]  # fmt: skip
        if recording():
            latency = (time.perf_counter() - t0) / len(queries)  # a batch is one computation: equal shares
            for q, hits in zip(queries, results):
                record_search(SearchCall(retriever=self.name, query=q, k=k, offset=offset, latency_s=round(latency, 6), started=round(wall, 4),
                                         hits=[{"doc_id": h.doc_id, "chunk_id": h.chunk_id, "score": h.score} for h in hits]))  # fmt: skip
        return results
