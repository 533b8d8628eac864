"""Read access to a runs directory for the server and the static viewer. Names that
come from a request (run ids, trace ids, file names) are checked against strict
patterns and resolved inside the root, so no request can reach a path outside it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from marag.errors import MaragError, UnknownNameError
from marag.eval.runner import read_results

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,199}$")
TRACE_ID = re.compile(r"^[0-9a-f]{6,64}$")
FILE = re.compile(r"^[A-Za-z0-9_.-]{1,100}\.(png|md|json)$")


class BadName(MaragError):
    """A name in a request that cannot be a run, trace or file name (HTTP 400)."""


def check(name: str, pattern: re.Pattern[str], what: str) -> str:
    if not pattern.fullmatch(name) or ".." in name:
        raise BadName(f"not a valid {what}: {name[:80]!r}", hint=f"a {what} matches {pattern.pattern}")
    return name


class RunStore:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self._traces: dict[str, dict[str, int]] = {}  # run id -> trace id -> byte offset in traces.jsonl

    def _dir(self, run_id: str) -> Path:
        path = (self.root / check(run_id, RUN_ID, "run id")).resolve()
        if not path.is_relative_to(self.root) or not (path / "config.json").is_file():
            raise UnknownNameError(f"no run {run_id!r}", hint="GET /runs lists the runs")
        return path

    def runs(self) -> list[tuple[str, dict[str, Any]]]:
        if not self.root.is_dir():
            return []
        out = []
        for d in sorted(self.root.iterdir()):
            if (d / "config.json").is_file() and RUN_ID.fullmatch(d.name):
                out.append((d.name, self.meta(d.name)))
        return out

    def meta(self, run_id: str) -> dict[str, Any]:
        return json.loads((self._dir(run_id) / "config.json").read_text(encoding="utf-8"))

    def results(self, run_id: str) -> list[dict[str, Any]]:
        return list(read_results(self._dir(run_id) / "results.jsonl").values())

    def plots(self, run_id: str) -> list[str]:
        return sorted(p.name for p in self._dir(run_id).glob("*.png") if FILE.fullmatch(p.name))

    def file(self, run_id: str, name: str) -> Path:
        path = (self._dir(run_id) / check(name, FILE, "file name")).resolve()
        if not path.is_relative_to(self.root) or not path.is_file():
            raise UnknownNameError(f"no file {name!r} in run {run_id!r}")
        return path

    def trace(self, run_id: str, trace_id: str) -> dict[str, Any]:
        check(trace_id, TRACE_ID, "trace id")
        offsets = self._trace_offsets(run_id)
        if trace_id not in offsets:  # a run still in progress may have written it since
            self._traces.pop(run_id, None)
            offsets = self._trace_offsets(run_id)
        if trace_id not in offsets:
            raise UnknownNameError(f"no trace {trace_id!r} in run {run_id!r}")
        with (self._dir(run_id) / "traces.jsonl").open("rb") as f:
            f.seek(offsets[trace_id])
            return json.loads(f.readline())

    def traces(self, run_id: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        offsets = self._trace_offsets(run_id)
        return {i: self.trace(run_id, i) for i in ids if i in offsets}

    def _trace_offsets(self, run_id: str) -> dict[str, int]:
        path = self._dir(run_id) / "traces.jsonl"
        if run_id not in self._traces:
            offsets: dict[str, int] = {}
            if path.exists():
                with path.open("rb") as f:
                    pos = 0
                    for line in f:
                        m = re.search(rb'"id":\s*"([0-9a-f]+)"', line[:200])
                        if m:
                            offsets[m.group(1).decode()] = pos  # a re-answered question: the latest wins
                        pos += len(line)
            self._traces[run_id] = offsets
        return self._traces[run_id]
