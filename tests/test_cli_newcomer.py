"""What a newcomer runs into first (issue 41): each finding as the command, and the
one-line error or behaviour it now gives (scripted LLM: fast, no model)."""

from __future__ import annotations

import json
import socket
import warnings
from pathlib import Path

import pytest

from marag.errors import MaragWarning


@pytest.fixture
def sample_index(cli_index) -> Path:
    return cli_index


def flat(help_text: str) -> str:
    """A help page as one line: Rich's box borders and line breaks gone."""
    return " ".join(help_text.replace("│", " ").split())


def one_error(err: str) -> tuple[str, str]:
    """(error line, hint line) of a failed command; fails on a traceback or more lines."""
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("  hint: "), err
    return lines[0], lines[1]


def test_version_and_short_help(marag):
    code, out, _ = marag("--version")
    assert code == 0 and out.startswith("marag 0.")
    for args in (["-h"], ["ask", "-h"], ["models", "-h"], ["train", "-h"]):
        code, out, _ = marag(*args)
        assert code == 0 and "Usage:" in out, args


def test_index_help_shows_the_extra_in_brackets(marag):
    code, out, _ = marag("index", "--help")
    assert code == 0 and "marag[faiss]" in flat(out)


@pytest.mark.parametrize("args, names", [
    (["--on-error", "maybe"], "--on-error"),
    (["--chunk-size", "0"], "--chunk-size"),
    (["--split", "kmeans:x"], "--split"),
    (["--chunk-overlap", "600"], "--chunk-overlap"),
])  # fmt: skip
def test_index_option_errors_name_the_option(args, names, repo, tmp_path, marag):
    code, _, err = marag("index", str(repo / "samples/corpus"), "--out", str(tmp_path / "i"), "--quiet", *args)
    line, hint = one_error(err)
    assert code == 2 and names in line + hint and "--set" not in hint
    assert not (tmp_path / "i").exists()


def test_serve_refuses_a_port_out_of_range(marag):
    code, out, err = marag("serve", "--port", "99999", "--llm", "scripted")
    line, hint = one_error(err)
    assert code == 2 and "99999" in line and "65535" in hint and "serving" not in out


def test_serve_refuses_a_busy_port_before_saying_it_serves(marag):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err = marag("serve", "--port", str(port), "--llm", "scripted")
    line, hint = one_error(err)
    assert code == 2 and f"127.0.0.1:{port}" in line and "--port" in hint and "serving" not in out


def test_serve_warns_about_missing_or_empty_index_folders(tmp_path):
    from marag.cli import _serve_indexes

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert _serve_indexes([str(tmp_path / "missing")]) == (str(tmp_path / "missing"), {})
        (tmp_path / "empty").mkdir()
        _serve_indexes([str(tmp_path / "empty")])
    messages = [str(w.message) for w in seen if issubclass(w.category, MaragWarning)]
    assert len(messages) == 2 and "no folder" in messages[0] and "holds no index" in messages[1]


def test_view_of_a_missing_run_hints_at_the_runs_folder(marag):
    code, _, err = marag("view", "runs/nope")
    line, hint = one_error(err)
    assert code == 2 and "runs/nope" in line and "GET /runs" not in hint and "marag eval" in hint


def test_a_missing_questions_file_gets_the_questions_hint(sample_index, marag):
    code, _, err = marag("ask", "--questions", "nope.jsonl", "--index", str(sample_index), "--llm", "scripted")
    line, hint = one_error(err)
    assert code == 2 and "nope.jsonl" in line and '"question"' in hint and "samples/questions.jsonl" in hint


def test_a_failed_report_leaves_no_folder(tmp_path, marag):
    code, _, err = marag("report", str(tmp_path / "nope"), "--out", str(tmp_path / "r2"))
    one_error(err)
    assert code == 2 and not (tmp_path / "r2").exists()


def test_ask_limit_help_explains_zero(marag):
    code, out, _ = marag("ask", "--help")
    assert "0: all of them" in flat(out)


def test_threads_default_to_the_usable_cores(marag):
    from marag.cli_options import usable_cores

    code, out, _ = marag("ask", "--help")
    page = flat(out)
    assert f"[default: {usable_cores()}]" in page[page.index("--threads"):]


def test_eval_says_what_it_will_do_and_an_in_progress_report_says_what_is_missing(sample_index, repo, tmp_path, marag):
    runs = tmp_path / "runs"
    questions = repo / "samples" / "questions.jsonl"
    args = ["eval", str(questions), "--index", str(sample_index), "--llm", "scripted", "--runs", str(runs), "--run-id", "r"]
    code, out, err = marag(*args, "--strategies", "vanilla_rag,unirag", "--limit", "2")
    assert code == 0, err
    assert "answering 2 questions x 2 strategies: 4 answers to make, about 10-18 LLM calls" in err
    # as if the run had been stopped: unirag's answers gone
    results = runs / "r" / "results.jsonl"
    kept = [line for line in results.read_text().splitlines() if json.loads(line)["strategy"] == "vanilla_rag"]
    results.write_text("\n".join(kept) + "\n")
    code, out, err = marag("report", str(runs / "r"))
    assert code == 0, err
    report = (runs / "r" / "report.md").read_text()
    assert "**Incomplete**" in report and "unirag 0 of 2" in report
    # with no --limit it says it answers every question, and how to answer fewer
    code, out, err = marag(*args[:-2], "--run-id", "all", "--strategies", "vanilla_rag")
    assert code == 0, err
    assert "answering 6 questions (all of them: --limit N answers only the first N) x 1 strategies: 6 answers" in err


def test_strategies_one_line_each_and_all_for_variants(marag):
    code, out, _ = marag("strategies")
    lines = out.strip().splitlines()
    assert code == 0 and any(ln.startswith("mrag ") and "calls" in ln for ln in lines)
    assert not any(ln.startswith("mrag_paper") for ln in lines) and "--all" in lines[-1]
    code, out, _ = marag("strategies", "--all")
    assert any(ln.startswith("mrag_paper") for ln in out.splitlines())
