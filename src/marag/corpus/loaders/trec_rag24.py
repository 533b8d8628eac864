"""TREC 2024 RAG track topics with NIST nuggets. Questions only: the track's corpus
(MS MARCO v2.1 segments) is not shipped, so `documents` is empty and `load_corpus`
needs `require_documents=False` (or use `load_questions`).

Input: the folder holding `topics.rag24.test.jsonl` ({iid, query}) or `.tsv` (id TAB
query) and the nuggets file (JSON Lines {qid, query, nuggets: [{text, importance}]}),
or either file (its partner is looked up beside it).

By default only the topics that have nuggets are returned (56 of 301): the others
cannot be scored. With no nuggets file at all, every topic is returned.
`load_trec_rag24(path, all_topics=True)` returns every topic, with `nuggets` present
only where assessed. The question text is the official topic text (the nuggets file
drops some trailing '?' and apostrophes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marag.corpus.loaders._io import (
    LoadContext,
    files_matching,
    first_record,
    iter_records,
    json_files,
    require_str,
)
from marag.corpus.loaders.base import LoadedCorpus, OnError, register_loader
from marag.corpus.models import Question


def _is_nuggets(file: Path) -> bool:
    rec = first_record(file)
    return rec is not None and "nuggets" in rec and "qid" in rec


def _is_topics(file: Path) -> bool:
    if file.suffix.lower() == ".tsv":
        return file.name.startswith("topics")
    rec = first_record(file)
    return (
        rec is not None
        and "query" in rec
        and ("iid" in rec or "qid" in rec)
        and "nuggets" not in rec
    )


def detect(path: Path) -> bool:
    if path.is_file():
        return _is_nuggets(path) or (path.name.startswith("topics") and _is_topics(path))
    return path.is_dir() and any(_is_nuggets(f) for f in json_files(path))


def _read_topics(ctx: LoadContext, file: Path) -> dict[str, str]:
    topics: dict[str, str] = {}
    if file.suffix.lower() == ".tsv":
        for lineno, line in enumerate(ctx.read_text(file).split("\n"), 1):
            if not line.strip():
                continue
            tid, sep, query = line.partition("\t")
            if not sep or not query.strip():
                ctx.bad(file, lineno, "expected 'topic id<TAB>query'")
                continue
            topics[tid.strip()] = query.strip()
        return topics
    for n, unit, rec in iter_records(ctx, file):
        tid = rec.get("iid", rec.get("qid"))
        query = rec.get("query")
        if not isinstance(tid, (str, int)) or not isinstance(query, str):
            ctx.bad(file, n, "expected {iid, query}", unit)
            continue
        topics[str(tid)] = query
    return topics


def _nuggets(rec: dict[str, Any]) -> list[dict[str, str]]:
    raw = rec.get("nuggets")
    if not isinstance(raw, list) or not all(
        isinstance(x, dict) and isinstance(x.get("text"), str) for x in raw
    ):
        raise ValueError("field 'nuggets' must be a list of {text, importance}")
    return [{"text": x["text"].strip(), "importance": str(x.get("importance", ""))} for x in raw]


def load_trec_rag24(
    path: Path, on_error: OnError = "fail", all_topics: bool = False
) -> LoadedCorpus:
    ctx = LoadContext(path, on_error)
    # Given one of the two files, find its partner beside it.
    folder = path.parent if path.is_file() else path
    if path.is_file() and _is_nuggets(path):
        nugget_files = [path]
    else:
        nugget_files = files_matching(folder, _is_nuggets)
    if path.is_file() and _is_topics(path):
        topic_file: Path | None = path
    else:
        # One topics file is enough; prefer JSON Lines over its TSV twin.
        candidates = sorted(
            (f for f in folder.iterdir() if f.is_file() and f.name.startswith("topics")),
            key=lambda f: (f.suffix.lower() == ".tsv", f.name),
        )
        topic_file = next((f for f in candidates if _is_topics(f)), None)
    topics = _read_topics(ctx, topic_file) if topic_file else {}

    assessed: dict[str, tuple[str, list[dict[str, str]]]] = {}
    for f in nugget_files:
        for n, unit, rec in iter_records(ctx, f):
            try:
                qid = str(rec.get("qid"))
                assessed[qid] = (require_str(rec, "query"), _nuggets(rec))
            except ValueError as e:
                ctx.bad(f, n, str(e), unit)

    # Without any nuggets file there is nothing to filter by: keep every topic.
    keep_all = all_topics or not nugget_files
    ids = list(topics) if keep_all else [t for t in topics if t in assessed]
    ids += [t for t in assessed if t not in topics]  # nuggets without a topics file
    questions = []
    for tid in ids:
        metadata: dict[str, Any] = {}
        if tid in assessed:
            metadata["nuggets"] = assessed[tid][1]
        questions.append(
            Question(id=tid, question=topics.get(tid) or assessed[tid][0], metadata=metadata)
        )
    return ctx.result([], questions, "trec_rag24")


@register_loader(
    "trec_rag24",
    detect=detect,
    description="TREC 2024 RAG topics + NIST nuggets (questions only, no documents)",
    priority=10,
    has_documents=False,
)
def _load_assessed(path: Path, on_error: OnError = "fail") -> LoadedCorpus:
    return load_trec_rag24(path, on_error)
