"""Versions recorded with every run, so a number can be traced to the code that made it."""

from __future__ import annotations

import functools
import hashlib
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

_PACKAGES = ["marag", "pydantic", "numpy", "bm25s", "onnxruntime", "tokenizers", "xllamacpp", "faiss-cpu", "httpx"]


def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


@functools.cache
def code_version() -> str:
    """marag's version plus a digest of its source files: two runs with the same
    configuration but different code are different runs (their answers may differ)."""
    import marag

    root = Path(marag.__file__).parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return f"{marag.__version__}+{h.hexdigest()[:10]}"
