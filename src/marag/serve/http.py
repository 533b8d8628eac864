"""The HTTP edge every request passes before a route sees it, and responses that can
always be encoded.

`Gate` is plain ASGI middleware (it must see the connection before any body is read):

- where: a server on loopback answers only requests addressed to a loopback name
  (`allowed_hosts`): a web page whose own name an attacker points at 127.0.0.1 (DNS
  rebinding) would otherwise be "same origin" with it.
- who: `/health` and the sign-in page are open; every other request needs the bearer
  token, or a valid session cookie on a GET/HEAD (the cookie opens the pages and the
  read-only API; requests that start work, POST /ask and POST /runs, need the header,
  so a signed-in browser cannot be made to start them). A browser asking for a page
  without either is sent to the sign-in page; an API client gets 401 JSON. A wrong
  token in the header counts with wrong sign-ins (`Sessions`): past the limit, every
  request with the header gets 429 and Retry-After, so the token cannot be guessed
  through the API either.
- how much: a body must announce its size (411 otherwise) and stay under the limit
  (413); it must arrive whole within `body_timeout_s`, or the server answers 408 and
  closes the connection, so clients that announce a body and never send it cannot
  hold connections open. The body is read here, before any route runs, and replayed.
- when the server stops: a request its stop cancels (past `marag serve
  --shutdown-grace`) before it was answered gets 503 with Retry-After.
- what the browser may do with a response: no sniffing, no framing, no scripts,
  styles, images or connections from anywhere but this server (the pages never load
  anything from a CDN), no referrer. The one inline script the pages carry,
  `pages.FILTER_JS`, is allowed by its hash, not by 'unsafe-inline': markup that gets
  into a page past the escaping still cannot run a script.

`SafeJSON` and `SafeHTML` encode text with lone surrogates (valid in a JSON string
escape such as "\\ud800", invalid in UTF-8) instead of failing with a 500.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse

from marag.serve.auth import Sessions, cookie_name
from marag.serve.pages import FILTER_JS

def script_hash(script: str) -> str:
    """A CSP source that allows exactly this inline script (its text between the tags)."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode() + "'"


def content_security_policy(scripts: Iterable[str] = ()) -> str:
    """The pages' policy; `scripts` are the inline scripts a page may run."""
    allowed = " ".join(["'self'", *map(script_hash, scripts)])
    return (f"default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src {allowed}; "
            "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")  # fmt: skip


SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    # a response that sets its own policy keeps it (/docs allows its own inline script)
    (b"content-security-policy", content_security_policy([FILTER_JS]).encode()),
]
OPEN_PATHS = frozenset({"/health", "/signin", "/signout"})
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
# Seconds an idle connection stays open. uvicorn's own 5 s equals httpx's pool expiry:
# a client that sends on a pooled connection just as the server closes it gets a dropped
# connection (httpx ReadError, not retried): the likely cause of the 30-minute soak's 2 in 39,600
# requests. Kept open longer than clients keep theirs, the client closes first.
KEEP_ALIVE_S = 65
READ_METHODS = frozenset({"GET", "HEAD"})


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class SafeJSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        try:
            text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except ValueError:  # NaN or infinity (a metric over nothing): null, as JSON has no such number
            text = json.dumps(_finite(content), ensure_ascii=False, separators=(",", ":"))
        # A lone surrogate becomes the escape "\ud800", which is what it was in JSON.
        return text.encode("utf-8", "backslashreplace")


class SafeHTML(HTMLResponse):
    def render(self, content: Any) -> bytes:
        return content.encode("utf-8", "replace") if isinstance(content, str) else super().render(content)


class Gate:
    def __init__(self, app, *, sessions: Sessions | None, token: str | None, max_body_bytes: int, body_timeout_s: float,
                 allowed_hosts: frozenset[str] | None = None):  # fmt: skip
        self.app = app
        self.allowed_hosts = allowed_hosts
        # the count of wrong tokens lives in Sessions, shared with /signin
        self.sessions = sessions if sessions is not None or token is None else Sessions(token)
        self.token = token
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        send = self._secured(send)
        headers = Headers(scope=scope)
        length = headers.get("content-length")
        announced = length is not None and length != "0" or "transfer-encoding" in headers

        async def refuse(response) -> None:
            if announced:  # its body is not read: the connection cannot carry another request
                response.headers["connection"] = "close"
            await response(scope, receive, send)

        if self.allowed_hosts is not None and _hostname(headers.get("host", "")) not in self.allowed_hosts:
            return await refuse(SafeJSON({"error": "this server answers only requests addressed to it by a loopback name",
                                          "hint": f"open it as http://127.0.0.1:<port>/ (names: {', '.join(sorted(self.allowed_hosts))})"}, 400))  # fmt: skip
        if self.token and scope["path"] not in OPEN_PATHS:
            if "authorization" in headers and self.sessions.locked():  # checked before the token: see marag.serve.auth
                wait = self.sessions.retry_after()
                return await refuse(SafeJSON({"error": "too many wrong tokens in the last minute",
                                              "hint": f"retry in {wait} s with the token the server was started with"},
                                             429, headers={"retry-after": str(wait)}))  # fmt: skip
            if not self._admitted(scope, headers):
                return await refuse(self._unauthenticated(scope, headers))
        # ASCII digits only: str.isdigit() also takes "²", which int() refuses
        if length is not None and not (length.isascii() and length.isdigit()):
            return await refuse(SafeJSON({"error": f"Content-Length must be a number, not {length[:40]!r}",
                                          "hint": "send the body's size in bytes, e.g. Content-Length: 42"}, 400))  # fmt: skip
        if length is not None and int(length) > self.max_body_bytes:
            return await refuse(SafeJSON({"error": f"request body over {self.max_body_bytes} bytes"}, 413))
        if length is None and (scope["method"] in ("POST", "PUT", "PATCH") or "transfer-encoding" in headers):
            return await refuse(SafeJSON({"error": "send the body with a Content-Length header"}, 411))
        if length is not None and int(length) > 0:
            body = await self._read_body(receive)
            if body is None:  # the client went away
                return
            if isinstance(body, SafeJSON):
                return await refuse(body)
            receive = _replay(body, receive)
        started = []  # the response's first message, once sent

        async def tracked(message) -> None:
            if not started:
                started.append(message["type"])
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            # The server is stopping and the requests still running when its grace ran out
            # (`marag serve --shutdown-grace`) are cancelled: one not answered yet gets 503
            # and may retry, where uvicorn sent a bare 500 "Internal Server Error" and
            # logged a traceback for each (benchmarks/soak.py). A started answer is cut.
            if started:
                raise
            await SafeJSON({"error": "the server is stopping", "hint": "retry in a moment, when it is back"}, 503,
                           headers={"retry-after": "5", "connection": "close"})(scope, receive, send)  # fmt: skip

    def _admitted(self, scope, headers: Headers) -> bool:
        if "authorization" in headers and self.sessions.bearer(headers["authorization"]):  # a wrong one is counted
            return True
        if scope["method"] in READ_METHODS and self.sessions is not None:
            port = (scope.get("server") or (None, None))[1]
            return self.sessions.valid(cookie_parser(headers.get("cookie", "")).get(cookie_name(port)))
        return False

    def _unauthenticated(self, scope, headers: Headers):
        if scope["method"] in READ_METHODS and "text/html" in headers.get("accept", ""):
            target = scope["path"] + ("?" + scope["query_string"].decode("latin-1") if scope.get("query_string") else "")
            return RedirectResponse("/signin?next=" + quote(target, safe=""), 303)
        hint = "send Authorization: Bearer <token> (a browser signs in at /signin)"
        if scope["method"] not in READ_METHODS:
            hint = "send Authorization: Bearer <token>: a browser session opens pages, not requests that start work"
        return SafeJSON({"error": "missing or wrong token", "hint": hint}, 401)

    async def _read_body(self, receive) -> bytes | SafeJSON | None:
        """The whole body, within the size limit and the deadline (a total deadline, so a
        client trickling a byte at a time is cut off too)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_s
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                return SafeJSON({"error": f"the request body did not arrive within {self.body_timeout_s:g} s",
                                 "hint": "send the whole body right after the headers"}, 408)  # fmt: skip
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body_bytes:
                return SafeJSON({"error": f"request body over {self.max_body_bytes} bytes"}, 413)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _secured(self, send):
        extra = SECURITY_HEADERS + ([(b"cache-control", b"no-store")] if self.token else [])

        async def secured(message):
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = list(message.get("headers", [])) + [(k, v) for k, v in extra if k not in present]
            await send(message)

        return secured


def _hostname(host: str) -> str:
    """The name in a Host header, without its port ("[::1]:8321" -> "::1")."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _replay(body: bytes, receive):
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the client to go away, as usual

    return replay
