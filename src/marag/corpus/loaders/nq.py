"""Natural Questions (open) with retrieved / gold passages, as in "Lost in the Middle":
JSON Lines records {question, answers, ctxs: [{title, text, hasanswer, isgold}]}.

Documents are the pooled `ctxs`, deduplicated by (title, text), with id
`"<title>#<8 hex digits of sha1(text)>"`. Questions: id `"nq:<0-based line index>"`
(`"nq:<file stem>:<index>"` when a folder holds several files), gold_doc_ids = the
passages marked `isgold`, metadata `hasanswer_doc_ids`.
"""

from __future__ import annotations

from pathlib import Path

from marag.corpus.loaders._io import (
    LoadContext,
    PassagePool,
    files_matching,
    has_keys,
    iter_records,
    require_str,
)
from marag.corpus.loaders.base import LoadedCorpus, OnError, register_loader
from marag.corpus.models import Question


def _is_nq(file: Path) -> bool:
    return has_keys(file, "question", "answers", "ctxs")


def detect(path: Path) -> bool:
    return bool(files_matching(path, _is_nq))


@register_loader(
    "nq",
    detect=detect,
    description="Natural Questions open (lost-in-the-middle JSONL: question, answers, ctxs)",
    priority=10,
)
def load_nq(path: Path, on_error: OnError = "fail") -> LoadedCorpus:
    ctx = LoadContext(path, on_error)
    files = files_matching(path, _is_nq) if path.is_dir() else [path]
    pool = PassagePool(ctx)
    questions: list[Question] = []
    for f in files:
        prefix = "nq:" if len(files) == 1 else f"nq:{f.stem}:"
        for n, unit, rec in iter_records(ctx, f):
            try:
                answers = rec.get("answers")
                if isinstance(answers, str):
                    answers = [answers]
                if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
                    raise ValueError("field 'answers' must be a list of strings")
                ctxs = rec.get("ctxs")
                if not isinstance(ctxs, list) or not all(
                    isinstance(c, dict) and isinstance(c.get("text"), str) for c in ctxs
                ):
                    raise ValueError("field 'ctxs' must be a list of {title, text, ...}")
                question = require_str(rec, "question")
            except ValueError as e:
                ctx.bad(f, n, str(e), unit)
                continue
            gold, has_answer = [], []
            for c in ctxs:
                doc_id = pool.add(str(c.get("title") or ""), c["text"])
                if c.get("isgold") and doc_id not in gold:
                    gold.append(doc_id)
                if c.get("hasanswer") and doc_id not in has_answer:
                    has_answer.append(doc_id)
            questions.append(
                Question(
                    id=f"{prefix}{n - 1}",  # 0-based line: stable when bad lines are skipped
                    question=question,
                    answers=answers,
                    gold_doc_ids=gold,
                    metadata={"hasanswer_doc_ids": has_answer},
                )
            )
    return ctx.result(pool.documents, questions, "nq")
