"""DataMorgana question sets (LiveRAG 2025): a `dmds_*.jsonl` file, or a folder whose
JSON Lines files all hold such records.

Each record has the question, a long reference answer, and the full text of the
documents it was generated from (`context`, parallel to `document_ids`). The corpus is
the pool of those documents across all questions and files, deduplicated by document id
(first occurrence wins; repeats are counted in `LoadedCorpus.duplicates`). Documents
have no title (FineWeb pages have none; the first line is already in the text, and
repeating it would count twice in BM25); metadata `file` names the file of first
occurrence.

Questions: id `"<file stem>:<qid>"`, answers [answer] (also kept as metadata
`reference_answer`), gold_doc_ids = document_ids, metadata = the generation categories
(`question_factuality`, `question_premise`, `question_phrasing`,
`question_linguistic_variation`, `question_multi-doc`, `user_expertise-categorization`)
and `file`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marag.corpus.loaders._io import (
    LoadContext,
    files_matching,
    first_record,
    iter_records,
    require_str,
)
from marag.corpus.loaders.base import LoadedCorpus, OnError, register_loader
from marag.corpus.models import Document, Question

# question_length is a number, not a category; everything else question_* is.
_NOT_CATEGORIES = {"question_length"}


def _is_datamorgana(file: Path) -> bool:
    if file.suffix.lower() not in (".jsonl", ".json", ".ndjson"):
        return False
    rec = first_record(file)
    if rec is None:
        return file.name.startswith("dmds_") and file.suffix.lower() == ".jsonl"
    return all(k in rec for k in ("question", "context", "document_ids"))


def detect(path: Path) -> bool:
    return bool(files_matching(path, _is_datamorgana))


def _categories(rec: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in rec.items()
        if (k.startswith("question_") and k not in _NOT_CATEGORIES)
        or k == "user_expertise-categorization"
    }


@register_loader(
    "datamorgana",
    detect=detect,
    description="DataMorgana / LiveRAG dmds_*.jsonl: questions + their generating documents",
    priority=10,
)
def load_datamorgana(path: Path, on_error: OnError = "fail") -> LoadedCorpus:
    ctx = LoadContext(path, on_error)
    documents: dict[str, Document] = {}
    questions: list[Question] = []
    for f in files_matching(path, _is_datamorgana) if path.is_dir() else [path]:
        for n, unit, rec in iter_records(ctx, f):
            try:
                ids, texts = rec.get("document_ids"), rec.get("context")
                if not (
                    isinstance(ids, list) and isinstance(texts, list) and len(ids) == len(texts)
                ):
                    raise ValueError(
                        "fields 'document_ids' and 'context' must be lists of equal length"
                    )
                if not all(isinstance(x, str) for x in ids + texts):
                    raise ValueError("'document_ids' and 'context' must hold strings")
                answer = require_str(rec, "answer")
                qid = rec.get("qid", n)
                q = Question(
                    id=f"{f.stem}:{qid}",
                    question=require_str(rec, "question"),
                    answers=[answer],
                    gold_doc_ids=list(dict.fromkeys(ids)),
                    metadata={**_categories(rec), "reference_answer": answer, "file": f.stem},
                )
            except ValueError as e:
                ctx.bad(f, n, str(e), unit)
                continue
            questions.append(q)
            for doc_id, text in zip(ids, texts, strict=True):
                if doc_id in documents:
                    ctx.duplicates += 1
                else:
                    documents[doc_id] = Document(id=doc_id, text=text, metadata={"file": f.stem})
    return ctx.result(list(documents.values()), questions, "datamorgana")
