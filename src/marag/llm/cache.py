"""A disk cache of LLM responses: one JSON file per request.

The key is the sha256 of a canonical JSON of everything that determines the answer
(backend kind, model id, messages, output schema, temperature, max_tokens, seed) and
nothing else: API keys, headers and URLs never enter it, so cache directories can be
shared without leaking secrets.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def cache_key(
    kind: str,
    model: str,
    messages: list[dict[str, str]],
    schema: dict[str, Any] | None,
    temperature: float,
    max_tokens: int,
    seed: int | None,
) -> str:
    parts = {
        "kind": kind,
        "model": model,
        "messages": messages,
        "schema": schema,
        "temperature": float(temperature),
        "max_tokens": int(max_tokens),
        "seed": seed,
    }
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class LLMCache:
    """Entries live in `directory/<first 2 hex>/<key>.json`. Writes are atomic (temp file
    + rename), so concurrent runs sharing a directory never read half a file."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # missing or damaged entries are simply misses

    def put(self, key: str, entry: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
