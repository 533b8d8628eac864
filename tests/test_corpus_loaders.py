"""Loaders: every shared benchmark loads with the right counts; bad input fails with a
message naming the file and line, or is skipped and counted."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from marag.corpus import (
    LOADERS,
    CorpusWarning,
    Document,
    detect_format,
    load_corpus,
    load_questions,
)
from marag.errors import CorpusError, UnknownNameError


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _gold_ids_exist(corpus) -> bool:
    ids = {d.id for d in corpus.documents}
    return all(g in ids for q in corpus.questions for g in q.gold_doc_ids)


# --- shared benchmark data ----------------------------------------------------------------


def test_hotpotqa(data_dir):
    c = load_corpus(data_dir / "hotpotqa_train100")
    assert c.format == "hotpotqa"
    assert (len(c.documents), len(c.questions)) == (994, 100)
    assert len({d.id for d in c.documents}) == 994
    q = c.questions[0]
    assert q.id == "5a77ec115542992a6e59dff7"
    assert q.answers == ["a spirit"]
    assert q.gold_doc_ids == ["Alû", "Lilu (mythology)"]
    assert q.metadata["type"] == "bridge" and q.metadata["level"] == "easy"
    assert _gold_ids_exist(c)
    # Sentences keep their own leading spaces: concatenation restores the paragraph.
    doc = next(d for d in c.documents if d.id == "Demon Dice")
    assert "Tim Brown. In it, each player" in doc.text


def test_hotpotqa_questions_file_alone_pools_the_same_documents(data_dir):
    full = load_corpus(data_dir / "hotpotqa_train100")
    alone = load_corpus(data_dir / "hotpotqa_train100" / "hotpotqa_train.json")
    assert {(d.id, d.text) for d in alone.documents} == {(d.id, d.text) for d in full.documents}


def test_musique(data_dir):
    c = load_corpus(data_dir / "musique_train100")
    assert c.format == "musique"
    assert (len(c.documents), len(c.questions)) == (1890, 100)
    ids = [d.id for d in c.documents]
    assert len(set(ids)) == 1890  # titles repeat; ids must not
    assert len({d.title for d in c.documents}) < 1890
    assert _gold_ids_exist(c)
    q = c.questions[0]
    assert q.answers == ["G. Stanley Hall", "Stanley Hall"]
    assert q.metadata["hops"] == 2 and len(q.metadata["question_decomposition"]) == 2
    assert len(q.gold_doc_ids) == 2
    assert {q.metadata["hops"] for q in c.questions} == {2, 3, 4}


def test_musique_ids_are_stable_across_loads(data_dir):
    a = load_corpus(data_dir / "musique_train100")
    b = load_corpus(data_dir / "musique_train100" / "musique_train.json")  # pooled paragraphs
    assert {d.id for d in a.documents} == {d.id for d in b.documents}
    assert [q.gold_doc_ids for q in a.questions] == [q.gold_doc_ids for q in b.questions]


def test_datamorgana(data_dir):
    folder = data_dir / "datamorgana"
    c = load_corpus(folder)
    assert c.format == "datamorgana"
    assert len(c.questions) == 321 + 50
    # 569 document references: 496 unique in dmds_500_easy (3 repeats there), 70 in
    # dmds_multi_n50, one of which is also in the first file -> 565 unique.
    assert len(c.documents) == 565 and c.duplicates == 4
    assert _gold_ids_exist(c)
    easy = load_corpus(folder / "dmds_500_easy.jsonl")
    assert len(easy.documents) == 496 and len(easy.questions) == 321
    q = c.questions[0]
    assert q.id == "dmds_500_easy:2"
    assert q.metadata["reference_answer"] == q.answers[0]
    assert q.metadata["file"] == "dmds_500_easy"
    assert q.metadata["question_phrasing"] == "short-search-query"
    assert q.metadata["user_expertise-categorization"] == "novice"
    assert "question_length" not in q.metadata
    assert all(d.title == "" and d.text for d in c.documents)


def test_nq(data_dir):
    c = load_corpus(data_dir / "nq_open_oracle")
    assert c.format == "nq"
    assert len(c.questions) == 600
    assert len(c.documents) == 596 and c.duplicates == 4
    assert _gold_ids_exist(c)
    assert all(len(q.gold_doc_ids) == 1 for q in c.questions)
    assert c.questions[0].id == "nq:0" and c.questions[-1].id == "nq:599"
    assert c.documents[0].id.startswith("List of Nobel laureates in Physics#")


def test_hoprag(data_dir):
    c = load_corpus(data_dir / "hoprag_examples")
    assert c.format == "hoprag"
    assert len(c.questions) == 30
    by_source = {
        s: [q for q in c.questions if q.metadata["source"] == s]
        for s in ("hotpot", "musique", "2wiki")
    }
    assert {s: len(qs) for s, qs in by_source.items()} == {"hotpot": 10, "musique": 10, "2wiki": 10}
    assert _gold_ids_exist(c)
    assert all(q.gold_doc_ids for q in c.questions)
    # 2Wiki sentences have no leading space: they are joined with one.
    wiki = next(d for d in c.documents if d.title == "Hold on Me (Grinspoon song)")
    assert 'Pills". It was released' in wiki.text


def test_trec_rag24_is_questions_only(data_dir):
    folder = data_dir / "trec_rag24"
    with pytest.raises(CorpusError, match="no documents found") as err:
        load_corpus(folder)
    assert "load_questions" in err.value.hint
    qs = load_questions(folder)
    assert len(qs) == 56
    assert all(q.metadata["nuggets"] for q in qs)
    assert {n["importance"] for q in qs for n in q.metadata["nuggets"]} == {"vital", "okay"}
    wbc = next(q for q in qs if q.id == "2024-105741")
    assert wbc.question.endswith("?")  # official topic text, not the nuggets file's copy
    from marag.corpus.loaders.trec_rag24 import load_trec_rag24

    everything = load_trec_rag24(folder, all_topics=True)
    assert len(everything.questions) == 301
    assert sum("nuggets" in q.metadata for q in everything.questions) == 56


@pytest.mark.parametrize(
    ("rel", "fmt"),
    [
        ("hotpotqa_train100", "hotpotqa"),
        ("musique_train100", "musique"),
        ("datamorgana", "datamorgana"),
        ("datamorgana/dmds_multi_n50.jsonl", "datamorgana"),
        ("nq_open_oracle", "nq"),
        ("nq_open_oracle/nq_open_oracle_dev600.jsonl", "nq"),
        ("hoprag_examples", "hoprag"),
        ("hoprag_examples/wiki_example.jsonl", "hoprag"),
        ("trec_rag24", "trec_rag24"),
    ],
)
def test_auto_detection(data_dir, rel, fmt):
    assert detect_format(data_dir / rel) == fmt


def test_load_questions(data_dir):
    qs = load_questions(data_dir / "hotpotqa_train100")
    assert len(qs) == 100


# --- generic JSON Lines --------------------------------------------------------------------


def test_jsonl_fields_and_fallback_ids(tmp_path):
    f = _write_jsonl(
        tmp_path / "notes.jsonl",
        [
            {"id": "a", "title": "A", "text": "alpha", "lang": "en"},
            {"text": "no id here"},
            {"id": 7, "text": "integer id", "title": None, "metadata": {"k": 1}},
        ],
    )
    c = load_corpus(f)
    assert c.format == "jsonl"
    assert [d.id for d in c.documents] == ["a", "notes:2", "7"]
    assert c.documents[0].metadata == {"lang": "en"}
    assert c.documents[2].title == "" and c.documents[2].metadata == {"k": 1}


def test_jsonl_round_trips_document_dumps(tmp_path):
    docs = [Document(id="x", title="T", text="body", metadata={"folder": "f", "n": 2})]
    f = _write_jsonl(tmp_path / "docs.jsonl", [d.model_dump() for d in docs])
    assert load_corpus(f).documents == docs


def test_json_list_file(tmp_path):
    f = tmp_path / "docs.json"
    f.write_text(json.dumps([{"text": "one"}, {"id": "b", "text": "two"}]), encoding="utf-8")
    c = load_corpus(f)
    assert c.format == "jsonl"
    assert [d.id for d in c.documents] == ["docs:1", "b"]


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        ("{not json", "invalid JSON"),
        ('{"id": "x"}', "missing required field 'text'"),
        ('{"id": "x", "text": 5}', "field 'text' must be a string"),
        ("[1, 2]", "expected a JSON object"),
        ('{"id": "a", "text": "dup"}', "duplicate id 'a'"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad_line, reason):
    f = tmp_path / "corpus.jsonl"
    f.write_text(
        '{"id": "a", "text": "fine"}\n\n' + bad_line + '\n{"text": "after"}\n', encoding="utf-8"
    )
    with pytest.raises(CorpusError) as err:
        load_corpus(f)
    msg = str(err.value)
    assert str(f) in msg and "line 3" in msg and reason in msg
    assert err.value.hint == "fix the line or pass --on-error skip"


def test_malformed_first_line_is_still_detected_as_jsonl(tmp_path):
    f = tmp_path / "corpus.jsonl"
    f.write_text('{"text": broken\n{"text": "ok"}\n', encoding="utf-8")
    with pytest.raises(CorpusError, match="line 1"):
        load_corpus(f)


def test_skip_mode_counts_and_warns(tmp_path):
    lines = ['{"text": "good 1"}', "oops", '{"title": "no text"}', '{"text": "good 2"}', "{]"]
    f = tmp_path / "c.jsonl"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.warns(
        CorpusWarning,
        match=r"skipped 3 malformed record\(s\).*c\.jsonl line 2, c\.jsonl line 3, c\.jsonl line 5",
    ):
        c = load_corpus(f, on_error="skip")
    assert c.skipped == 3
    assert [d.text for d in c.documents] == ["good 1", "good 2"]
    assert [d.id for d in c.documents] == ["c:1", "c:4"]  # ids keep their line numbers


def test_on_error_is_validated(tmp_path):
    f = _write_jsonl(tmp_path / "c.jsonl", [{"text": "x"}])
    with pytest.raises(ValueError, match="on_error"):
        load_corpus(f, on_error="ignore")  # type: ignore[arg-type]


def test_non_utf8_bytes_are_replaced_with_one_warning(tmp_path):
    f = tmp_path / "latin1.jsonl"
    f.write_bytes(
        b'{"id": "a", "text": "caf\xe9"}\n'
        b'{"id": "b", "text": "plain"}\n'
        b'{"id": "c", "text": "\xff\xfe na\xefve"}\n'
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = load_corpus(f)
    utf8 = [w for w in caught if "not valid UTF-8" in str(w.message)]
    assert len(utf8) == 1 and "2 line(s)" in str(utf8[0].message)
    assert c.documents[0].text == "caf\ufffd"
    assert c.documents[1].text == "plain"
    assert "\ufffd" in c.documents[2].text and "na" in c.documents[2].text


def test_utf8_bom_is_ignored(tmp_path):
    f = tmp_path / "bom.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"text": "hello"}\n')
    assert load_corpus(f).documents[0].text == "hello"


def test_empty_file_is_an_empty_corpus(tmp_path):
    f = tmp_path / "empty.jsonl"
    f.write_text("", encoding="utf-8")
    with pytest.raises(CorpusError, match="no documents found in") as err:
        load_corpus(f)
    assert err.value.hint


def test_empty_folder_is_an_empty_corpus(tmp_path):
    (tmp_path / "docs").mkdir()
    with pytest.raises(CorpusError, match="no documents found in"):
        load_corpus(tmp_path / "docs")


def test_whitespace_only_documents_count_as_empty(tmp_path):
    f = _write_jsonl(tmp_path / "blank.jsonl", [{"text": "  "}, {"text": "\n"}])
    with pytest.raises(CorpusError, match="no documents found") as err:
        load_corpus(f)
    assert "empty text" in err.value.hint


def test_missing_path(tmp_path):
    with pytest.raises(CorpusError, match="no such file or folder"):
        load_corpus(tmp_path / "nope")


def test_unknown_layout_lists_formats(tmp_path):
    (tmp_path / "data.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="cannot tell the format") as err:
        load_corpus(tmp_path)
    for name in ("jsonl", "folder", "hotpotqa", "datamorgana", "trec_rag24"):
        assert name in err.value.hint


def test_unknown_format_name(tmp_path):
    f = _write_jsonl(tmp_path / "c.jsonl", [{"text": "x"}])
    with pytest.raises(UnknownNameError, match="unknown loaders 'xml'") as err:
        load_corpus(f, format="xml")
    assert "jsonl" in err.value.hint


def test_load_questions_without_questions(tmp_path):
    f = _write_jsonl(tmp_path / "c.jsonl", [{"text": "x"}])
    with pytest.raises(CorpusError, match="no questions found") as err:
        load_questions(f)
    assert "hotpotqa" in err.value.hint and "jsonl" not in err.value.hint


def test_skip_mode_in_benchmark_format(tmp_path):
    good = {
        "question": "q?",
        "answers": ["a"],
        "ctxs": [{"title": "T", "text": "t", "isgold": True}],
    }
    f = tmp_path / "nq.jsonl"
    f.write_text(
        json.dumps(good)
        + "\n"
        + '{"question": "q2", "answers": "x", "ctxs": 3}\n'
        + json.dumps(good)
        + "\n",
        encoding="utf-8",
    )
    with pytest.raises(CorpusError, match=r"nq\.jsonl: line 2: field 'ctxs'"):
        load_corpus(f)
    with pytest.warns(CorpusWarning, match="skipped 1"):
        c = load_corpus(f, on_error="skip")
    assert [q.id for q in c.questions] == ["nq:0", "nq:2"]
    assert len(c.documents) == 1 and c.duplicates == 1


def test_missing_gold_ids_warn(tmp_path):
    rec = {
        "id": "2hop__1_2",
        "question": "q",
        "answer": "a",
        "paragraphs": [{"title": "T", "paragraph_text": "gold text", "is_supporting": True}],
    }
    (tmp_path / "x_corpus.json").write_text(
        json.dumps([{"title": "T", "text": "other text"}]), encoding="utf-8"
    )
    _write_jsonl(tmp_path / "x_questions.jsonl", [rec])
    with pytest.warns(CorpusWarning, match="1 gold document id"):
        c = load_corpus(tmp_path)
    assert c.format == "musique"
    assert c.questions[0].metadata["hops"] == 2


# --- generic questions ----------------------------------------------------------------


def test_questions_jsonl(tmp_path):
    from marag.corpus import Question

    qs = [
        Question(id="q1", question="Who?", answers=["Ann"], gold_doc_ids=["d1"], metadata={"c": 1}),
        Question(id="q2", question="When?"),
    ]
    f = _write_jsonl(tmp_path / "mine.jsonl", [q.model_dump() for q in qs])
    assert detect_format(f) == "questions"
    assert load_questions(f) == qs
    with pytest.raises(CorpusError, match="no documents found") as err:
        load_corpus(f)
    assert "load_questions" in err.value.hint


def test_questions_jsonl_loose_fields(tmp_path):
    f = _write_jsonl(
        tmp_path / "q.jsonl",
        [{"question": "a?", "answer": "x", "topic": "t"}, {"question": "b?", "answers": "y"}],
    )
    qs = load_questions(f)
    assert [(q.id, q.answers) for q in qs] == [("q:1", ["x"]), ("q:2", ["y"])]
    assert qs[0].metadata == {"topic": "t"}
    bad = _write_jsonl(
        tmp_path / "bad.jsonl", [{"question": "a?"}, {"question": "b?", "answers": 3}]
    )
    with pytest.raises(CorpusError, match=r"bad\.jsonl: line 2: field 'answers'"):
        load_questions(bad)


# --- folder ------------------------------------------------------------------------------


def test_folder_loader(tmp_path):
    root = tmp_path / "kb"
    (root / "finance" / "2023").mkdir(parents=True)
    (root / "health").mkdir()
    (root / ".git").mkdir()
    (root / "readme.md").write_text("intro text\n\n## Overview\nmore", encoding="utf-8")
    (root / "finance" / "2023" / "q1.md").write_text(
        "```\n# not a title\n```\n# Q1 Report #\n\nRevenue  grew.\n", encoding="utf-8"
    )
    (root / "health" / "flu.txt").write_text(
        "# plain text keeps the stem\nFlu season.", encoding="utf-8"
    )
    (root / "health" / "image.png").write_bytes(b"\x89PNG")
    (root / ".git" / "notes.txt").write_text("ignored", encoding="utf-8")
    c = load_corpus(root)
    assert c.format == "folder"
    assert [d.id for d in c.documents] == ["finance/2023/q1.md", "health/flu.txt", "readme.md"]
    q1, flu, readme = c.documents
    assert q1.title == "Q1 Report" and "Revenue  grew." in q1.text
    assert q1.metadata == {"path": "finance/2023/q1.md", "folder": "finance"}
    assert flu.title == "flu" and flu.metadata["folder"] == "health"
    assert readme.title == "Overview" and "folder" not in readme.metadata


def test_folder_non_utf8_file(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"ok line\nbad \xc3\x28 line\n")
    with pytest.warns(CorpusWarning, match="1 line"):
        c = load_corpus(tmp_path)
    assert c.documents[0].text.startswith("ok line\nbad \ufffd")


def test_single_text_file(tmp_path):
    f = tmp_path / "one.md"
    f.write_text("# Hello\nworld", encoding="utf-8")
    c = load_corpus(f)
    assert [(d.id, d.title) for d in c.documents] == [("one.md", "Hello")]


# --- registry ----------------------------------------------------------------------------


def test_registry_lists_all_formats():
    assert {
        "jsonl",
        "questions",
        "folder",
        "hotpotqa",
        "musique",
        "datamorgana",
        "nq",
        "hoprag",
        "trec_rag24",
    } <= set(LOADERS.names())


def test_registered_loader_takes_part_in_detection(tmp_path, monkeypatch):
    from marag.corpus.loaders.base import LoadedCorpus, Loader

    def load(path, on_error="fail"):
        return LoadedCorpus(documents=[Document(id="1", text=path.read_text())], format="csvish")

    # Registered for this test only (monkeypatch restores the registry afterwards).
    loader = Loader("csvish", load, detect=lambda p: p.suffix == ".csvish", priority=5)
    monkeypatch.setitem(LOADERS._items, "csvish", loader)
    f = tmp_path / "x.csvish"
    f.write_text("hello", encoding="utf-8")
    assert detect_format(f) == "csvish"
    assert load_corpus(f).documents[0].text == "hello"


def test_trec_rag24_from_either_file(data_dir):
    folder = data_dir / "trec_rag24"
    for name in (
        "topics.rag24.test.jsonl",
        "hr_scored_nist_nuggets_20241218_rag24.test_qrels_nist.jsonl",
    ):
        assert detect_format(folder / name) == "trec_rag24"
        assert len(load_questions(folder / name)) == 56


def test_trec_rag24_tsv_topics_without_nuggets(tmp_path):
    (tmp_path / "topics.test.tsv").write_text(
        "t1\tfirst question?\nt2\tsecond?\n", encoding="utf-8"
    )
    qs = load_questions(tmp_path / "topics.test.tsv")
    assert [(q.id, q.question) for q in qs] == [("t1", "first question?"), ("t2", "second?")]


def test_a_folder_of_corpus_and_questions_is_one_set(tmp_path):
    """marag's own layout (the fresh report sets come this way): corpus.jsonl and
    questions.jsonl side by side, detected and loaded together."""
    from marag.corpus import load_corpus

    _write_jsonl(tmp_path / "corpus.jsonl", [{"id": "d1", "title": "Tux", "text": "Tux is the Linux mascot."},
                                             {"id": "d2", "title": "Python", "text": "Python was created by Guido."}])  # fmt: skip
    _write_jsonl(tmp_path / "questions.jsonl", [{"id": "q1", "question": "What is Linux's mascot?", "answers": ["Tux"], "gold_doc_ids": ["d1"]}])
    loaded = load_corpus(tmp_path)
    assert loaded.format == "paired" and [d.id for d in loaded.documents] == ["d1", "d2"]
    assert loaded.questions[0].gold_doc_ids == ["d1"] and loaded.questions[0].answers == ["Tux"]
    (tmp_path / "questions.jsonl").write_text('{"id": "q1", "question": 5}\n')
    with pytest.raises(CorpusError, match="questions.jsonl"):
        load_corpus(tmp_path)
