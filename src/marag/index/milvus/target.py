"""Where a Milvus index is: parsing an index URI into a `MilvusTarget`.

    milvus:kb.db#hotpot               a Milvus Lite file (one process at a time)
    milvus://127.0.0.1:19530/hotpot   a `milvus-lite server`, a Milvus server or cluster
    milvus://host:19530/hotpot?token_env=MY_VAR&tls=true

A URI never holds a credential (it goes into a run's config.json, logs and argv): one
written there is refused, and no message shows a URI's query string.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from marag.errors import MaragError

ENV_TOKEN = "MARAG_MILVUS_TOKEN"
DEFAULT_PORT = 19530
WINDOWS = "__windows"
# Room for the windows suffix inside Milvus's 255 characters.
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,200}$")


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



def serve_hint(t: MilvusTarget) -> str:
    """How to give a Lite file's collection to many processes: serve it."""
    return (f"serve the file to many processes: milvus-lite server --data-dir {t.uri} --host 127.0.0.1 --port {DEFAULT_PORT}, "
            f"then use milvus://127.0.0.1:{DEFAULT_PORT}/{t.collection}")  # fmt: skip


def _build_hint(t: MilvusTarget) -> str:
    return f"build it: marag index DOCS --out {t.shown}"
