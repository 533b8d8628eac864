"""Versions recorded with every run, so a number can be traced to the code that made it."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

_PACKAGES = ["marag", "pydantic", "numpy", "bm25s", "onnxruntime", "tokenizers", "xllamacpp", "faiss-cpu", "httpx"]


def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out
