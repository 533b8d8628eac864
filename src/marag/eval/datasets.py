"""Named evaluation sets: where their questions and their corpus come from.

A dataset is a path inside the data directory plus the loader format for it; the same
loader yields the documents to index and the questions (with gold answers, gold doc
ids and per-question metadata for breakdowns). Generic JSONL question files work too:
pass a path instead of a name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from marag.config import data_dir as find_data_dir
from marag.corpus.loaders import LoadedCorpus, load_corpus
from marag.errors import MaragError
from marag.registry import Registry


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    path: str  # relative to the data directory
    format: str
    description: str
    # metadata fields worth a per-category breakdown in reports
    categories: tuple[str, ...] = field(default_factory=tuple)
    has_corpus: bool = True


DATASETS: Registry[DatasetSpec] = Registry("datasets")

_DM_CATEGORIES = (
    "question_factuality",
    "question_premise",
    "question_phrasing",
    "question_linguistic_variation",
    "question_multi-doc",
    "user_expertise-categorization",
)

for _spec in [
    DatasetSpec("hotpotqa_train100", "hotpotqa_train100", "hotpotqa",
                "HotpotQA distractor, 100 train questions; 994-title corpus", ("type", "level")),
    DatasetSpec("musique_train100", "musique_train100", "musique",
                "MuSiQue answerable, 100 train questions (2-4 hops); 1,890 passages", ("hops",)),
    DatasetSpec("datamorgana", "datamorgana", "datamorgana",
                "DataMorgana/LiveRAG, easy (321) + multi (50) questions; pooled FineWeb documents", _DM_CATEGORIES),
    DatasetSpec("datamorgana_easy", "datamorgana/dmds_500_easy.jsonl", "datamorgana",
                "DataMorgana easy set (321 questions)", _DM_CATEGORIES),
    DatasetSpec("datamorgana_multi", "datamorgana/dmds_multi_n50.jsonl", "datamorgana",
                "DataMorgana single/two-document set (50 questions)", _DM_CATEGORIES),
    DatasetSpec("nq_open_oracle", "nq_open_oracle", "nq",
                "Natural Questions open, 600 questions with their gold passage", ()),
    DatasetSpec("hoprag_examples", "hoprag_examples", "hoprag",
                "10 HotpotQA + 10 MuSiQue + 10 2Wiki questions with their contexts", ("source", "type")),
    DatasetSpec("trec_rag24", "trec_rag24", "trec_rag24",
                "TREC RAG'24 topics with NIST nuggets (no corpus included)", (), has_corpus=False),
]:
    DATASETS.register(_spec.name)(_spec)


@dataclass
class Dataset:
    name: str
    source: Path
    loaded: LoadedCorpus
    categories: tuple[str, ...]
    has_corpus: bool

    @property
    def questions(self):
        return self.loaded.questions

    @property
    def documents(self):
        return self.loaded.documents


def load_dataset(name_or_path: str, data_dir: str | Path | None = None) -> Dataset:
    """A registered dataset name (resolved in the data directory) or a path."""
    p = Path(name_or_path)
    if name_or_path in DATASETS:
        spec = DATASETS.get(name_or_path)
        root = find_data_dir(data_dir)
        path = root / spec.path
        if not path.exists():
            raise MaragError(f"dataset {spec.name!r} not found at {path}", hint="check --data-dir / MARAG_DATA")
        loaded = load_corpus(path, format=spec.format, require_documents=spec.has_corpus)
        return Dataset(spec.name, path, loaded, spec.categories, spec.has_corpus)
    if p.exists():
        loaded = load_corpus(p, require_documents=False)
        if not loaded.questions:
            raise MaragError(f"no questions found in {p}", hint="a questions JSONL needs `id`, `question`, `answers` fields")
        cats = tuple(sorted({k for q in loaded.questions for k in q.metadata if k == "category"}))
        return Dataset(p.stem, p, loaded, cats, bool(loaded.documents))
    raise MaragError(
        f"unknown dataset {name_or_path!r}",
        hint=f"choose one of: {', '.join(DATASETS.names())}, or give a path to a questions JSONL",
    )
