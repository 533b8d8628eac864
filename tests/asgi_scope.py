"""An HTTP request as an ASGI scope, for tests that call a marag app directly: to send a
path exactly as written (clients resolve ".." before sending) or to cancel a request
midway as uvicorn does."""

from __future__ import annotations


def http_scope(method: str, path: str, query: str = "", headers: list[tuple[bytes, bytes]] | None = None) -> dict:
    """The scope of `method path?query` from a loopback client, with a Host header and `headers`."""
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
            "server": ("127.0.0.1", 8321), "client": ("127.0.0.1", 5555),
            "headers": [(b"host", b"127.0.0.1"), *(headers or [])]}  # fmt: skip
