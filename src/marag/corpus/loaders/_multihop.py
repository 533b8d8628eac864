"""Record shapes shared by the multi-hop benchmarks.

- HotpotQA-style (HotpotQA, 2WikiMultiHopQA): `context` = [[title, [sentences]], ...],
  `supporting_facts` = [[title, sentence index], ...], answer, `_id`.
- MuSiQue-style: `paragraphs` = [{title, paragraph_text, is_supporting}, ...],
  `question_decomposition`, answer + answer_aliases, `id`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from marag.corpus.loaders._io import json_files, require_str
from marag.corpus.models import Question

_HOPS = re.compile(r"^(\d+)hop")


def is_hotpot_record(rec: dict[str, Any] | None) -> bool:
    return rec is not None and "supporting_facts" in rec and "question" in rec


def is_musique_record(rec: dict[str, Any] | None) -> bool:
    return rec is not None and "paragraphs" in rec and "question" in rec


def hotpot_context(rec: dict[str, Any], sep: str = "") -> list[tuple[str, str]]:
    """(title, text) of each context paragraph; ValueError when malformed.

    HotpotQA sentences carry their own leading space (" The game was ..."), so `sep=""`
    restores the original paragraph; 2WikiMultiHopQA sentences do not and need " ".
    """
    out = []
    for item in rec.get("context") or []:
        if (
            not isinstance(item, (list, tuple))
            or len(item) != 2
            or not isinstance(item[0], str)
            or not isinstance(item[1], list)
            or not all(isinstance(s, str) for s in item[1])
        ):
            raise ValueError("field 'context' must be a list of [title, [sentences]]")
        out.append((item[0], sep.join(item[1])))
    return out


def supporting_titles(rec: dict[str, Any]) -> list[str]:
    """Unique titles of `supporting_facts`, in order of first mention."""
    titles: list[str] = []
    for fact in rec.get("supporting_facts") or []:
        if not isinstance(fact, (list, tuple)) or not fact or not isinstance(fact[0], str):
            raise ValueError("field 'supporting_facts' must be a list of [title, sentence index]")
        if fact[0] not in titles:
            titles.append(fact[0])
    return titles


def hotpot_question(
    rec: dict[str, Any], gold_id: Callable[[str], str], extra: dict[str, Any] | None = None
) -> Question:
    """`gold_id` maps a supporting title to the corpus id of its paragraph."""
    qid = rec.get("_id", rec.get("id"))
    if not isinstance(qid, (str, int)):
        raise ValueError("missing required field '_id'")
    metadata: dict[str, Any] = {k: rec[k] for k in ("type", "level", "supporting_facts", "evidences") if k in rec}
    metadata.update(extra or {})
    return Question(
        id=str(qid),
        question=require_str(rec, "question"),
        answers=[require_str(rec, "answer")],
        gold_doc_ids=[gold_id(t) for t in supporting_titles(rec)],
        metadata=metadata,
    )


def musique_paragraphs(rec: dict[str, Any]) -> list[dict[str, Any]]:
    paras = rec.get("paragraphs")
    if not isinstance(paras, list) or not all(
        isinstance(p, dict) and isinstance(p.get("title"), str) and isinstance(p.get("paragraph_text"), str)
        for p in paras
    ):
        raise ValueError("field 'paragraphs' must be a list of {title, paragraph_text, is_supporting}")
    return paras


def musique_question(
    rec: dict[str, Any], passage_id: Callable[[str, str], str], extra: dict[str, Any] | None = None
) -> Question:
    """`passage_id(title, text)` maps a supporting paragraph to its corpus id."""
    qid = rec.get("id")
    if not isinstance(qid, str):
        raise ValueError("missing required field 'id'")
    answers = [require_str(rec, "answer")]
    for alias in rec.get("answer_aliases") or []:
        if isinstance(alias, str) and alias not in answers:
            answers.append(alias)
    decomposition = rec.get("question_decomposition") or []
    m = _HOPS.match(qid)
    hops = len(decomposition) or (int(m.group(1)) if m else None)
    metadata: dict[str, Any] = {"hops": hops, "question_decomposition": decomposition}
    if "answerable" in rec:
        metadata["answerable"] = rec["answerable"]
    metadata.update(extra or {})
    gold = []
    for p in musique_paragraphs(rec):
        if p.get("is_supporting"):
            pid = passage_id(p["title"], p["paragraph_text"])
            if pid not in gold:
                gold.append(pid)
    return Question(
        id=qid,
        question=require_str(rec, "question"),
        answers=answers,
        gold_doc_ids=gold,
        metadata=metadata,
    )


def corpus_and_question_files(
    path: Path, is_corpus: Callable[[Path], bool], is_questions: Callable[[Path], bool]
) -> tuple[list[Path], list[Path]]:
    """A benchmark folder (or one of its files) split into corpus and question files."""
    if path.is_file():
        return ([path], []) if is_corpus(path) else ([], [path])
    files = json_files(path)
    corpus = [f for f in files if is_corpus(f)]
    return corpus, [f for f in files if f not in corpus and is_questions(f)]
