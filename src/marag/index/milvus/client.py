"""Connecting to Milvus: credentials from the environment, never sent unencrypted off
the machine unless the URI says so; a Lite file's lock released with its last client;
and every pymilvus or gRPC error turned into one line with its fix (`explain`,
`translated`).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import urlsplit

from marag.errors import IndexFormatError, MaragError
from marag.index.milvus.target import DEFAULT_PORT, ENV_TOKEN, MilvusTarget, _build_hint, serve_hint

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


def _lib_version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None
