"""Files users feed marag, fuzzed (Hypothesis): corpus files (`marag index`) and
questions files (`marag eval` / `marag ask --questions`) made of valid records mixed
with truncated JSON, fields of the wrong type, duplicate ids, empty text, binary bytes
and bytes that are not UTF-8. Each load either succeeds or raises a `CorpusError` (a
`MaragError`: the command prints one `error:` line) naming the file and the first bad
line; never another exception. The documented skips: bytes that are not UTF-8 inside a
JSON string are replaced with U+FFFD (one warning per load), and a document with empty
text is kept but gives no chunk (a load where every document is empty is an error).

A line of a few MB stands in for the issue's 50 MB one: the code path is the same (one
`json.loads` per line, an error message that quotes a column, never the line), and 50 MB
per example would make the suite slow for nothing.

Last, `marag index --overwrite` interrupted (an exception in the build, or the process
killed with SIGKILL mid-build) leaves the previous index in place and openable.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from marag.corpus import load_corpus, load_questions  # noqa: E402
from marag.errors import CorpusError, MaragError  # noqa: E402
from marag.index.uri import opened_index  # noqa: E402

# MARAG_FUZZ_EXAMPLES raises the count for a longer search (the suite's stays fixed and derandomized)
FUZZ = settings(max_examples=int(os.environ.get("MARAG_FUZZ_EXAMPLES", "80")), deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip

text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
not_a_string = st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.lists(st.integers(), max_size=2),
                         st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))  # fmt: skip
not_an_id = st.one_of(st.floats(allow_nan=False), st.booleans(), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=1))
# bytes with no newline (a line's worth) that cannot parse as JSON: a NUL first
binary = st.binary(min_size=1, max_size=60).map(lambda b: b"\x00" + b.replace(b"\n", b" "))


def _line(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def _truncated(draw, obj) -> bytes:
    """A proper, non-blank prefix of a JSON object: never valid JSON (a brace is open)."""
    whole = _line(obj)
    return whole[: draw(st.integers(1, len(whole) - 1))]


@st.composite
def corpus_lines(draw) -> tuple[list[bytes], set[int]]:
    """Lines of a corpus JSONL file, and the (1-based) numbers of the bad ones."""
    lines: list[bytes] = []
    bad: set[int] = set()
    ids: list[str] = []
    for n in range(1, draw(st.integers(1, 8)) + 1):
        kind = draw(st.sampled_from(["ok", "ok", "ok", "blank", "empty_text", "bad_utf8", "truncated", "text_type",
                                     "id_type", "metadata_type", "duplicate", "binary", "not_object"]))  # fmt: skip
        doc = {"id": f"d{n}", "title": draw(text), "text": draw(text.filter(str.strip)) if kind != "empty_text" else ""}
        if kind == "duplicate" and ids:
            doc["id"] = draw(st.sampled_from(ids))
        elif kind == "duplicate":
            kind = "ok"
        line = _line(doc)
        if kind == "blank":
            line = draw(st.sampled_from([b"", b"   ", b"\t"]))
        elif kind == "bad_utf8":  # inside the text string: replaced, the line still parses
            line = line.replace(b'"text": "', b'"text": "\xff\xfe', 1)
        elif kind == "truncated":
            line = _truncated(draw, doc)
        elif kind == "text_type":
            line = _line({**doc, "text": draw(not_a_string)})
        elif kind == "id_type":
            line = _line({**doc, "id": draw(not_an_id)})
        elif kind == "metadata_type":
            line = _line({**doc, "metadata": draw(not_a_string.filter(lambda v: v is not None and not isinstance(v, dict)))})
        elif kind == "binary":
            line = draw(binary)
        elif kind == "not_object":
            line = _line(draw(st.one_of(st.lists(st.integers(), max_size=3), st.integers(), text)))
        if kind in ("truncated", "text_type", "id_type", "metadata_type", "duplicate", "binary", "not_object"):
            bad.add(n)
        elif kind != "blank":
            ids.append(doc["id"])
        lines.append(line)
    return lines, bad


@st.composite
def question_lines(draw) -> tuple[list[bytes], set[int]]:
    lines: list[bytes] = []
    bad: set[int] = set()
    ids: list[str] = []
    for n in range(1, draw(st.integers(1, 8)) + 1):
        kind = draw(st.sampled_from(["ok", "ok", "ok", "blank", "empty_question", "bad_utf8", "truncated", "question_type",
                                     "answers_type", "gold_type", "id_type", "duplicate", "binary"]))  # fmt: skip
        q = {"id": f"q{n}", "question": draw(text.filter(str.strip)), "answers": draw(st.lists(text, max_size=2))}
        if kind == "duplicate" and ids:
            q["id"] = draw(st.sampled_from(ids))
        elif kind == "duplicate":
            kind = "ok"
        line = _line(q)
        if kind == "blank":
            line = b" "
        elif kind == "empty_question":
            line = _line({**q, "question": draw(st.sampled_from(["", " ", "\n\t"]))})
        elif kind == "bad_utf8":
            line = line.replace(b'"question": "', b'"question": "\xc3\x28', 1)
        elif kind == "truncated":
            line = _truncated(draw, q)
        elif kind == "question_type":
            line = _line({**q, "question": draw(not_a_string)})
        elif kind == "answers_type":
            line = _line({**q, "answers": draw(st.one_of(st.integers(), st.lists(st.integers(), min_size=1, max_size=2)))})
        elif kind == "gold_type":
            line = _line({**q, "gold_doc_ids": draw(st.one_of(st.integers(), st.lists(st.integers(), min_size=1, max_size=2)))})
        elif kind == "id_type":
            line = _line({**q, "id": draw(not_an_id)})
        elif kind == "binary":
            line = draw(binary)
        if kind not in ("ok", "blank", "bad_utf8"):
            bad.add(n)
        elif kind != "blank":
            ids.append(q["id"])
        lines.append(line)
    return lines, bad


UNDETECTED = "neither a document nor a question record"  # auto-detection's error: names the line it looked at


def _check_error(exc: MaragError, path: Path, bad: set[int]) -> None:
    """One line naming the file and, when a line is bad, the first bad one (when the
    format could not be told, the bad line detection looked at)."""
    assert isinstance(exc, CorpusError), type(exc)
    assert "\n" not in exc.message and len(exc.message) < 1000, exc.message
    assert str(path) in exc.message, exc.message
    if bad:
        named = re.search(r"\bline (\d+)\b", exc.message)
        assert named, (exc.message, sorted(bad))
        assert int(named.group(1)) in bad if UNDETECTED in exc.message else int(named.group(1)) == min(bad), (exc.message, sorted(bad))


def _load(loader, path: Path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the documented replacement warning; checked on its own below
        return loader(path, **kwargs)


@FUZZ
@given(drawn=corpus_lines(), fmt=st.sampled_from(["jsonl", "auto"]))
def test_a_fuzzed_corpus_file_loads_or_names_its_first_bad_line(tmp_path_factory, drawn, fmt):
    lines, bad = drawn
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    try:
        corpus = _load(load_corpus, path, format=fmt)
    except MaragError as exc:
        if fmt == "auto" and not bad:  # detection found no document line at all, or every text is empty
            assert isinstance(exc, CorpusError) and str(path) in exc.message and "\n" not in exc.message, exc.message
            return
        _check_error(exc, path, bad if fmt == "jsonl" or "line" in exc.message else set())
        return
    assert not bad, f"lines {sorted(bad)} are bad but the load succeeded"
    assert corpus.documents and any(d.text.strip() for d in corpus.documents)
    # bad lines skipped with --on-error skip: the good ones still load
    assert len({d.id for d in corpus.documents}) == len(corpus.documents)


@FUZZ
@given(drawn=corpus_lines())
def test_on_error_skip_drops_exactly_the_bad_lines(tmp_path_factory, drawn):
    lines, bad = drawn
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    try:
        corpus = _load(load_corpus, path, format="jsonl", on_error="skip")
    except MaragError as exc:  # only "no documents": every good line is empty or there is none
        assert isinstance(exc, CorpusError) and str(path) in exc.message and "no documents" in exc.message, exc.message
        return
    assert corpus.skipped == len(bad)


@FUZZ
@given(drawn=question_lines(), fmt=st.sampled_from(["questions", "auto"]))
def test_a_fuzzed_questions_file_loads_or_names_its_first_bad_line(tmp_path_factory, drawn, fmt):
    lines, bad = drawn
    path = tmp_path_factory.mktemp("questions") / "qs.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    try:
        questions = _load(load_questions, path, format=fmt)
    except MaragError as exc:
        if fmt == "auto" and "line" not in exc.message:  # not recognised as questions: names the file
            assert isinstance(exc, CorpusError) and str(path) in exc.message and "\n" not in exc.message, exc.message
            return
        _check_error(exc, path, bad)
        return
    assert not bad, f"lines {sorted(bad)} are bad but the load succeeded"
    assert questions and all(q.question.strip() for q in questions)


@FUZZ
@given(data=st.binary(max_size=300), suffix=st.sampled_from([".jsonl", ".json", ".txt", ".md", ".ndjson"]))
def test_any_bytes_in_any_input_file_load_or_give_a_corpus_error(tmp_path_factory, data, suffix):
    """Whole files of arbitrary bytes (binary, a truncated .json list, ...) through both
    loaders: a result or a CorpusError naming the file; no other exception type."""
    path = tmp_path_factory.mktemp("bytes") / f"input{suffix}"
    path.write_bytes(data)
    for loader in (load_corpus, load_questions):
        try:
            _load(loader, path)
        except MaragError as exc:
            assert isinstance(exc, CorpusError) and str(path) in exc.message and "\n" not in exc.message, exc.message


@FUZZ
@given(records=st.lists(st.fixed_dictionaries({"id": st.text(max_size=5), "text": text}), min_size=1, max_size=5),
       cut=st.integers(1, 10_000))  # fmt: skip
def test_a_truncated_json_list_names_the_file_and_where_it_ends(tmp_path_factory, records, cut):
    whole = json.dumps(records).encode()
    path = tmp_path_factory.mktemp("json") / "docs.json"
    path.write_bytes(whole[: min(cut, len(whole) - 1)])
    for fmt in ("jsonl", "auto"):
        with pytest.raises(CorpusError) as caught:
            _load(load_corpus, path, format=fmt)
        assert str(path) in caught.value.message and "\n" not in caught.value.message


def test_invalid_utf8_is_replaced_with_one_warning(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_bytes(b'{"id": "a", "text": "caf\xe9 au lait"}\n{"id": "b", "text": "fine"}\n')
    with pytest.warns(Warning, match=r"1 line\(s\) were not valid UTF-8") as caught:
        corpus = load_corpus(path)
    assert len(caught) == 1
    assert corpus.documents[0].text == "caf\ufffd au lait"


LONG = 4_000_000  # characters: a few MB stands in for the 50 MB (see the module docstring)


def test_a_very_long_line_loads_and_a_broken_one_is_named_briefly(tmp_path):
    path = tmp_path / "docs.jsonl"
    body = ("word " * (LONG // 5)).strip()
    path.write_text(json.dumps({"id": "long", "text": body}) + "\n" + json.dumps({"id": "short", "text": "x"}) + "\n")
    corpus = load_corpus(path)
    assert [len(d.text) for d in corpus.documents] == [len(body), 1]
    path.write_text(json.dumps({"id": "short", "text": "x"}) + "\n" + json.dumps({"id": "long", "text": body})[:-3] + "\n")
    with pytest.raises(CorpusError) as caught:
        load_corpus(path)
    assert str(path) in caught.value.message and "line 2" in caught.value.message and len(caught.value.message) < 500


@pytest.mark.parametrize("content, where", [
    (b'{"id": "a", "text": "one"}\n{"id": "a", "text": "two"}\n', "line 2"),  # duplicate id
    (b'{"id": "a", "text": "one"}\n{"id": "b", "text": ["two"]}\n', "line 2"),  # wrong type
    (b'{"id": "a", "text": "one"}\n{"id": "b", "te\n', "line 2"),  # truncated
    (b'\x00\x01\x02\xff\xfe binary\n', "docs.jsonl"),  # binary
    (b'{"id": "a", "text": ""}\n', "docs.jsonl"),  # empty text only
])  # fmt: skip
def test_marag_index_prints_one_error_line_naming_file_and_line(tmp_path, marag, content, where):
    path = tmp_path / "docs.jsonl"
    path.write_bytes(content)
    code, out, err = marag("index", str(path), "--out", str(tmp_path / "idx"), "--retrievers", "bm25", "--quiet")
    assert code == 2, (out, err)
    first, *rest = err.strip().splitlines()
    assert first.startswith("error: ") and str(path) in first and where in first, err
    assert all(line.startswith("  hint: ") for line in rest) and "Traceback" not in err, err


def test_marag_ask_with_a_broken_questions_file_prints_one_error_line(tmp_path, marag, cli_index):
    path = tmp_path / "qs.jsonl"
    path.write_bytes(b'{"question": "one?"}\n{"question": 5}\n')
    code, out, err = marag("ask", "--questions", str(path), "--index", str(cli_index), "--llm", "scripted")
    assert code == 2, (out, err)
    assert err.startswith(f"error: {path}: line 2") and "Traceback" not in err, err


# -- an interrupted `marag index` --------------------------------------------------------


def _index_state(idx: Path) -> tuple[str, int]:
    """The index's manifest text and the hits of a search in it (opened as a user would)."""
    from marag.index.uri import open_index

    index = open_index(idx)
    try:
        hits = index.retriever().search("python", k=3)
    finally:
        close = getattr(index, "close", None)
        if close:
            close()
    return (idx / "manifest.json").read_text(), len(hits)


def test_an_exception_during_a_rebuild_leaves_the_previous_index(tmp_path, marag, cli_index, monkeypatch):
    before = _index_state(cli_index)
    assert before[1] > 0
    from marag.index.kinds import RETRIEVERS

    def broken(*args, **kwargs):  # after chunks.jsonl is written into the build directory
        raise MaragError("injected failure in the middle of the build")

    monkeypatch.setattr(RETRIEVERS.get("bm25"), "build", broken)
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "x", "text": "something else entirely"}) + "\n")
    code, out, err = marag("index", str(other), "--out", str(cli_index), "--overwrite", "--retrievers", "bm25", "--quiet")
    assert code == 2 and "injected failure" in err, (out, err)
    assert _index_state(cli_index) == before
    assert not [p.name for p in cli_index.parent.iterdir() if ".building-" in p.name or ".old-" in p.name]


def test_marag_index_killed_during_a_rebuild_leaves_a_whole_index(tmp_path, cli_index):
    """SIGKILL at several moments of a rebuild (a corpus big enough to take a moment):
    each time the index at --out is whole and searchable: the previous one while the new
    one was being built, or the new one when the kill came after the swap (the process
    deleting the old copy or exiting); never a mix, never nothing."""
    before = _index_state(cli_index)
    big = tmp_path / "big.jsonl"
    with big.open("w") as f:
        for i in range(20_000):
            f.write(json.dumps({"id": f"d{i}", "text": f"document {i} about topic {i % 97} " + "filler words here " * 20}) + "\n")
    cmd = [sys.executable, "-m", "marag.cli", "index", str(big), "--out", str(cli_index), "--overwrite", "--retrievers", "bm25", "--quiet"]
    kept_while_building = 0
    for delay in (0.0, 0.5, 1.5, 3.0):
        for p in cli_index.parent.iterdir():  # a killed build leaves its directory: it must not start the clock
            if ".building-" in p.name:
                shutil.rmtree(p)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        # wait for the build directory to appear, then `delay` more seconds, then kill
        while time.monotonic() < deadline and proc.poll() is None:
            if any(".building-" in p.name for p in cli_index.parent.iterdir()):
                break
            time.sleep(0.01)
        time.sleep(delay)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode in (0, -signal.SIGKILL)
        state = _index_state(cli_index)
        if state == before:
            assert proc.returncode == -signal.SIGKILL  # a finished build replaced the index
            kept_while_building += 1
            continue
        # the new index, whole: every document of the new corpus, found by a search
        manifest = json.loads(state[0])
        assert manifest["counts"]["documents"] == 20_000, manifest["counts"]
        with opened_index(cli_index) as index:
            assert index.retriever().search("topic 42", k=3)
        break
    assert kept_while_building >= 1, "no kill landed during the build: make the corpus bigger"


def test_a_document_with_empty_text_is_kept_and_gives_no_chunk(tmp_path):
    """The documented skip for empty text (marag.corpus.loaders.jsonl)."""
    from marag.corpus import chunk_documents

    path = tmp_path / "docs.jsonl"
    path.write_text('{"id": "empty", "text": ""}\n{"id": "blank", "text": "  "}\n{"id": "full", "text": "words"}\n')
    corpus = load_corpus(path)
    assert [d.id for d in corpus.documents] == ["empty", "blank", "full"]
    assert [c.doc_id for c in chunk_documents(corpus.documents)] == ["full"]


@pytest.mark.parametrize("content, message", [
    (b'\n{"id": "x", "text": 5}\n', "line 2: field 'text' is int, not a string"),
    (b'\x00 garbage\n{"id": "x", "title": "t"}\n', "line 2 has no 'text' field (its fields: id, title)"),
    (b'{"id": "q", "question": ["not", "a string"]}\n', "line 1: field 'question' is list, not a string"),
])  # fmt: skip
def test_an_undetectable_file_names_the_line_detection_read_and_what_is_wrong_with_it(tmp_path, content, message):
    """Found by the fuzz above: detection said "line 1 has no 'text' field" when the
    record it read was on a later line, or had a 'text' that was not a string."""
    path = tmp_path / "docs.jsonl"
    path.write_bytes(content)
    with pytest.raises(CorpusError, match=re.escape(message)):
        load_corpus(path)
