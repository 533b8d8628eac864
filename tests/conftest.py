from __future__ import annotations

from pathlib import Path

import pytest

from marag.config import data_dir as _data_dir


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared benchmark data; tests that need it skip (with the reason) when absent."""
    d = _data_dir(required=False)
    if d is None:
        pytest.skip("benchmark data not found: set MARAG_DATA to the shared data directory")
    return d


@pytest.fixture(scope="session")
def repo() -> Path:
    return Path(__file__).resolve().parents[1]


@pytest.fixture
def marag(monkeypatch, capsys):
    """Run the `marag` command through its real entry point: marag("ask", "q", ...) ->
    (exit code, stdout, stderr)."""
    import sys

    from marag import cli

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["marag", *args])
        code = 0
        try:
            cli.main()
        except SystemExit as e:
            code = e.code or 0
        out, err = capsys.readouterr()
        return code, out, err

    return run
