"""Browser sessions without a server: the cookie value is not the token, expires,
is revoked by signing out and by a restart, and wrong tokens are rate-limited; the
sign-in only ever sends back to this server."""

from __future__ import annotations

from marag.serve.auth import Sessions, bearer_matches, cookie_name, safe_next


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_value_is_not_the_token_and_is_checked():
    s = Sessions("s3cret-token", clock=Clock())
    value = s.sign_in("s3cret-token")
    assert value and "s3cret-token" not in value and s.valid(value)
    issued, nonce, mac = value.split(".")
    assert not s.valid(f"{issued}.{nonce}.{'0' * len(mac)}")  # a forged MAC
    assert not s.valid(f"{int(issued) + 1}.{nonce}.{mac}")  # a changed issue time
    assert not s.valid(None) and not s.valid("") and not s.valid("a.b") and not s.valid("x.y.z")
    assert s.sign_in("wrong") is None and s.sign_in("") is None
    assert not Sessions("s3cret-token").valid(value)  # a restarted server draws a new key


def test_sessions_expire_and_sign_out_revokes():
    clock = Clock()
    s = Sessions("t", max_age_s=100, clock=clock)
    a, b = s.sign_in("t"), s.sign_in("t")
    clock.now += 99
    assert s.valid(a) and s.valid(b)
    s.sign_out(a)
    assert not s.valid(a) and s.valid(b)  # only the session signed out
    clock.now += 2
    assert not s.valid(b)  # expired


def test_wrong_tokens_lock_sign_in_for_a_minute():
    clock = Clock()
    s = Sessions("t", max_failures=3, clock=clock)
    for _ in range(3):
        assert not s.locked()
        s.sign_in("guess")
    assert s.locked()
    clock.now += 61
    assert not s.locked()


def test_bearer_header_and_cookie_names():
    assert bearer_matches("Bearer tok", "tok") and bearer_matches("bearer tok", "tok")
    assert not bearer_matches("Bearer tok2", "tok") and not bearer_matches("tok", "tok") and not bearer_matches("", "tok")
    assert cookie_name(8321) != cookie_name(8322)  # two servers on one host keep their own sessions


def test_sign_in_only_returns_to_a_path_of_this_server():
    assert safe_next("/view/runs/demo?x=1") == "/view/runs/demo?x=1"
    for bad in (None, "", "//evil.example", "/\\evil.example", "https://evil.example", "javascript:alert(1)",
                "/x\r\nSet-Cookie: a=b", "/signin", "/signout"):
        assert safe_next(bad) == "/", bad


# -- the Gate: wrong bearer tokens count with wrong sign-ins; Content-Length; the CSP ---------
TOKEN = "a-token-of-enough-length"


def gate(sessions: Sessions):
    from marag.serve.http import Gate

    async def app(scope, receive, send):  # every admitted request: 200
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return Gate(app, sessions=sessions, token=TOKEN, max_body_bytes=1000, body_timeout_s=1.0)


def call(app, method: str = "GET", path: str = "/runs", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request through an ASGI app, headers exactly as given: (status, headers, body)."""
    import asyncio

    scope = {"type": "http", "method": method, "path": path, "query_string": b"", "server": ("127.0.0.1", 8321),
             "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]}  # fmt: skip
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body


def test_wrong_bearer_tokens_are_counted_and_lock_the_api_with_retry_after():
    clock = Clock()
    sessions = Sessions(TOKEN, max_failures=3, clock=clock)
    app = gate(sessions)
    right = {"Authorization": f"Bearer {TOKEN}"}
    assert call(app, headers=right)[0] == 200
    sessions.sign_in("a wrong sign-in")  # one count for sign-in and the header
    assert [call(app, headers={"Authorization": f"Bearer guess{i}"})[0] for i in range(2)] == [401, 401]
    assert call(app)[0] == 401  # no header is no guess: never 429, not counted
    clock.now += 30
    status, headers, body = call(app, headers=right)  # locked: no token is checked, the right one neither
    assert status == 429 and headers["retry-after"] == "31" and b"too many wrong tokens" in body
    assert call(app, "POST", "/ask", {"Authorization": "Bearer guess", "Content-Length": "2"})[1]["connection"] == "close"
    assert call(app, "GET", "/health", {"Authorization": "Bearer guess"})[0] == 200  # open paths stay open
    clock.now += 31  # the first failure is a minute old
    assert call(app, headers=right)[0] == 200 and not sessions.locked()


def test_a_content_length_that_is_not_a_number_is_a_bad_request():
    app = gate(Sessions(TOKEN))
    for length in ("abc", "-1", "1e3", "²", " 5"):
        status, _, body = call(app, "POST", "/ask", {"Authorization": f"Bearer {TOKEN}", "Content-Length": length})
        assert status == 400 and b"Content-Length must be a number" in body, (length, status, body)
    status, _, body = call(app, "POST", "/ask", {"Authorization": f"Bearer {TOKEN}", "Content-Length": "5000"})
    assert status == 413 and b"over 1000 bytes" in body


def test_the_only_inline_script_is_allowed_by_its_hash():
    import base64
    import hashlib

    from marag.serve.pages import FILTER_JS, Links, page

    policy = call(gate(Sessions(TOKEN)), headers={"Authorization": f"Bearer {TOKEN}"})[1]["content-security-policy"]
    script_src = next(d for d in policy.split(";") if d.strip().startswith("script-src"))
    digest = base64.b64encode(hashlib.sha256(FILTER_JS.encode()).digest()).decode()
    assert "unsafe-inline" not in script_src and f"'sha256-{digest}'" in script_src
    assert f"<script>{FILTER_JS}</script>" in page("t", "", Links())  # the hash is of the script as pages carry it


def test_serve_refuses_a_short_token_and_says_how_to_make_one(monkeypatch, marag):
    import pydantic
    import pytest

    from marag.serve.app import ServeSettings

    monkeypatch.setenv("MARAG_SHORT_TOKEN", "xyzzy42")
    code, _, err = marag("serve", "--token-env", "MARAG_SHORT_TOKEN")
    assert code == 2 and "7 characters; it needs at least 16" in err and "secrets.token_urlsafe(24)" in err
    assert "xyzzy42" not in err  # the token itself is never printed
    with pytest.raises(pydantic.ValidationError):
        ServeSettings(token="short")
