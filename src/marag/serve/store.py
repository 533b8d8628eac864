"""Read access to a runs directory for the server and the static viewer.

The runs directory is a jail. Names that come from a request (run ids, trace ids, file
names) are checked against strict patterns, and every file is opened only after its
real path (all symbolic links followed) is found inside its run's folder, whose real
path lies inside the root. A run folder or file whose link leads out is skipped with
a warning, never read: a run copied from someone else cannot make the server, or
`marag view`, show a file from elsewhere on the machine.

Run folders are other people's data as much as requests are: result lines of the
wrong shape are skipped or cleaned (`marag.eval.rundir` reads them, `shown` readies
them for the pages) and config files are checked here, so the pages and the API never
fail on them, and one unreadable run never hides the others.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any, NamedTuple

from marag.errors import MaragError, MaragWarning, UnknownNameError
from marag.eval.attribution import cause_of_record
from marag.eval.rundir import RESULTS, ResultRecord, scan_results

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,199}$")
TRACE_ID = re.compile(r"^[0-9a-f]{6,64}$")
FILE = re.compile(r"^[A-Za-z0-9_.-]{1,100}\.(png|md|json)$")


class BadName(MaragError):
    """A name in a request that cannot be a run, trace or file name (HTTP 400)."""


class UnreadableRun(UnknownNameError):
    """A run folder that exists but cannot be shown (its config.json is missing parts,
    or leads out of the runs directory). Served as "no such run" (HTTP 404) with why."""


class RunConflict(MaragError):
    """A run folder the server will not write into (HTTP 409)."""


class Listing(NamedTuple):
    runs: list[tuple[str, dict[str, Any]]]  # run id, its config.json
    skipped: list[tuple[str, str]]  # folder name, why it is not listed


def check(name: str, pattern: re.Pattern[str], what: str) -> str:
    if not pattern.fullmatch(name) or ".." in name:
        raise BadName(f"not a valid {what}: {name[:80]!r}", hint=f"a {what} matches {pattern.pattern}")
    return name


def warn(message: str) -> None:
    # MaragWarning: the CLI prints one `warning:` line; Python's default filter shows a
    # given message once, so a page reloaded every second does not flood the log.
    warnings.warn(message, MaragWarning, stacklevel=2)


class RunStore:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self._traces: dict[str, tuple[tuple[int, int], dict[str, int]]] = {}  # run id -> (file stamp, trace id -> offset)

    # -- the jail -------------------------------------------------------------------------------
    def _dir(self, run_id: str) -> Path:
        """The real path of a run's folder; UnknownNameError when there is no readable run."""
        check(run_id, RUN_ID, "run id")
        link = self.root / run_id
        if not link.is_dir():
            raise UnknownNameError(f"no run {run_id!r}", hint="GET /runs lists the runs")
        real = link.resolve()
        if real == self.root or not real.is_relative_to(self.root):
            warn(f"run folder {run_id!r} links outside the runs directory {self.root}: skipped")
            raise UnreadableRun(f"no run {run_id!r}", hint="its folder links outside the runs directory")
        return real

    def _path(self, run_id: str, name: str, readable: bool = True) -> Path | None:
        """The real path of a run's file, or None when it is absent or leads out of the
        run's folder (then with a warning: it is never read). Only files of readable
        runs (see `meta`) unless `readable` is False."""
        if readable:
            self.meta(run_id)
        run_dir = self._dir(run_id)
        path = run_dir / name
        if not path.exists():
            return None
        real = path.resolve()
        if not real.is_relative_to(run_dir) or not real.is_file():
            warn(f"{run_id}/{name} links outside its run folder (or is not a file): skipped")
            return None
        return real

    # -- runs -----------------------------------------------------------------------------------
    def scan(self) -> Listing:
        """Every readable run, and the folders that look like runs but are skipped (with
        the reason, which never quotes what a link points to)."""
        if not self.root.is_dir():
            return Listing([], [])
        runs, skipped = [], []
        for d in sorted(self.root.iterdir()):
            if not RUN_ID.fullmatch(d.name) or not d.is_dir() or not (d / "config.json").exists():
                continue  # not a run (a stray file, a model folder, a hidden folder)
            try:
                runs.append((d.name, self.meta(d.name)))
            except MaragError as exc:
                skipped.append((d.name, exc.hint or exc.message))
        return Listing(runs, skipped)

    def runs(self) -> list[tuple[str, dict[str, Any]]]:
        return self.scan().runs

    def meta(self, run_id: str) -> dict[str, Any]:
        """config.json, checked for what the pages and reports rely on."""
        path = self._path(run_id, "config.json", readable=False)
        if path is None:
            raise UnreadableRun(f"no run {run_id!r}", hint="its config.json is missing or links outside its run folder")
        try:
            meta = json.loads(path.read_bytes().decode("utf-8", errors="replace"))
        except json.JSONDecodeError:
            meta = None
        cfg = meta.get("config") if isinstance(meta, dict) else None
        problem = (
            "config.json is not a JSON object with a 'config' object" if not isinstance(cfg, dict)
            else "config.json has no 'dataset' name" if not isinstance(cfg.get("dataset"), str)
            else "config.json has no 'strategies' list" if not _str_list(cfg.get("strategies"))
            else None
        )  # fmt: skip
        if problem:
            warn(f"run {run_id!r}: {problem}: skipped")
            raise UnreadableRun(f"run {run_id!r} cannot be read: {problem}", hint=f"{problem}; fix it or remove the folder")
        return meta

    def results(self, run_id: str) -> list[ResultRecord]:
        """The latest record per (strategy, question) (`marag.eval.rundir`: fields of the
        wrong shape emptied), made fit to show (see `shown`); lines that are not records
        are skipped, as a torn last line is."""
        path = self._path(run_id, RESULTS)
        if path is None:
            return []
        records, bad = scan_results(path)
        if bad > 1:  # one is a torn last line, normal after a killed run
            warn(f"run {run_id!r}: {bad} lines of {RESULTS} are not result records: skipped")
        return [shown(r) for r in records.values()]

    def plots(self, run_id: str) -> list[str]:
        self.meta(run_id)
        run_dir = self._dir(run_id)
        return sorted(p.name for p in run_dir.glob("*.png") if FILE.fullmatch(p.name) and self._path(run_id, p.name, readable=False))

    def file(self, run_id: str, name: str) -> Path:
        path = self._path(run_id, check(name, FILE, "file name"))
        if path is None:
            raise UnknownNameError(f"no file {name!r} in run {run_id!r}")
        return path

    def check_writable(self, run_id: str) -> None:
        """Raise RunConflict unless an evaluation may write `run_id`'s folder: absent,
        or a real folder with no links in it (writes would follow a link anywhere)."""
        path = self.root / check(run_id, RUN_ID, "run id")
        if not path.exists() and not path.is_symlink():
            return
        if path.is_symlink() or not path.is_dir() or any(p.is_symlink() for p in path.iterdir()):
            raise RunConflict(f"run folder {run_id!r} holds symbolic links: the server does not write into it",
                              hint="remove the links, or the folder, and start the run again")  # fmt: skip

    # -- traces ---------------------------------------------------------------------------------
    def trace(self, run_id: str, trace_id: str) -> dict[str, Any]:
        check(trace_id, TRACE_ID, "trace id")
        path, offsets = self._trace_offsets(run_id)
        if path is None or trace_id not in offsets:
            raise UnknownNameError(f"no trace {trace_id!r} in run {run_id!r}")
        with path.open("rb") as f:
            f.seek(offsets[trace_id])
            line = f.readline()
        try:
            trace = json.loads(line.decode("utf-8", errors="replace"))
        except json.JSONDecodeError:
            trace = None
        if not isinstance(trace, dict):
            raise UnknownNameError(f"trace {trace_id!r} in run {run_id!r} cannot be read", hint="its line in traces.jsonl is not a JSON object")
        return trace

    def traces(self, run_id: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        _, offsets = self._trace_offsets(run_id)
        out = {}
        for i in ids:
            if i in offsets:
                try:
                    out[i] = self.trace(run_id, i)
                except UnknownNameError:
                    continue
        return out

    def _trace_offsets(self, run_id: str) -> tuple[Path | None, dict[str, int]]:
        """Where each trace starts in traces.jsonl, read again when the file changed
        (a run in progress appends to it)."""
        path = self._path(run_id, "traces.jsonl")
        if path is None:
            return None, {}
        st = path.stat()
        stamp = (st.st_size, st.st_mtime_ns)
        cached = self._traces.get(run_id)
        if cached is None or cached[0] != stamp:
            offsets: dict[str, int] = {}
            with path.open("rb") as f:
                pos = 0
                for line in f:
                    m = re.search(rb'"id":\s*"([0-9a-f]{6,64})"', line[:200])
                    if m:
                        offsets[m.group(1).decode()] = pos  # a re-answered question: the latest wins
                    pos += len(line)
            cached = self._traces[run_id] = (stamp, offsets)
        return path, cached[1]


def _str_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


def shown(r: ResultRecord) -> ResultRecord:
    """A record as the pages and links use it: a question text (its id when it has none),
    a trace id only of the shape trace ids have (it becomes a link and a file lookup), and
    one of the known causes (`cause_of_record`: else worked out again)."""
    r.question = r.question or r.qid
    r.trace_id = r.trace_id if r.trace_id and TRACE_ID.fullmatch(r.trace_id) else None
    r.cause = cause_of_record(r)
    return r
