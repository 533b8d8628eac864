"""Where things live. No global mutable settings: functions take explicit arguments and
fall back to environment variables only at the edges (CLI, tests)."""

from __future__ import annotations

import os
from pathlib import Path

from marag.errors import MaragError

DATA_ENV = "MARAG_DATA"


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def data_dir(option: str | Path | None = None, required: bool = True) -> Path | None:
    """The benchmark data directory: `option`, else $MARAG_DATA, else ../shared/data
    next to the checkout (when present)."""
    candidates: list[Path] = []
    if option:
        candidates.append(Path(option))
    elif os.environ.get(DATA_ENV):
        candidates.append(Path(os.environ[DATA_ENV]))
    else:
        candidates += [repo_root().parent / "shared" / "data", Path.cwd().parent / "shared" / "data"]
    for c in candidates:
        if c.is_dir():
            return c.resolve()
    if required:
        raise MaragError(
            f"benchmark data directory not found (looked in: {', '.join(map(str, candidates))})",
            hint=f"pass --data-dir DIR or set {DATA_ENV}=DIR",
        )
    return None
