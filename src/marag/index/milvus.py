"""The scale-out index: BM25 full-text search, dense vectors and their fusion in Milvus,
reached through an index URI (`marag.index.uri`):

    milvus:kb.db#hotpot               a Milvus Lite file (one process at a time)
    milvus://127.0.0.1:19530/hotpot   a `milvus-lite server`, a Milvus server or cluster
    milvus://host:19530/hotpot?token_env=MY_VAR&tls=true

Credentials come only from an environment variable ($MARAG_MILVUS_TOKEN, "user:password"
or an API key; `token_env=` names another), never from the URI, so the URI can go into a
run's config.json, logs and argv. They are sent in plain gRPC only to a loopback host or
when the URI says `tls=false` (a trusted network); elsewhere the URI must say `tls=true`.

An opened index holds a connection (for a Lite file, the file's lock): close it
(`MilvusIndex.close()`, or `with open_milvus(...) as idx:`) when done with it.

What is stored. An index NAME is two collections:

    NAME           one row per chunk: row (its position in the index, the primary key),
                   chunk_id, doc_id, title, text, the chunk's collection and metadata,
                   its BM25 terms, and the sparse vector Milvus computes from them
    NAME__windows  one row per dense window of a chunk: row, collection, vector

Everything is made as for an index directory (`IndexConfig`), so the two rank alike:
the same chunker; the same terms for BM25 (marag's analyzer on title + text: words,
lower-cased, Lucene's English stop words, Snowball stems; Milvus's own analyzers differ
between Milvus Lite and a server, and Lite has no stemmer), which Milvus turns into
BM25 sparse vectors and scores with the index's k1 and b; the same embedder and windows
for dense search (a chunk longer than the embedder reads is embedded as windows, and a
search asks Milvus for each chunk's best window, a grouped search: the local index's max
pooling); and the same hybrid, weighted reciprocal rank fusion of the two, ties by
position. benchmarks/RESULTS.md has the measured recall of both.

The manifest (config, corpus hash, embedder, counts) is stored with the collection as
its property "marag.manifest"; opening refuses an unfinished build, another format and
an embedder other than the one the vectors were made with. A build inserts in batches
and records after each how many chunks are in ("marag.done"), so a killed build resumes
where it stopped when the same command is run again.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import platform
import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

import marag
from marag.corpus.models import Chunk
from marag.errors import CorpusError, IndexFormatError, MaragError, UnknownNameError
from marag.index.base import Hit
from marag.index.config import IndexConfig
from marag.index.embed import embedder_info, get_embedder
from marag.index.traced import check_paging, index_text, recording
from marag.trace import SearchCall, record_search

ENV_TOKEN = "MARAG_MILVUS_TOKEN"
DEFAULT_PORT = 19530
# The layout of the two collections; another version is refused with a rebuild hint.
FORMAT_VERSION = 1
MANIFEST_KEY, DONE_KEY = "marag.manifest", "marag.done"
WINDOWS = "__windows"
MAX_WINDOWS = 1 << 16  # windows per chunk: a window's key is row * MAX_WINDOWS + i
KINDS = ("bm25", "dense", "hybrid")
# Room for the windows suffix inside Milvus's 255 characters.
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,200}$")
_HIT_FIELDS = ["row", "chunk_id", "doc_id", "title", "text"]
_ALL_FIELDS = [*_HIT_FIELDS, "chunk_pos", "collection", "metadata"]
_QUERY_LIMIT = 16384  # the most rows one Milvus query returns
# Bounds of Milvus VARCHAR fields, in bytes; longer values are refused before a build.
_MAX_BYTES = {"chunk_id": 2048, "doc_id": 2048, "title": 8192, "text": 65535, "terms": 65535}
_PAGE = 1000  # rows per query when reading a whole collection
_SEARCH_BATCH = 256  # queries per search request (keeps replies well under gRPC's limits)
_TIE_DECIMALS = 12  # as marag.index.hybrid: fused sums that differ in the last bits are ties


# The terms are marag's; Milvus only splits them again at the spaces between them.
MILVUS_ANALYZER = {"tokenizer": "standard"}


def bm25_terms(texts: Sequence[str]) -> list[str]:
    """Each text's BM25 terms as the local index sees them, space-separated."""
    from marag.index.bm25 import tokenize

    return [" ".join(words) for words in tokenize(texts)]


def _analyzer_record() -> dict[str, Any]:
    from marag.index.bm25 import TOKENIZER_SPEC

    return {"terms": TOKENIZER_SPEC, "milvus": MILVUS_ANALYZER}


# -- where: parsing an index URI --------------------------------------------------------------
@dataclass(frozen=True)
class MilvusTarget:
    text: str  # the URI as given (holds no secret)
    uri: str  # what the client connects to: an absolute .db path, or http(s)://host:port
    collection: str
    token_env: str | None = None  # the variable holding credentials (servers only)
    local_file: bool = False
    tls: bool | None = None  # what the URI said: tls=true, tls=false, or nothing (None)

    @property
    def windows(self) -> str:
        return self.collection + WINDOWS

    @property
    def shown(self) -> str:
        """The URI for messages: without its options (a mistyped URI could carry a
        secret there; a parsed one holds only token_env and tls, but messages are copied
        into issues and logs, so they never carry the query string)."""
        return _without_query(self.text)

    @property
    def where(self) -> str:
        return f"the Milvus Lite file {self.uri}" if self.local_file else f"Milvus at {urlsplit(self.uri).netloc}"


def _without_query(text: str) -> str:
    """A milvus:// URI without its ?options (what error messages show of it)."""
    return text.split("?", 1)[0] if text.startswith("milvus://") else text


# Option names that would carry a credential: refused by name, never echoed with a value.
_CREDENTIAL_OPTION = re.compile(r"token|pass|pwd|user|secret|key|auth|cred", re.I)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def parse_target(text: str) -> MilvusTarget:
    """`milvus:PATH.db#NAME` or `milvus://HOST[:PORT]/NAME[?token_env=VAR&tls=true]`.

    No message shows the URI's query string: a credential put there by mistake must not
    reach the terminal, a log or a bug report."""
    example = "milvus://HOST:19530/NAME (a server) or milvus:PATH.db#NAME (a Milvus Lite file)"
    shown = _without_query(text)
    if text.startswith("milvus://"):
        parts = urlsplit(text)
        if "@" in parts.netloc:
            raise MaragError(
                "credentials never go in an index URI (it is written to run configs and logs)",
                hint=f"remove them from the URI and export {ENV_TOKEN}=USER:PASSWORD (or an API key)",
            )
        try:
            host, port = parts.hostname, parts.port or DEFAULT_PORT
        except ValueError:
            raise MaragError(f"bad port in the index URI {shown!r}", hint=f"write it as {example}") from None
        name = parts.path.strip("/")
        if not host or not name or "/" in name:
            raise MaragError(f"cannot read the index URI {shown!r}", hint=f"write it as {example}")
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        secret = sorted(k for k in query if k != "token_env" and _CREDENTIAL_OPTION.search(k))
        if secret:
            raise MaragError(
                f"the index URI {shown!r} has the option {secret[0][:40]!r}: credentials come only from an environment variable, "
                "never from the URI (it is written to run configs and logs)",
                hint=f"remove it from the URI and export {ENV_TOKEN}=USER:PASSWORD (or an API key); ?token_env=VAR names another variable",
            )
        unknown = sorted(set(query) - {"token_env", "tls"})
        if unknown:
            raise MaragError(f"unknown option {unknown[0][:40]!r} in the index URI {shown!r}", hint="known options: token_env=VAR, tls=true")
        token_env = query.get("token_env") or ENV_TOKEN
        if not _ENV_NAME.fullmatch(token_env):  # e.g. the token itself, written where its variable's name goes
            raise MaragError(
                f"the option token_env in the index URI {shown!r} is not the name of an environment variable",
                hint="write ?token_env=VAR (letters, digits and _) and export VAR=USER:PASSWORD; the value never goes in the URI",
            )
        raw_tls = query.get("tls")
        if raw_tls is None:
            tls = None
        elif raw_tls.lower() in _TRUE + _FALSE:
            tls = raw_tls.lower() in _TRUE
        else:
            raise MaragError(f"the option tls in the index URI {shown!r} takes true or false", hint="write ?tls=true (or ?tls=false)")
        where = f"[{host}]" if ":" in host else host  # an IPv6 address keeps its brackets
        target = MilvusTarget(text, f"{'https' if tls else 'http'}://{where}:{port}", name, token_env, tls=tls)
    elif text.startswith("milvus:"):
        path, sep, name = text[len("milvus:") :].rpartition("#")
        if not sep or not path or not name:
            raise MaragError(f"cannot read the index URI {text!r}", hint=f"write it as {example}")
        if not path.endswith(".db"):
            raise MaragError(f"a Milvus Lite file name ends in .db, not {path!r}", hint=f"write it as {example}")
        target = MilvusTarget(text, os.path.abspath(os.path.expanduser(path)), name, local_file=True)
    else:
        raise MaragError(f"not a Milvus index URI: {shown!r}", hint=f"write it as {example}")
    if not _NAME.fullmatch(target.collection):
        raise MaragError(
            f"not a valid Milvus collection name: {target.collection!r}",
            hint="letters, digits and _, starting with a letter or _, at most 201 characters",
        )
    return target


# -- errors: one line each, with the fix -------------------------------------------------------
_AUTH_WORDS = re.compile(r"auth|credential|password|api key|unauthenticated|permission denied", re.I)


def _grpc_status(exc: BaseException) -> Any:
    """The gRPC status behind a pymilvus error (it wraps the RpcError it got), if any."""
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            return None
        code = getattr(seen, "code", None)
        if callable(code):
            try:
                return code()
            except Exception:
                return None
        seen = seen.__cause__ or seen.__context__
    return None


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def serve_hint(t: MilvusTarget) -> str:
    """How to give a Lite file's collection to many processes: serve it."""
    return (f"serve the file to many processes: milvus-lite server --data-dir {t.uri} --host 127.0.0.1 --port {DEFAULT_PORT}, "
            f"then use milvus://127.0.0.1:{DEFAULT_PORT}/{t.collection}")  # fmt: skip


def _build_hint(t: MilvusTarget) -> str:
    return f"build it: marag index DOCS --out {t.shown}"


def explain(exc: BaseException, t: MilvusTarget, doing: str) -> MaragError:
    """A MaragError for what a Milvus call raised: server down, wrong credentials,
    collection missing, a Lite file held by another process, or else Milvus's own words."""
    import grpc

    status = _grpc_status(exc)
    code = getattr(exc, "code", None)
    text = _one_line(getattr(exc, "message", None) or exc)
    if status in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED) or (code != 2 and _AUTH_WORDS.search(text)):
        var = t.token_env or ENV_TOKEN
        if os.environ.get(var):
            return MaragError(f"{t.where} refused the credentials in ${var}", hint=f"export {var}=USER:PASSWORD (or an API key) with the right value")
        return MaragError(f"{t.where} needs credentials and ${var} is not set", hint=f"export {var}=USER:PASSWORD (or an API key); they never go in the URI")
    if t.local_file and "open local milvus failed" in text.lower():
        return MaragError(
            f"cannot open {t.where}: another process has it open (a Lite file serves one process at a time)",
            hint=f"stop that process, or {serve_hint(t)}",
        )
    if code == 2 or status in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        port = urlsplit(t.uri).port or DEFAULT_PORT
        return MaragError(
            f"cannot reach {t.where}: the server is down or the address is wrong",
            hint=f"start it (e.g. milvus-lite server --data-dir DIR --host 127.0.0.1 --port {port}) or fix the URI {t.shown}",
        )
    if code == 100 or re.search(r"collection.*(not exist|not found)", text, re.I):
        return IndexFormatError(f"no collection {t.collection!r} in {t.where}", hint=_build_hint(t))
    return MaragError(f"{t.where} failed to {doing}: {text}", hint="check the Milvus server's log, then rerun the command")


@contextmanager
def translated(t: MilvusTarget, doing: str) -> Iterator[None]:
    try:
        yield
    except MaragError:
        raise
    except Exception as exc:  # pymilvus and grpc raise many types; each becomes one line
        raise explain(exc, t, doing) from None


def _quiet_client_logs() -> None:
    # pymilvus (and Milvus Lite) log every failed call with a traceback at ERROR; marag
    # reports each failure as one line with its fix, so their logs stay quiet unless the
    # user configured them.
    for name in ("pymilvus", "milvus_lite"):
        log = logging.getLogger(name)
        if log.level == logging.NOTSET:
            log.setLevel(logging.CRITICAL)


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_transport(t: MilvusTarget, token: str, from_env: bool) -> None:
    """Refuse to send a credential unencrypted off this machine, unless the URI says so.

    Without TLS, gRPC carries the token ("user:password" or an API key) as clear text in
    every request: anyone on the path to HOST can read it. Loopback never leaves the
    machine; `tls=false` written in the URI is the user's informed choice (a trusted
    network); anything else must ask for TLS."""
    if not token or t.local_file or t.tls is not None:
        return
    host = urlsplit(t.uri).hostname or ""
    if _loopback(host):
        return
    what = f"the credentials in ${t.token_env}" if from_env else "the credentials"
    raise MaragError(
        f"refusing to send {what} unencrypted to {t.where}: the index URI does not ask for TLS",
        hint="add tls=true to the URI's options (?tls=true; the server must speak TLS), "
        "or ?tls=false to send them unencrypted on a network you trust",
    )


# Milvus Lite: the file is served by an in-process server that holds the file's lock
# until it is stopped; closing a client does not stop it. marag counts its clients of
# each file and stops the server when the last one closes, so the lock is released (for
# another process, or another `milvus-lite server`) as soon as marag is done with it.
_lite_clients: dict[str, int] = {}
_lite_lock = threading.Lock()


def _pymilvus_major() -> int:
    try:
        return int((_lib_version("pymilvus") or "0").split(".")[0])
    except ValueError:
        return 0


def connect(t: MilvusTarget, token: str | None = None):
    """A MilvusClient for `t`; the token from `token` (Python callers) or `$t.token_env`.
    Close it with `disconnect(client, t)`."""
    try:
        from pymilvus import MilvusClient
    except ImportError:
        raise MaragError("the Milvus backend needs pymilvus and milvus-lite", hint="pip install 'marag[milvus]'") from None
    _quiet_client_logs()
    from_env = token is None
    if token is None:
        token = os.environ.get(t.token_env, "") if t.token_env else ""
    check_transport(t, token, from_env)
    options: dict[str, Any] = {}
    if t.local_file:
        # its own channel (pymilvus 3 shares one per address otherwise): closing it closes
        # the channel to the server that `disconnect` stops
        options = {"dedicated": True} if _pymilvus_major() >= 3 else {}
        with _lite_lock:
            _lite_clients[t.uri] = _lite_clients.get(t.uri, 0) + 1
    try:
        with translated(t, "connect"):
            return MilvusClient(uri=t.uri, token=token, grpc_options=_GRPC_OPTIONS, **options)
    except BaseException:
        if t.local_file:
            _release_lite(t.uri)
        raise


def disconnect(client, t: MilvusTarget) -> None:
    """Close a client from `connect`; the last of a Lite file's in this process also
    stops the file's server, which releases its lock. Never raises."""
    try:
        client.close()
    except Exception:  # closing a broken connection: nothing left to release
        pass
    if t.local_file:
        _release_lite(t.uri)


def _release_lite(path: str) -> None:
    with _lite_lock:
        left = _lite_clients.get(path, 0) - 1
        if left > 0:
            _lite_clients[path] = left
            return
        _lite_clients.pop(path, None)
        try:
            from milvus_lite.server_manager import server_manager_instance

            server_manager_instance.release_server(path)
        except Exception:  # an older milvus-lite, or a server that stopped already
            pass


# pymilvus pings an idle connection every 10 s; a gRPC server in Python (`milvus-lite
# server`) allows one ping in 5 minutes without data and answers more with GOAWAY
# "too many pings", which drops the connection in the middle of a run (seen on a loaded
# machine during long batched calls). Ping no more often than that server accepts.
_GRPC_OPTIONS = {"grpc.keepalive_time_ms": 300_000, "grpc.keepalive_permit_without_calls": False}


# -- building -------------------------------------------------------------------------------
def _lib_version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


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


# -- opening and searching ---------------------------------------------------------------------
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


class MilvusIndex:
    """An opened Milvus index, with the interface of an index directory (`Index`) that
    strategies and the evaluation use: manifest, config, retriever(kind, collection),
    collections(), chunks, position(chunk_id).

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

    def __enter__(self) -> "MilvusIndex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
