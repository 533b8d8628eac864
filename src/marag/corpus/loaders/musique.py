"""MuSiQue in the HippoRAG layout.

A folder with `*_corpus.json` = [{title, text}, ...] and a questions file (`.json` list
or `.jsonl` of MuSiQue records with `paragraphs`). Titles repeat across different
passages, so a passage's id is `"<title>#<first 8 hex digits of sha1(text)>"`: unique,
independent of corpus order, and the same in every dataset that carries the passage.

Questions: answers = [answer] + answer_aliases; gold_doc_ids = the ids of the
paragraphs marked `is_supporting`; metadata hops (length of the decomposition, else
the "2hop__" id prefix), question_decomposition, answerable.

Given only a questions file, the documents are pooled from its `paragraphs`.
"""

from __future__ import annotations

from pathlib import Path

from marag.corpus.loaders._io import (
    LoadContext,
    PassagePool,
    iter_records,
    json_files,
    peek,
    require_str,
)
from marag.corpus.loaders._multihop import (
    corpus_and_question_files,
    is_musique_record,
    musique_paragraphs,
    musique_question,
)
from marag.corpus.loaders.base import LoadedCorpus, OnError, register_loader
from marag.corpus.models import Question


def _is_corpus(file: Path) -> bool:
    if not file.name.endswith("_corpus.json"):
        return False
    kind, rec = peek(file)
    return kind == "list" and isinstance(rec, dict) and "title" in rec and "text" in rec


def _is_questions(file: Path) -> bool:
    kind, rec = peek(file)
    return kind in ("list", "record") and is_musique_record(rec)


def detect(path: Path) -> bool:
    if path.is_file():
        # A bare {title, text} list is generic JSON unless its name says MuSiQue.
        return _is_questions(path) or ("musique" in path.name.lower() and _is_corpus(path))
    if not path.is_dir():
        return False
    files = json_files(path)
    return any(_is_corpus(f) for f in files) and any(_is_questions(f) for f in files)


@register_loader(
    "musique",
    detect=detect,
    description="MuSiQue: folder with *_corpus.json [{title, text}] + questions with paragraphs",
    priority=10,
)
def load_musique(path: Path, on_error: OnError = "fail") -> LoadedCorpus:
    ctx = LoadContext(path, on_error)
    corpus_files, question_files = corpus_and_question_files(path, _is_corpus, _is_questions)

    pool = PassagePool(ctx)
    for f in corpus_files:
        for n, unit, rec in iter_records(ctx, f):
            try:
                title, text = require_str(rec, "title"), require_str(rec, "text")
            except ValueError as e:
                ctx.bad(f, n, str(e), unit)
                continue
            pool.add(title, text)

    pool_paragraphs = not corpus_files
    questions: list[Question] = []
    for f in question_files:
        for n, unit, rec in iter_records(ctx, f):
            try:
                q = musique_question(rec, pool.id_for)
                paragraphs = musique_paragraphs(rec) if pool_paragraphs else []
            except ValueError as e:
                ctx.bad(f, n, str(e), unit)
                continue
            for p in paragraphs:
                pool.add(p["title"], p["paragraph_text"])
            questions.append(q)
    return ctx.result(pool.documents, questions, "musique")
