"""The `marag` command end to end (scripted LLM: fast, no model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest




@pytest.fixture
def sample_index(cli_index) -> Path:
    return cli_index


def test_strategies_lists_baselines(marag):
    code, out, _ = marag("strategies")
    assert code == 0
    assert "vanilla_rag" in out and "llm_only" in out


def test_index_refuses_to_overwrite(sample_index, repo, marag):
    code, _, err = marag("index", str(repo / "samples/corpus"), "--out", str(sample_index),
                       "--retrievers", "bm25", "--quiet")
    assert code == 2
    assert "--overwrite" in err
    assert (sample_index / "manifest.json").exists()  # the old index is intact


def test_ask_json_output(sample_index, tmp_path, marag):
    trace_file = tmp_path / "t.jsonl"
    code, out, err = marag("ask", "Who created Python?", "What is the Linux mascot?",
                         "--index", str(sample_index), "--llm", "scripted", "--json", "--trace-out", str(trace_file))
    assert code == 0, err
    lines = [json.loads(x) for x in out.strip().splitlines()]
    assert [x["question"] for x in lines] == ["Who created Python?", "What is the Linux mascot?"]
    assert lines[0]["sources"][0]["doc_id"] == "computing/python-language.md"
    assert lines[1]["sources"][0]["doc_id"] == "computing/linux-kernel.md"
    traces = [json.loads(x) for x in trace_file.read_text().splitlines()]
    assert {t["id"] for t in traces} == {x["trace_id"] for x in lines}


def test_ask_human_output_names_sources_and_trace(sample_index, tmp_path, marag):
    code, out, _ = marag("ask", "Who made the first ascent of Mount Everest?",
                       "--index", str(sample_index), "--llm", "scripted", "--trace-out", str(tmp_path / "t.jsonl"))
    assert code == 0
    assert "A: " in out and "[1] Mount Everest" in out and f"trace: {tmp_path / 't.jsonl'}" in out


def test_ask_with_questions_file_and_limit(sample_index, repo, tmp_path, marag):
    code, out, _ = marag("ask", "--questions", str(repo / "samples/questions.jsonl"), "--limit", "3",
                       "--index", str(sample_index), "--llm", "scripted", "--json", "--trace-out", str(tmp_path / "t"))
    assert code == 0
    assert len(out.strip().splitlines()) == 3


def test_unknown_strategy_lists_known(sample_index, marag):
    code, _, err = marag("ask", "q", "--index", str(sample_index), "--strategy", "magic",
                       "--llm", "scripted")
    assert code == 2
    assert "unknown strategies 'magic'" in err and "vanilla_rag" in err


def test_missing_index_says_how_to_build_it(tmp_path, marag):
    code, _, err = marag("ask", "q", "--index", str(tmp_path / "none"), "--llm", "scripted")
    assert code == 2
    assert "marag index" in err


def test_malformed_jsonl_names_line_and_skip_works(tmp_path, marag):
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "a", "text": "alpha beta"}\n{"id": "b", "text": \n{"id": "c", "text": "gamma"}\n')
    code, _, err = marag("index", str(docs), "--out", str(tmp_path / "i"), "--retrievers", "bm25",
                       "--quiet")
    assert code == 2
    assert "docs.jsonl" in err and "line 2" in err and "--on-error skip" in err
    assert not (tmp_path / "i").exists()
    code, out, _ = marag("index", str(docs), "--out", str(tmp_path / "i"), "--retrievers", "bm25",
                       "--on-error", "skip", "--quiet")
    assert code == 0 and "indexed 2 documents" in out


def test_empty_corpus_is_an_error(tmp_path, marag):
    (tmp_path / "empty").mkdir()
    code, _, err = marag("index", str(tmp_path / "empty"), "--out", str(tmp_path / "i"), "--quiet")
    assert code == 2 and "no documents" in err


def test_bad_set_override(sample_index, marag):
    code, _, err = marag("ask", "q", "--index", str(sample_index), "--llm", "scripted",
                       "--set", "k")
    assert code == 2 and "KEY=VALUE" in err


def test_dataset_name_resolves_in_data_dir(data_dir, tmp_path, marag):
    code, out, err = marag("index", "nq_open_oracle", "--data-dir", str(data_dir),
                         "--out", str(tmp_path / "nq"), "--retrievers", "bm25", "--quiet")
    assert code == 0, err
    assert "indexed 596 documents" in out
