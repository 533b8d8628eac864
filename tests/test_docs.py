"""The README and the docs site: short enough to read, built strictly, and every shell
block marked `<!-- marag:test -->` run as written (with the scripted model), so docs
and CLI cannot drift apart."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MARK = "<!-- marag:test -->"
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def marked_commands(path: Path) -> list[str]:
    """The `marag ...` lines of the shell blocks right after a test mark, in order."""
    text = path.read_text(encoding="utf-8")
    commands = []
    for block in re.findall(re.escape(MARK) + r"\s*```(?:bash|sh|console)\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = line.strip()
            if line.startswith("marag "):
                commands.append(line)
    return commands


MARKED = [(p, marked_commands(p)) for p in DOC_FILES]


def test_the_readme_fits_a_screen_or_two():
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 150


def test_some_blocks_are_marked():
    assert sum(len(c) for _, c in MARKED) >= 10
    assert marked_commands(REPO / "README.md")


@pytest.mark.parametrize("path, commands", [m for m in MARKED if m[1]], ids=[m[0].name for m in MARKED if m[1]])
def test_marked_shell_blocks_run(path, commands, tmp_path, monkeypatch, marag, repo):
    """Each page's marked commands, in order, in a fresh folder beside the samples."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "samples").symlink_to(repo / "samples")
    monkeypatch.setenv("MARAG_LLM", "scripted")
    for command in commands:
        code, out, err = marag(*shlex.split(command, comments=True)[1:])
        assert code == 0, f"{path.name}: `{command}` failed:\n{err}"


def test_the_docs_build_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs need the dev extra: pip install -e '.[dev]'")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "strategies" / "mrag" / "index.html").is_file()
    assert "Strategy" in (tmp_path / "site" / "reference" / "strategies" / "index.html").read_text(encoding="utf-8")


def test_the_http_api_page_is_the_servers_schema():
    from marag.serve.apidoc import current_schema, openapi_markdown

    assert (REPO / "docs" / "http-api.md").read_text(encoding="utf-8") == openapi_markdown(current_schema()), (
        "docs/http-api.md is stale: python -m marag.serve.apidoc > docs/http-api.md"
    )


def test_every_strategy_has_a_row_in_the_overview():
    from marag.strategies import STRATEGIES

    overview = (REPO / "docs" / "strategies" / "index.md").read_text(encoding="utf-8")
    for name in STRATEGIES.names():
        if STRATEGIES.get(name).variant_of is None:
            assert f"`{name}`" in overview, name
