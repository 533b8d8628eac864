"""Generic questions in JSON Lines (or a `.json` list): your own evaluation set.

    {"id": "q1", "question": "Who ...?", "answers": ["..."], "gold_doc_ids": ["d3"], "topic": "x"}

- `question` (string) is required.
- `id` (string or integer) is optional: without it the id is `<file stem>:<line>`.
- `answers`: a list of strings, or one string (also accepted as `answer`); optional.
- `gold_doc_ids`: optional list of document ids, for retrieval metrics.
- Every other field goes into `metadata` (a `metadata` object is merged in first), so a
  `Question.model_dump()` written as a line reads back as the same question.

No documents: load with `load_questions()` (or `require_documents=False`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marag.corpus.loaders._io import (
    JSON_SUFFIXES,
    LoadContext,
    files_matching,
    iter_records,
    peek,
)
from marag.corpus.loaders.base import LoadedCorpus, OnError, register_loader
from marag.corpus.models import Question

_RESERVED = ("id", "question", "answers", "answer", "gold_doc_ids", "metadata")


def _is_questions(file: Path) -> bool:
    if file.suffix.lower() not in JSON_SUFFIXES:
        return False
    kind, rec = peek(file)
    return (
        kind in ("list", "record")
        and isinstance(rec, dict)
        and isinstance(rec.get("question"), str)
        and "text" not in rec
    )


def detect(path: Path) -> bool:
    return bool(files_matching(path, _is_questions))


def _strings(value: Any, field: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError(f"field {field!r} must be a string or a list of strings")


def to_question(rec: dict[str, Any], fallback_id: str) -> Question:
    text = rec.get("question")
    if not isinstance(text, str):
        raise ValueError("missing required string field 'question'")
    if not text.strip():
        raise ValueError("field 'question' is empty")
    raw_id = rec.get("id")
    if raw_id is None or raw_id == "":
        qid = fallback_id
    elif isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool):
        qid = str(raw_id)
    else:
        raise ValueError(f"field 'id' must be a string or integer, got {type(raw_id).__name__}")
    answers = _strings(rec.get("answers"), "answers")
    answers += [a for a in _strings(rec.get("answer"), "answer") if a not in answers]
    meta = rec.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise ValueError(f"field 'metadata' must be an object, got {type(meta).__name__}")
    metadata = dict(meta or {})
    metadata.update((k, v) for k, v in rec.items() if k not in _RESERVED)
    return Question(
        id=qid,
        question=text,
        answers=answers,
        gold_doc_ids=_strings(rec.get("gold_doc_ids"), "gold_doc_ids"),
        metadata=metadata,
    )


@register_loader(
    "questions",
    detect=detect,
    description="JSON Lines questions: {id?, question, answers?, gold_doc_ids?, ...}, no documents",
    priority=90,
    has_documents=False,
)
def load_questions_jsonl(path: Path, on_error: OnError = "fail") -> LoadedCorpus:
    ctx = LoadContext(path, on_error)
    files = [path] if path.is_file() else files_matching(path, _is_questions)
    questions: list[Question] = []
    first_seen: dict[str, str] = {}
    for file in files:
        for n, unit, rec in iter_records(ctx, file):
            try:
                q = to_question(rec, f"{file.stem}:{n}")
                if q.id in first_seen:
                    raise ValueError(f"duplicate id {q.id!r} (first seen at {first_seen[q.id]})")
            except ValueError as e:
                ctx.bad(file, n, str(e), unit)
                continue
            first_seen[q.id] = f"{file.name} {unit} {n}"
            questions.append(q)
    return ctx.result([], questions, "questions")
