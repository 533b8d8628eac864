"""Read documents and questions from the formats marag knows.

    corpus = load_corpus("data/hotpotqa_train100")     # format detected
    corpus.documents, corpus.questions

Each format is a `Loader` in the `LOADERS` registry (third-party formats register via
the `marag.loaders` entry point group). Auto-detection asks each loader, most specific
first, whether it recognises the path from file names and the first record of each
file; the generic `jsonl` and `folder` formats are asked last.

Problems in the input raise `CorpusError` naming the file and line; with
`on_error="skip"` malformed records are dropped and counted instead (one warning per
load). Bytes that are not UTF-8 are replaced, never fatal (one warning per load).
"""

from __future__ import annotations

import warnings
from os import PathLike
from pathlib import Path

from marag.corpus._gc import paused_gc

# Built-in formats register on import.
from marag.corpus.loaders import (  # noqa: F401  (imported for registration)
    datamorgana,
    folder,
    hoprag,
    hotpotqa,
    jsonl,
    musique,
    nq,
    paired,
    questions,
    trec_rag24,
)
from marag.corpus.loaders.base import (
    LOADERS,
    CorpusWarning,
    LoadedCorpus,
    Loader,
    OnError,
    register_loader,
)
from marag.corpus.loaders._io import JSON_SUFFIXES, peek, peeked_at
from marag.corpus.models import Question
from marag.errors import CorpusError

__all__ = [
    "LOADERS",
    "CorpusWarning",
    "LoadedCorpus",
    "Loader",
    "OnError",
    "detect_format",
    "load_corpus",
    "load_questions",
    "register_loader",
]


def _formats_hint() -> str:
    lines = [f"{name} ({LOADERS.get(name).description})" for name in LOADERS.names()]
    return "pass the format explicitly (--format NAME); known formats: " + "; ".join(lines)


def detect_format(path: str | PathLike[str]) -> str:
    """The name of the first loader (by priority) that recognises `path`."""
    p = Path(path)
    ordered = sorted(
        (LOADERS.get(n) for n in LOADERS.names()), key=lambda ld: (ld.priority, ld.name)
    )
    for loader in ordered:
        try:
            if loader.detect(p):
                return loader.name
        except OSError:
            continue  # unreadable files cannot be ours; the caller reports the path
    if p.is_file() and p.suffix.lower() in JSON_SUFFIXES:
        kind, rec = peek(p)
        if kind in ("record", "list") and isinstance(rec, dict):  # generic JSONL that fails its checks
            # the record detection looked at: not always line 1 (blank or broken lines
            # before it are passed over), and a field of the wrong type is not a missing one
            wrong = next((f for f in ("text", "question") if f in rec and not isinstance(rec[f], str)), None)
            problem = (f": field {wrong!r} is {type(rec[wrong]).__name__}, not a string" if wrong
                       else f" has no 'text' field (its fields: {', '.join(sorted(rec)) or 'none'})")  # fmt: skip
            raise CorpusError(
                f"{p}: {peeked_at(p)}{problem}, so it is neither a document nor a question record",
                hint="give every document a 'text' field (optionally 'id', 'title' and metadata fields), "
                "or every question a 'question' field; or name the format with --format",
            )
    raise CorpusError(f"cannot tell the format of {p}", hint=_formats_hint())


def load_corpus(
    path: str | PathLike[str],
    format: str = "auto",
    on_error: OnError = "fail",
    require_documents: bool = True,
) -> LoadedCorpus:
    """Load documents (and questions, where the format has them) from a file or folder.

    `require_documents=False` accepts question-only sets such as `trec_rag24`; otherwise
    a load that yields no document with any text raises `CorpusError`.
    """
    if on_error not in ("skip", "fail"):
        raise ValueError(f"on_error must be 'skip' or 'fail', not {on_error!r}")
    p = Path(path).expanduser()
    if not p.exists():
        raise CorpusError(
            f"no such file or folder: {p}",
            hint="check the path (relative paths start from the current directory)",
        )
    name = detect_format(p) if format == "auto" else format
    loader = LOADERS.get(name)
    with paused_gc():  # many small acyclic objects: see marag.corpus._gc
        corpus = loader.load(p, on_error)

    if require_documents and not any(d.text.strip() for d in corpus.documents):
        if not loader.has_documents:
            hint = (
                f"the {name} format holds questions only: use load_questions() "
                "or require_documents=False"
            )
        elif corpus.documents:
            hint = f"all {len(corpus.documents)} documents have empty text: check the text field"
        else:
            hint = (
                "point at a file or folder with content: a folder needs .txt/.md files, JSON "
                'Lines needs one {"text": ...} object per line'
            )
        raise CorpusError(f"no documents found in {p} (format {name})", hint=hint)

    if corpus.documents and corpus.questions:
        known = {d.id for d in corpus.documents}
        missing = [g for q in corpus.questions for g in q.gold_doc_ids if g not in known]
        if missing:
            warnings.warn(
                f"{len(missing)} gold document id(s) in {p} are not in its corpus "
                f"(e.g. {missing[0]!r}); retrieval recall for those questions is capped",
                CorpusWarning,
                stacklevel=2,
            )
    return corpus


def load_questions(
    path: str | PathLike[str], format: str = "auto", on_error: OnError = "fail"
) -> list[Question]:
    """Just the questions of a benchmark (documents may be absent, e.g. trec_rag24)."""
    corpus = load_corpus(path, format, on_error, require_documents=False)
    if not corpus.questions:
        with_questions = ", ".join(n for n in LOADERS.names() if LOADERS.get(n).has_questions)
        raise CorpusError(
            f"no questions found in {path} (format {corpus.format})",
            hint=f"question sets come in these formats: {with_questions}",
        )
    return corpus.questions
