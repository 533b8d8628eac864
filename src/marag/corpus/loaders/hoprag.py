"""Multi-hop questions that carry their own contexts (the HopRAG quickstart files, or any
HotpotQA / 2WikiMultiHopQA / MuSiQue records in JSON Lines): a file or a folder of them.

HotpotQA and 2Wiki records give `context` = [[title, [sentences]]] and gold titles in
`supporting_facts`; MuSiQue records give `paragraphs` with `is_supporting`. All
contexts are pooled into one corpus deduplicated by (title, text), with passage ids
`"<title>#<8 hex digits of sha1(text)>"` (titles alone are ambiguous across sources).
Gold ids are resolved inside each question's own context.

Metadata `source` (on questions and documents) is hotpot | 2wiki | musique, taken from
the file name when it says so, else from the record's shape (`paragraphs` -> musique,
`evidences` -> 2wiki, otherwise hotpot).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marag.corpus.loaders._io import (
    LoadContext,
    PassagePool,
    files_matching,
    first_record,
    iter_records,
)
from marag.corpus.loaders._multihop import (
    hotpot_context,
    hotpot_question,
    is_hotpot_record,
    is_musique_record,
    musique_paragraphs,
    musique_question,
)
from marag.corpus.loaders.base import LoadedCorpus, OnError, register_loader
from marag.corpus.models import Question


def _is_hoprag(file: Path) -> bool:
    rec = first_record(file)
    return (is_hotpot_record(rec) and "context" in rec) or is_musique_record(rec)


def detect(path: Path) -> bool:
    return bool(files_matching(path, _is_hoprag))


def _source(file: Path, rec: dict[str, Any]) -> str:
    name = file.name.lower()
    if "musique" in name:
        return "musique"
    if "2wiki" in name or "wiki" in name:
        return "2wiki"
    if "hotpot" in name:
        return "hotpot"
    if "paragraphs" in rec:
        return "musique"
    return "2wiki" if "evidences" in rec else "hotpot"


@register_loader(
    "hoprag",
    detect=detect,
    description="HotpotQA/2Wiki/MuSiQue JSONL records with per-question contexts (HopRAG examples)",
    priority=20,
)
def load_hoprag(path: Path, on_error: OnError = "fail") -> LoadedCorpus:
    ctx = LoadContext(path, on_error)
    pool = PassagePool(ctx)
    questions: list[Question] = []
    for f in files_matching(path, _is_hoprag) if path.is_dir() else [path]:
        for n, unit, rec in iter_records(ctx, f):
            source = _source(f, rec)
            meta = {"source": source}
            try:
                if "paragraphs" in rec:
                    paragraphs = [
                        (p["title"], p["paragraph_text"]) for p in musique_paragraphs(rec)
                    ]
                    q = musique_question(rec, pool.id_for, extra=meta)
                else:
                    # 2Wiki sentences lack HotpotQA's leading spaces.
                    paragraphs = hotpot_context(rec, sep=" " if source == "2wiki" else "")
                    titles: dict[str, str] = {}
                    for title, text in paragraphs:
                        titles.setdefault(title, pool.id_for(title, text))
                    # A supporting title absent from the context stays a bare title;
                    # load_corpus then warns that this gold id is not in the corpus.
                    q = hotpot_question(
                        rec, gold_id=lambda t, ids=titles: ids.get(t, t), extra=meta
                    )
            except ValueError as e:
                ctx.bad(f, n, str(e), unit)
                continue
            for title, text in paragraphs:
                pool.add(title, text, metadata=meta)
            questions.append(q)
    return ctx.result(pool.documents, questions, "hoprag")
