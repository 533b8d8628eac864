"""Who may use the server: the bearer token for API clients, and browser sessions.

A browser cannot send an `Authorization` header on a page load, so a person signs in
once on /signin with the token and the server sets a session cookie. The cookie is not
the token: it is `<issued>.<nonce>.<mac>`, where the MAC (HMAC-SHA256) is made with a
key drawn when the server starts. A copied cookie therefore never reveals the token,
expires after `max_age_s`, stops working when the user signs out (its nonce is
revoked) and when the server restarts (new key). The cookie is HttpOnly (page scripts
cannot read it) and SameSite=Strict (no other site's page can make the browser send
it); tokens and MACs are compared in constant time.

Wrong tokens are counted, on /signin and in `Authorization` headers alike (one count:
a guesser gains nothing by switching): past `max_failures` in a minute, both answer 429
with Retry-After until the oldest counted failure is a minute old. While locked, no
token is checked at all, the right one included: were the right one let through, a
guesser would still learn which guess was right at network speed. (So a flood of wrong
tokens locks out the token's owner too, for a minute at a time: the price of a count
that needs no per-client state.) With tokens of at least `MIN_TOKEN_CHARS` characters
(`marag serve` refuses shorter ones), 20 guesses a minute never find one.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable

COOKIE_PREFIX = "marag_session"
MIN_TOKEN_CHARS = 16
MAKE_TOKEN = "python -c \"import secrets; print(secrets.token_urlsafe(24))\""  # how to make a good token


def token_matches(given: str, token: str) -> bool:
    """Constant-time comparison of a presented token with the server's."""
    return secrets.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode("utf-8", "surrogatepass"))


def bearer_matches(header: str, token: str) -> bool:
    scheme, _, value = header.partition(" ")
    return scheme.lower() == "bearer" and token_matches(value.strip(), token)


def cookie_name(port: int | None) -> str:
    """One cookie per port: browsers share cookies between ports of one host, so two
    servers on 127.0.0.1 would otherwise sign each other out."""
    return f"{COOKIE_PREFIX}_{port}" if port else COOKIE_PREFIX


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path on this server only (never another site,
    which `//host` or `/\\host` would be in a browser)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")) or any(c in target for c in "\\\r\n\t"):
        return "/"
    if target.startswith(("/signin", "/signout")):
        return "/"
    return target


class Sessions:
    """Issues and checks session cookie values (see the module docstring)."""

    def __init__(self, token: str, max_age_s: int = 12 * 3600, max_failures: int = 20,
                 clock: Callable[[], float] = time.time):  # fmt: skip
        self._token = token
        self._key = secrets.token_bytes(32)
        self.max_age_s = max_age_s
        self.max_failures = max_failures
        self._clock = clock
        self._revoked: OrderedDict[str, float] = OrderedDict()  # nonce -> when it would have expired
        self._failures: deque[float] = deque()

    def _mac(self, issued: int, nonce: str) -> str:
        return hmac.new(self._key, f"{issued}.{nonce}".encode(), hashlib.sha256).hexdigest()

    def sign_in(self, given: str) -> str | None:
        """A new session value for the right token; None for a wrong one (counted)."""
        if not self._counted(token_matches(given, self._token)):
            return None
        issued, nonce = int(self._clock()), secrets.token_urlsafe(18)
        return f"{issued}.{nonce}.{self._mac(issued, nonce)}"

    def bearer(self, header: str) -> bool:
        """Whether an `Authorization` header carries the token (a wrong one is counted)."""
        return self._counted(bearer_matches(header, self._token))

    def _counted(self, right: bool) -> bool:
        if not right:
            self._failures.append(self._clock())
        return right

    def locked(self) -> bool:
        """Whether too many wrong tokens were sent in the last minute (callers check this
        before checking a token, and check none while it holds)."""
        now = self._clock()
        while self._failures and self._failures[0] < now - 60:
            self._failures.popleft()
        return len(self._failures) >= self.max_failures

    def retry_after(self) -> int:
        """Whole seconds until `locked()` stops holding (0 when it does not hold)."""
        if not self.locked():
            return 0
        unlock = self._failures[len(self._failures) - self.max_failures] + 60  # when enough failures have aged out
        return max(1, math.floor(unlock - self._clock()) + 1)

    def valid(self, value: str | None) -> bool:
        parsed = self._parse(value)
        if parsed is None:
            return False
        issued, nonce = parsed
        return nonce not in self._revoked and 0 <= self._clock() - issued < self.max_age_s

    def sign_out(self, value: str | None) -> None:
        parsed = self._parse(value)
        if parsed is None:
            return
        issued, nonce = parsed
        now = self._clock()
        self._revoked[nonce] = issued + self.max_age_s
        while self._revoked and next(iter(self._revoked.values())) < now:  # expired anyway: forget
            self._revoked.popitem(last=False)

    def _parse(self, value: str | None) -> tuple[int, str] | None:
        if not value or value.count(".") != 2:
            return None
        issued, nonce, mac = value.split(".")
        if not issued.isdigit() or not hmac.compare_digest(mac.encode(), self._mac(int(issued), nonce).encode()):
            return None
        return int(issued), nonce
