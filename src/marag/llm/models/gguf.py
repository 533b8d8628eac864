"""Just enough of the GGUF header to know a model file's training context, so a file the
user brings gets a sensible context per slot without loading it (the catalogue's
models carry theirs)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

# value type -> struct format of a scalar (GGUF v2/v3)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def _read(f: BinaryIO, fmt: str):
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("truncated GGUF header")
    return struct.unpack(fmt, data)[0]


def _string(f: BinaryIO) -> str:
    return f.read(_read(f, "<Q")).decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int):
    if kind in _SCALARS:
        return _read(f, _SCALARS[kind])
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        item, count = _read(f, "<I"), _read(f, "<Q")
        if item in _SCALARS:  # skipped whole: nothing in an array is needed here
            f.seek(count * struct.calcsize(_SCALARS[item]), 1)
        else:
            for _ in range(count):
                _value(f, item)
        return None
    raise ValueError(f"unknown GGUF value type {kind}")


def gguf_context_length(path: str | Path) -> int | None:
    """`<architecture>.context_length` from a GGUF file's metadata; None when the file
    is not GGUF (v2/v3) or does not say."""
    try:
        with Path(path).open("rb") as f:
            if f.read(4) != b"GGUF" or _read(f, "<I") < 2:
                return None
            _read(f, "<Q")  # tensor count
            values: dict[str, object] = {}
            for _ in range(_read(f, "<Q")):
                key, kind = _string(f), _read(f, "<I")
                values[key] = _value(f, kind)
                arch = values.get("general.architecture")
                if arch and f"{arch}.context_length" in values:
                    return int(values[f"{arch}.context_length"])  # type: ignore[arg-type]
    except (OSError, ValueError, struct.error):
        return None
    return None
