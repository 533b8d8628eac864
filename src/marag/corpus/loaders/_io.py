"""Reading helpers shared by the loaders: tolerant decoding, JSON / JSON Lines records
with per-line error handling, cheap peeking for auto-detection, passage ids."""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from marag.corpus.loaders.base import CorpusWarning, LoadedCorpus, OnError
from marag.corpus.models import Document, Question
from marag.errors import CorpusError

SKIP_HINT = "fix the line or pass --on-error skip"
JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
_PEEK_BYTES = 1 << 18
_MAX_SHOWN = 5


def _decode(data: bytes) -> tuple[str, int]:
    """UTF-8 text and how many lines needed replacement characters.

    The fast path is one strict decode; only files that fail it pay for the per-line
    pass that counts the damaged lines for the warning.
    """
    if data.startswith(b"\xef\xbb\xbf"):  # a BOM would break json.loads on line 1
        data = data[3:]
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        pass
    bad = 0
    lines = []
    for raw in data.split(b"\n"):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            bad += 1
            lines.append(raw.decode("utf-8", errors="replace"))
    return "\n".join(lines), bad


class LoadContext:
    """Per-load bookkeeping: decides fail-vs-skip for bad records and collects what to
    warn about, so each load emits at most one warning per kind of problem."""

    def __init__(self, path: Path, on_error: OnError):
        if on_error not in ("skip", "fail"):
            raise ValueError(f"on_error must be 'skip' or 'fail', not {on_error!r}")
        self.path = path
        self.on_error = on_error
        self.skipped: list[str] = []
        self.skipped_why: list[str] = []
        self.replaced_lines = 0
        self.replaced_files: list[str] = []
        self.duplicates = 0

    def read_text(self, file: Path) -> str:
        try:
            data = file.read_bytes()
        except OSError as e:
            raise CorpusError(
                f"cannot read {file}: {e.strerror or e}", hint="check the path and its permissions"
            ) from None
        text, bad = _decode(data)
        if bad:
            self.replaced_lines += bad
            self.replaced_files.append(str(file))
        return text

    def bad(self, file: Path, where: int, what: str, unit: str = "line") -> None:
        """A malformed record at `unit` number `where` (1-based): raise, or count it."""
        if self.on_error == "fail":
            raise CorpusError(f"{file}: {unit} {where}: {what}", hint=SKIP_HINT)
        self.skipped.append(f"{file.name} {unit} {where}")
        self.skipped_why.append(f"{file} {unit} {where}: {what}")

    def result(
        self, documents: list[Document], questions: list[Question], format: str
    ) -> LoadedCorpus:
        if self.replaced_lines:
            files = ", ".join(self.replaced_files[:_MAX_SHOWN])
            more = "" if len(self.replaced_files) <= _MAX_SHOWN else ", ..."
            warnings.warn(
                f"{self.replaced_lines} line(s) were not valid UTF-8; undecodable bytes "
                f"were replaced with U+FFFD (in {files}{more})",
                CorpusWarning,
                stacklevel=3,
            )
        if self.skipped:
            shown = ", ".join(self.skipped[:_MAX_SHOWN])
            more = "" if len(self.skipped) <= _MAX_SHOWN else ", ..."
            warnings.warn(
                f"skipped {len(self.skipped)} malformed record(s) in {self.path} "
                f"(first: {shown}{more})",
                CorpusWarning,
                stacklevel=3,
            )
        return LoadedCorpus(
            documents=documents,
            questions=questions,
            source=str(self.path),
            format=format,
            skipped=len(self.skipped),
            skipped_at=self.skipped_why,
            duplicates=self.duplicates,
        )


def _describe_json_error(e: json.JSONDecodeError) -> str:
    return f"invalid JSON ({e.msg} at column {e.colno})"


def iter_records(ctx: LoadContext, file: Path) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Yield (number, unit, object) for each record of a `.json` list or a JSON Lines file.

    JSON Lines records are numbered by 1-based line; a bad line is reported through
    `ctx.bad` (raise or skip). A `.json` file must parse as a whole (there is no line to
    skip to), and its records are numbered 1-based within the list.
    """
    text = ctx.read_text(file)
    if file.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise CorpusError(
                f"{file} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})",
                hint="fix the file; or convert it to JSON Lines (one object per line), "
                "where --on-error skip can drop single bad records",
            ) from None
        if isinstance(data, dict):
            data = [data]
        if not isinstance(data, list):
            raise CorpusError(
                f"{file}: expected a JSON list of objects, got {type(data).__name__}",
                hint="write a list of objects, or one object per line as JSON Lines",
            )
        for i, obj in enumerate(data, 1):
            if isinstance(obj, dict):
                yield i, "record", obj
            else:
                ctx.bad(file, i, f"expected a JSON object, got {type(obj).__name__}", "record")
        return
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            ctx.bad(file, lineno, _describe_json_error(e))
            continue
        if not isinstance(obj, dict):
            ctx.bad(file, lineno, f"expected a JSON object, got {type(obj).__name__}")
            continue
        yield lineno, "line", obj


# --- cheap peeking for auto-detection -------------------------------------------------


def peek(file: Path) -> tuple[str, Any]:
    """("list", first element) / ("object", None) / ("record", first JSON Lines object) /
    ("empty", None) / ("invalid", None), reading only the start of the file when it can."""
    try:
        if file.suffix.lower() == ".json":
            return _peek_json(file)
        return _peek_jsonl(file)
    except OSError:
        return "invalid", None


def _peek_json(file: Path) -> tuple[str, Any]:
    with open(file, "rb") as f:
        head = f.read(_PEEK_BYTES)
    stripped = _decode(head)[0].lstrip()
    if not stripped:
        return "empty", None
    if stripped.startswith("{"):
        return "object", None  # e.g. HotpotQA's {title: [sentences]}; no records to peek
    if not stripped.startswith("["):
        return "invalid", None
    body = stripped[1:].lstrip()
    if body.startswith("]"):
        return "empty", None
    try:
        return "list", json.JSONDecoder().raw_decode(body)[0]
    except json.JSONDecodeError:
        if len(head) < _PEEK_BYTES:
            return "invalid", None
    # The first element is longer than the peek window: parse the whole file.
    try:
        data = json.loads(_decode(file.read_bytes())[0])
    except json.JSONDecodeError:
        return "invalid", None
    return ("list", data[0]) if isinstance(data, list) and data else ("empty", None)


def _peek_jsonl(file: Path) -> tuple[str, Any]:
    return _peek_jsonl_at(file)[:2]


def _peek_jsonl_at(file: Path) -> tuple[str, Any, int]:
    """`_peek_jsonl` and the 1-based number of the line it looked at (0: none)."""
    # The first line that parses: a malformed opening line should not hide the format
    # (the loader then reports that line precisely).
    seen_text = False
    with open(file, "rb") as f:
        for lineno, raw in enumerate(islice(f, 50), 1):
            line = _decode(raw)[0]
            if not line.strip():
                continue
            seen_text = True
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            return ("record", obj, lineno) if isinstance(obj, dict) else ("invalid", None, lineno)
    return ("invalid", None, 0) if seen_text else ("empty", None, 0)


def peeked_at(file: Path) -> str:
    """Where `peek` found the record it returned, as an error message names it: "line N"
    of JSON Lines (blank or broken lines before it are passed over), "element 1" of a
    .json list."""
    if file.suffix.lower() == ".json":
        return "element 1"
    try:
        return f"line {_peek_jsonl_at(file)[2]}"
    except OSError:
        return "line 1"


def first_record(file: Path) -> dict[str, Any] | None:
    kind, obj = peek(file)
    return obj if kind in ("list", "record") and isinstance(obj, dict) else None


def json_files(folder: Path) -> list[Path]:
    """The JSON / JSON Lines files directly inside `folder`, sorted for determinism."""
    return sorted(
        p
        for p in folder.iterdir()
        if p.is_file() and p.suffix.lower() in JSON_SUFFIXES and not p.name.startswith(".")
    )


def files_matching(path: Path, accept) -> list[Path]:
    """`path` itself when it is an accepted file, else its accepted JSON files."""
    if path.is_file():
        return [path] if accept(path) else []
    if path.is_dir():
        return [p for p in json_files(path) if accept(p)]
    return []


def has_keys(file: Path, *keys: str) -> bool:
    rec = first_record(file)
    return rec is not None and all(k in rec for k in keys)


# --- passages --------------------------------------------------------------------------


def passage_id(title: str, text: str, digits: int = 8) -> str:
    """A stable id for a passage that has a title but no id of its own.

    Derived from content, so the same passage gets the same id in every dataset that
    carries it and regardless of corpus order; titles alone repeat (MuSiQue, NQ).
    """
    return f"{title}#{hashlib.sha1(text.encode('utf-8')).hexdigest()[:digits]}"


class PassagePool:
    """Documents pooled from per-question contexts, deduplicated by (title, text)."""

    def __init__(self, ctx: LoadContext):
        self.ctx = ctx
        self.documents: list[Document] = []
        self._ids: dict[tuple[str, str], str] = {}
        self._texts: dict[str, tuple[str, str]] = {}

    def add(self, title: str, text: str, metadata: dict[str, Any] | None = None) -> str:
        key = (title, text)
        if key in self._ids:
            self.ctx.duplicates += 1
            return self._ids[key]
        doc_id = self.id_for(title, text)
        self._ids[key] = doc_id
        self._texts[doc_id] = key
        self.documents.append(Document(id=doc_id, title=title, text=text, metadata=metadata or {}))
        return doc_id

    def id_for(self, title: str, text: str) -> str:
        """The pooled id of this passage, or the id it will get when added (gold passages
        missing from a corpus keep it too; `load_corpus` warns about those)."""
        known = self._ids.get((title, text))
        if known is not None:
            return known
        doc_id = passage_id(title, text)
        if doc_id in self._texts:  # 8 hex digits collided within one title: use all 40
            doc_id = passage_id(title, text, digits=40)
        return doc_id


def require_str(rec: dict[str, Any], key: str) -> str:
    """The string field `key`, or a ValueError worded for the error message."""
    if key not in rec:
        raise ValueError(f"missing required field {key!r}")
    value = rec[key]
    if not isinstance(value, str):
        raise ValueError(f"field {key!r} must be a string, got {type(value).__name__}")
    return value
