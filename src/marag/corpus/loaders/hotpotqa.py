"""HotpotQA in the HippoRAG layout.

A folder with `*_corpus.json` = {title: [sentences]} and a questions file (`*.json`
list of HotpotQA records). Documents: id = title = the Wikipedia title, text = the
sentences concatenated as-is (they carry their own leading spaces). Questions: id
`_id`, answers [answer], gold_doc_ids = the unique titles of `supporting_facts` in order,
metadata type / level / supporting_facts.

Given only a questions `.json` file (no corpus beside it), the documents are pooled
from the questions' own `context` paragraphs; given only a corpus file, there are no
questions.
"""

from __future__ import annotations

import json
from pathlib import Path

from marag.corpus.loaders._io import LoadContext, iter_records, json_files, peek
from marag.corpus.loaders._multihop import (
    corpus_and_question_files,
    hotpot_context,
    hotpot_question,
    is_hotpot_record,
)
from marag.corpus.loaders.base import LoadedCorpus, OnError, register_loader
from marag.corpus.models import Document, Question
from marag.errors import CorpusError


def _is_corpus(file: Path) -> bool:
    return file.name.endswith("_corpus.json") and peek(file)[0] == "object"


def _is_questions(file: Path) -> bool:
    kind, rec = peek(file)
    return file.suffix.lower() == ".json" and kind == "list" and is_hotpot_record(rec)


def detect(path: Path) -> bool:
    if path.is_file():
        return _is_corpus(path) or _is_questions(path)
    return path.is_dir() and any(_is_corpus(f) for f in json_files(path))


def _read_corpus(ctx: LoadContext, file: Path) -> list[Document]:
    try:
        data = json.loads(ctx.read_text(file))
    except json.JSONDecodeError as e:
        raise CorpusError(
            f"{file} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})",
            hint="fix or re-download the file",
        ) from None
    if not isinstance(data, dict):
        raise CorpusError(
            f"{file}: expected a JSON object {{title: [sentences]}}, got {type(data).__name__}",
            hint="pass the HotpotQA folder, or choose another --format",
        )
    docs = []
    for i, (title, sentences) in enumerate(data.items(), 1):
        if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
            ctx.bad(file, i, f"entry {title!r} must be a list of sentences", "record")
            continue
        docs.append(Document(id=title, title=title, text="".join(sentences)))
    return docs


@register_loader(
    "hotpotqa",
    detect=detect,
    description="HotpotQA: folder with *_corpus.json {title: [sentences]} + questions .json",
    priority=10,
)
def load_hotpotqa(path: Path, on_error: OnError = "fail") -> LoadedCorpus:
    ctx = LoadContext(path, on_error)
    corpus_files, question_files = corpus_and_question_files(path, _is_corpus, _is_questions)

    documents: list[Document] = []
    by_title: dict[str, Document] = {}  # title is the id: first occurrence wins

    def add(doc: Document) -> None:
        if doc.id in by_title:
            ctx.duplicates += 1
        else:
            by_title[doc.id] = doc
            documents.append(doc)

    for f in corpus_files:
        for doc in _read_corpus(ctx, f):
            add(doc)
    pool_contexts = not corpus_files

    questions: list[Question] = []
    for f in question_files:
        for n, unit, rec in iter_records(ctx, f):
            try:
                q = hotpot_question(rec, gold_id=lambda title: title)
                context = hotpot_context(rec) if pool_contexts else []
            except ValueError as e:
                ctx.bad(f, n, str(e), unit)
                continue
            questions.append(q)
            for title, text in context:
                add(Document(id=title, title=title, text=text))
    return ctx.result(documents, questions, "hotpotqa")
