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
