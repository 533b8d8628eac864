"""The lock files in requirements/ agree with pyproject.toml: a requirement added or
raised there without `make lock` fails here (and so in CI), as does a pin without hashes
or one the project no longer asks for."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LOCKS = REPO / "requirements"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(?:\s*;\s*(.+?))?\s*\\?$")
# the environment the locks are for (the train lock is Linux x86-64 only; see `make lock`)
ENV = {"python_version": "3.11", "python_full_version": "3.11.7", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
       "platform_python_implementation": "CPython", "os_name": "posix"}  # fmt: skip


def pins(path: Path) -> dict[str, tuple[Version, list[str], set[str]]]:
    """name -> (version, hashes, what asked for it) for the pins that apply on ENV."""
    out: dict[str, tuple[Version, list[str], set[str]]] = {}
    current: str | None = None
    for line in path.read_text().splitlines():
        m = PIN.match(line)
        if m:
            name, version, marker = m.groups()
            applies = marker is None or Marker(marker).evaluate(ENV)
            current = canonicalize_name(name) if applies else None
            if current:
                out[current] = (Version(version), [], set())
        elif current and line.strip().startswith("--hash=sha256:"):
            out[current][1].append(line.strip())
        elif current and line.strip().startswith("#") and "marag (pyproject.toml)" in line:
            out[current][2].add("marag")
    return out


def requirements(*extras: str) -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(ENV)]


def disagreements(lock: Path, reqs: list[Requirement]) -> list[str]:
    pinned = pins(lock)
    bad = []
    for req in reqs:
        name = canonicalize_name(req.name)
        if name not in pinned:
            bad.append(f"{req} is not in {lock.name}")
        elif not req.specifier.contains(pinned[name][0], prereleases=True):
            bad.append(f"{req} is not met by {lock.name}'s {name}=={pinned[name][0]}")
    asked = {canonicalize_name(r.name) for r in reqs}
    bad += [f"{lock.name} pins {name} for marag, which pyproject.toml no longer asks for"
            for name, (_, _, via) in pinned.items() if "marag" in via and name not in asked]  # fmt: skip
    bad += [f"{lock.name}: {name} has no hash" for name, (_, hashes, _) in pinned.items() if not hashes]
    return bad


def all_extras_but_train() -> list[str]:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return sorted(set(extras) - {"train"})


@pytest.mark.parametrize(("lock", "extras"), [
    ("lock.txt", ["dev"]),
    # every user-facing extra but train is inside dev, so the main lock serves them all
    ("lock.txt", all_extras_but_train()),
    ("train-lock.txt", ["train"]),
])  # fmt: skip
def test_lock_meets_pyproject(lock, extras):
    assert disagreements(LOCKS / lock, requirements(*extras)) == []


def test_a_stale_lock_is_caught(tmp_path):
    """The check itself can fail: a lock missing a requirement, or pinning a version below
    one, or without hashes, is reported."""
    text = (LOCKS / "lock.txt").read_text()
    no_fastapi = re.sub(r"(?ms)^fastapi==.*?(?=^\S)", "", text)
    (tmp_path / "a.txt").write_text(no_fastapi)
    assert any("fastapi" in d and "not in" in d for d in disagreements(tmp_path / "a.txt", requirements("dev")))
    old_numpy = re.sub(r"(?m)^numpy==\S+", "numpy==1.20.0", text)
    (tmp_path / "b.txt").write_text(old_numpy)
    assert any("numpy" in d and "not met" in d for d in disagreements(tmp_path / "b.txt", requirements("dev")))
    (tmp_path / "c.txt").write_text(re.sub(r"(?m)^\s+--hash=sha256:\S+\s*\\?$\n", "", text))
    assert any("has no hash" in d for d in disagreements(tmp_path / "c.txt", requirements("dev")))


def test_torch_is_the_cpu_build():
    """The train lock's torch is the CPU wheel (PyPI's Linux torch is the CUDA one)."""
    version, hashes, _ = pins(LOCKS / "train-lock.txt")["torch"]
    assert version.local == "cpu" and len(hashes) >= 1
    assert "nvidia-cublas-cu12" not in pins(LOCKS / "train-lock.txt")
