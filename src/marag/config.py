"""Where things live. No global mutable settings: functions take explicit arguments and
fall back to environment variables only at the edges (CLI, tests)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from marag.errors import MaragError

DATA_ENV = "MARAG_DATA"
HOME_ENV = "MARAG_HOME"


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


def marag_home() -> Path:
    """$MARAG_HOME, else the platform's per-user cache folder + /marag. Here rather than
    beside the model store, because both ports read the models folder (the LLMs and the
    embedder) and neither may import the other."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    home = Path.home()
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local") / "marag" / "Cache"
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "marag"
    return Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache") / "marag"


def models_dir(home: str | Path | None = None) -> Path:
    """Where pulled catalogue models are kept: `<home>/models` (home: $MARAG_HOME or the
    user cache)."""
    return (Path(home).expanduser() if home else marag_home()) / "models"
