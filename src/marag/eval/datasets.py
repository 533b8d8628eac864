"""Named evaluation sets: where their questions and their corpus come from.

A dataset is a path inside the data directory plus the loader format for it; the same
loader yields the documents to index and the questions (with gold answers, gold doc
ids and per-question metadata for breakdowns). Generic JSONL question files work too:
pass a path instead of a name.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from marag.config import data_dir as find_data_dir
from marag.corpus.loaders import LoadedCorpus, load_corpus
from marag.corpus.models import Document, Question
from marag.errors import MaragError
from marag.registry import Registry


# What "retrieval recall" means on each kind of corpus, said in `marag datasets` and in
# every report: on an oracle pool every document is some question's gold evidence, so
# recall there is far easier than on a real collection.
POOLS: dict[str, str] = {
    "oracle": "oracle pool: every document is the gold evidence of some question",
    "distractor": "distractor pool: the questions' gold passages plus the benchmark's distractors",
    "mixed": "mixed pool: several benchmarks' pools in one index, gold hidden among all of them",
    "none": "no corpus: questions only",
}

ANSWER_STYLES = ("short", "long")


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    path: str  # relative to the data directory ("" for a mix of other datasets)
    format: str
    description: str
    # metadata fields worth a per-category breakdown in reports
    categories: tuple[str, ...] = field(default_factory=tuple)
    has_corpus: bool = True
    pool: str = "distractor"  # a POOLS key
    # what the references look like: short spans (score with EM/F1) or paragraphs;
    # strategies answer in this style unless told otherwise
    answer_style: str = "short"
    parts: tuple[str, ...] = ()  # for a mix: the datasets whose corpora and questions it unites

    def files(self) -> list[str]:
        """Its files, relative to the data directory (a mix: its parts' files)."""
        return [DATASETS.get(p).path for p in self.parts] if self.parts else [self.path]


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
                "DataMorgana/LiveRAG, easy (321) + multi (50) questions; pooled FineWeb documents", _DM_CATEGORIES,
                pool="oracle", answer_style="long"),
    DatasetSpec("datamorgana_easy", "datamorgana/dmds_500_easy.jsonl", "datamorgana",
                "DataMorgana easy set (321 questions)", _DM_CATEGORIES, pool="oracle", answer_style="long"),
    DatasetSpec("datamorgana_multi", "datamorgana/dmds_multi_n50.jsonl", "datamorgana",
                "DataMorgana single/two-document set (50 questions)", _DM_CATEGORIES, pool="oracle",
                answer_style="long"),
    DatasetSpec("nq_open_oracle", "nq_open_oracle", "nq",
                "Natural Questions open, 600 questions with their gold passage", (), pool="oracle"),
    DatasetSpec("hoprag_examples", "hoprag_examples", "hoprag",
                "10 HotpotQA + 10 MuSiQue + 10 2Wiki questions with their contexts", ("source", "type")),
    DatasetSpec("twowiki_examples", "hoprag_examples/wiki_example.jsonl", "hoprag",
                "the 10 2WikiMultihopQA questions of hoprag_examples, over their own contexts", ("type",)),
    DatasetSpec("trec_rag24", "trec_rag24", "trec_rag24",
                "TREC RAG'24 topics with NIST nuggets (no corpus included)", (), has_corpus=False, pool="none",
                answer_style="long"),
    # fresh report sets (run each configuration on them once, at the end of a piece of work)
    DatasetSpec("hotpotqa_dev488", "hotpotqa_dev488", "paired",
                "HotpotQA dev (distractor), 488 questions; 4,739 candidate paragraphs (report set)"),
    DatasetSpec("2wiki_dev500", "2wiki_dev500", "paired",
                "2WikiMultiHopQA dev, 500 questions; 3,301 candidate paragraphs (report set)"),
    DatasetSpec("musique_dev100", "musique_dev100", "paired",
                "MuSiQue-Ans dev, 100 questions of 2-4 hops with answer aliases; 1,603 paragraphs (report set)"),
    DatasetSpec("wiki_mix", "", "mix",
                "HotpotQA + MuSiQue + NQ questions, interleaved, over the union of their pools (~3,500 passages)",
                ("source",), pool="mixed", parts=("hotpotqa_train100", "musique_train100", "nq_open_oracle")),
]:
    DATASETS.register(_spec.name)(_spec)


@dataclass
class Dataset:
    name: str
    source: Path
    loaded: LoadedCorpus
    categories: tuple[str, ...]
    has_corpus: bool
    pool: str = "distractor"
    answer_style: str = "short"

    @property
    def questions(self):
        return self.loaded.questions

    @property
    def documents(self):
        return self.loaded.documents

    @property
    def pool_note(self) -> str:
        return POOLS.get(self.pool, self.pool)


def load_dataset(name_or_path: str, data_dir: str | Path | None = None) -> Dataset:
    """A registered dataset name (resolved in the data directory) or a path."""
    p = Path(name_or_path)
    if name_or_path in DATASETS:
        spec = DATASETS.get(name_or_path)
        if spec.parts:
            return _load_mix(spec, data_dir)
        root = find_data_dir(data_dir)
        path = root / spec.path
        if not path.exists():
            raise MaragError(f"dataset {spec.name!r} not found at {path}", hint="check --data-dir / MARAG_DATA")
        loaded = load_corpus(path, format=spec.format, require_documents=spec.has_corpus)
        return Dataset(spec.name, path, loaded, spec.categories, spec.has_corpus, spec.pool, spec.answer_style)
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


def _load_mix(spec: DatasetSpec, data_dir: str | Path | None) -> Dataset:
    """One corpus from several datasets' pools, and their questions interleaved (so
    `--limit N` takes from every part). Document ids get the part's name as a prefix
    (two benchmarks may use the same id for different passages); a passage that two
    pools share verbatim is kept once and both parts' gold ids point at it."""
    parts = [load_dataset(name, data_dir) for name in spec.parts]
    documents: list[Document] = []
    by_content: dict[tuple[str, str], str] = {}
    questions_per_part: list[list[Question]] = []
    for part in parts:
        new_id: dict[str, str] = {}
        for d in part.documents:
            key = (d.title, " ".join(d.text.split()))
            if key not in by_content:
                by_content[key] = f"{part.name}/{d.id}"
                documents.append(d.model_copy(update={"id": by_content[key], "metadata": {**d.metadata, "source": part.name}}))
            new_id[d.id] = by_content[key]
        questions_per_part.append(
            [
                q.model_copy(
                    update={
                        "gold_doc_ids": [new_id.get(g, f"{part.name}/{g}") for g in q.gold_doc_ids],
                        "metadata": {**q.metadata, "source": part.name},
                    }
                )
                for q in part.questions
            ]
        )
    questions = [q for group in itertools.zip_longest(*questions_per_part) for q in group if q is not None]
    loaded = LoadedCorpus(documents=documents, questions=questions, source=spec.name, format="mix")
    return Dataset(spec.name, parts[0].source.parent, loaded, spec.categories, True, spec.pool, spec.answer_style)
