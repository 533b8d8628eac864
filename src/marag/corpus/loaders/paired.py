"""marag's own evaluation-set layout: a folder with `corpus.jsonl` (one document a line,
the `jsonl` format: id, title, text) and `questions.jsonl` (one question a line, the
`questions` format: id, question, answers, gold_doc_ids). The fresh report sets in the
shared data directory (`hotpotqa_dev488`, `2wiki_dev500`, `musique_dev100`) come this
way, and so can a user's own set: one folder, both halves.
"""

from __future__ import annotations

from pathlib import Path

from marag.corpus.loaders.base import LoadedCorpus, OnError, register_loader
from marag.corpus.loaders.jsonl import load_jsonl
from marag.corpus.loaders.questions import load_questions_jsonl

CORPUS, QUESTIONS = "corpus.jsonl", "questions.jsonl"


def detect(path: Path) -> bool:
    return path.is_dir() and (path / CORPUS).is_file() and (path / QUESTIONS).is_file()


@register_loader(
    "paired",
    detect=detect,
    description="a folder of corpus.jsonl ({id, title, text}) and questions.jsonl ({id, question, answers, gold_doc_ids})",
    priority=5,
)
def load_paired(path: Path, on_error: OnError = "fail") -> LoadedCorpus:
    docs = load_jsonl(path / CORPUS, on_error)
    questions = load_questions_jsonl(path / QUESTIONS, on_error)
    return LoadedCorpus(
        documents=docs.documents,
        questions=questions.questions,
        source=str(path),
        format="paired",
        skipped=docs.skipped + questions.skipped,
        skipped_at=docs.skipped_at + questions.skipped_at,
        duplicates=docs.duplicates + questions.duplicates,
    )
