"""The CLI under bad input and real use, through the real entry point (scripted model):
comparisons never overwrite a run, settings errors are one line, empty questions and
malformed corpora are refused clearly, skipped records are listed, progress and resume
are reported, and an index the user built is reused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest




@pytest.fixture
def sample_index(cli_index) -> Path:
    return cli_index


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("k=banana", "strategy 'vanilla_rag': k='banana' is not allowed"),
        ("max_llm_calls=-1", "max_llm_calls=-1 is not allowed: Input should be greater than or equal to 1"),
        ("kk=3", "strategy 'vanilla_rag' has no setting 'kk'"),
    ],
)
def test_bad_settings_are_one_line_errors(sample_index, setting, expected, marag):
    code, out, err = marag("ask", "Who created Python?", "--index", str(sample_index), "--llm", "scripted", "--set", setting)
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[0] == "error: " + lines[0].removeprefix("error: ") and expected in lines[0] and len(lines) == 2
    if setting.startswith("kk"):
        assert "valid keys: answer_max_chars, answer_recheck, answer_style, answer_type_check, deadline_s, k," in lines[1]


def test_empty_questions_are_refused(sample_index, tmp_path, marag):
    code, _, err = marag("ask", "   ", "--index", str(sample_index), "--llm", "scripted")
    assert code == 2 and "question 1 is empty" in err
    qfile = tmp_path / "q.jsonl"
    qfile.write_text('{"question": "Who created Python?"}\n{"question": "  "}\n')
    code, _, err = marag("ask", "--questions", str(qfile), "--index", str(sample_index), "--llm", "scripted")
    assert code == 2 and "q.jsonl: line 2: field 'question' is empty" in err


def test_jsonl_without_text_names_the_missing_field(tmp_path, marag):
    f = tmp_path / "docs.jsonl"
    f.write_text('{"id": "a", "body": "hello"}\n')
    code, _, err = marag("index", str(f), "--out", str(tmp_path / "i"), "--retrievers", "bm25", "-q")
    assert code == 2 and "line 1 has no 'text' field (its fields: body, id)" in err and len(err) < 500


def test_skipped_records_are_summarised_and_listed(tmp_path, marag):
    f = tmp_path / "docs.jsonl"
    f.write_text('{"id": "a", "text": "one"}\nnot json\n{"id": "b", "text": "two"}\n{"id": "c"\n')
    out = tmp_path / "i"
    code, stdout, err = marag("index", str(f), "--out", str(out), "--retrievers", "bm25", "--on-error", "skip", "-q")
    assert code == 0
    assert err.strip().splitlines() == [f"warning: skipped 2 malformed record(s) in {f} (first: docs.jsonl line 2, docs.jsonl line 4)"]
    listed = (out / "skipped-records.txt").read_text().splitlines()
    assert len(listed) == 2 and listed[0].startswith(f"{f} line 2: invalid JSON")
    assert "skipped-records.txt" in stdout


def test_ask_shows_progress_for_a_questions_file(sample_index, tmp_path, marag):
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps({"question": f"What is item {i}?"}) + "\n" for i in range(4)))
    code, out, err = marag("ask", "--questions", str(qfile), "--index", str(sample_index), "--llm", "scripted", "--json")
    assert code == 0 and len(out.strip().splitlines()) == 4
    assert "vanilla_rag: 100%" in err and "4/4" in err  # the bar, on stderr (stdout stays JSON)


def test_n_ctx_option_reaches_the_model_config(marag):
    from marag.llm import LLMConfig

    assert LLMConfig.from_spec("llamacpp", n_ctx=32768).n_ctx == 32768
    assert "n_ctx" in LLMConfig.RUNTIME_FIELDS  # more context does not change answers that fit


def test_prompt_cache_option_reaches_the_model_config_of_ask_eval_and_serve(marag):
    from marag.cli import _llm_config
    from marag.cli_options import LlmOptions

    assert _llm_config(LlmOptions(prompt_cache_mb=0)).prompt_cache_mb == 0
    assert _llm_config(LlmOptions()).prompt_cache_mb is None  # the backend's own bound
    for command in ("ask", "eval", "serve"):
        code, out, _ = marag(command, "--help")
        assert code == 0 and "--prompt-cache-mb" in out, command
    code, _, err = marag("ask", "what?", "--llm", "scripted", "--prompt-cache-mb", "-5")
    assert code != 0 and "prompt-cache-mb" in err


def test_eval_resumes_loudly_reuses_an_index_and_compares_into_its_own_directory(data_dir, tmp_path, marag):
    idx = tmp_path / "hotpot-idx"
    code, _, err = marag("index", "hotpotqa_train100", "--out", str(idx), "--retrievers", "bm25", "-q", "--data-dir", str(data_dir))
    assert code == 0, err
    runs = tmp_path / "runs"
    args = ["eval", "hotpotqa_train100", "--strategies", "vanilla_rag", "--llm", "scripted", "--runs", str(runs),
            "--index", str(idx), "--data-dir", str(data_dir)]  # fmt: skip
    code, out, err = marag(*args, "--limit", "2", "--run-id", "a")
    assert code == 0, err
    assert "building the index" not in err  # the user's index was used
    code, out, err = marag(*args, "--limit", "3", "--run-id", "a")
    assert code == 0 and f"resuming {runs / 'a'}: 2 of 3 answers done, 1 to go" in err
    code, out, err = marag(*args, "--limit", "2", "--run-id", "b")
    a_report = (runs / "a" / "report.md").read_text()
    code, out, err = marag("report", str(runs / "a"), str(runs / "b"))
    assert code == 0 and (runs / "a" / "report.md").read_text() == a_report  # run a's own report is untouched
    compare = runs / "compare-a+b" / "report.md"
    assert compare.exists() and str(compare) in out
    text = compare.read_text()
    assert "2 questions answered by every strategy; left out: a:vanilla_rag=1 (questions: " in text
    # an index of another corpus is refused
    other = tmp_path / "other-idx"
    marag("index", str(Path(__file__).parents[1] / "samples/corpus"), "--out", str(other), "--retrievers", "bm25", "-q")
    code, _, err = marag(*args[:-4], "--index", str(other), "--data-dir", str(data_dir), "--limit", "1", "--run-id", "c")
    assert code == 2 and "does not hold the corpus of 'hotpotqa_train100'" in err


def test_a_missing_lora_adapter_is_a_clear_error(sample_index, tmp_path, marag):
    code, _, err = marag("ask", "Who created Python?", "--index", str(sample_index), "--lora", str(tmp_path / "nope.gguf"))
    assert code == 2 and "Traceback" not in err
    assert "LoRA adapter not found" in err and "nope.gguf" in err and "marag train finetune" in err
