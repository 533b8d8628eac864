"""DataMorgana-style question categories: categorizations, each a set of categories with
probabilities and a description the generator reads, plus pairs that may not be drawn
together. Sampling draws one category per categorization (independently, by
probability) and draws again when the combination holds an incompatible pair.

The default spec uses the field names and categories of the DataMorgana/LiveRAG
records in the shared data (`question_factuality`, `question_premise`,
`question_phrasing`, `question_linguistic_variation`, `question_multi-doc`,
`user_expertise-categorization`), with their observed shares, so generated sets and the
real ones can be compared category by category. A spec file (JSON) replaces it:

    {"categorizations": {"user_expertise-categorization": {"expert": {"p": 0.5, "description": "..."}, ...}, ...},
     "incompatible": [["question_phrasing=short-search-query", "question_premise=with-premise"]]}
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from pydantic import BaseModel, Field, model_validator

from marag.errors import MaragError


class Category(BaseModel):
    p: float = Field(gt=0)
    description: str = ""


class CategorySpec(BaseModel):
    categorizations: dict[str, dict[str, Category]]
    incompatible: list[tuple[str, str]] = Field(default_factory=list)  # "field=category" pairs
    documents: dict[str, int] = Field(default_factory=dict)  # category -> documents it needs (default 1)

    @model_validator(mode="after")
    def _known_pairs(self) -> "CategorySpec":
        for pair in self.incompatible:
            for item in pair:
                field, _, cat = item.partition("=")
                if cat not in self.categorizations.get(field, {}):
                    raise ValueError(f"incompatible pair names an unknown category: {item!r}")
        return self

    def sample(self, rng: random.Random, tries: int = 100) -> dict[str, str]:
        for _ in range(tries):
            drawn = {}
            for field, cats in self.categorizations.items():
                names = list(cats)
                drawn[field] = rng.choices(names, weights=[cats[n].p for n in names])[0]
            if self.compatible(drawn):
                return drawn
        raise MaragError("no compatible combination of categories found", hint="loosen the spec's incompatible pairs")

    def compatible(self, drawn: dict[str, str]) -> bool:
        chosen = {f"{k}={v}" for k, v in drawn.items()}
        return not any(a in chosen and b in chosen for a, b in self.incompatible)

    def documents_needed(self, drawn: dict[str, str]) -> int:
        return max([1] + [self.documents.get(f"{k}={v}", 1) for k, v in drawn.items()])

    def describe(self, drawn: dict[str, str]) -> list[str]:
        return [f"{field}: {cat} - {self.categorizations[field][cat].description}" for field, cat in drawn.items()]


def _cats(**items: tuple[float, str]) -> dict[str, Category]:
    return {name.replace("_", "-"): Category(p=p, description=d) for name, (p, d) in items.items()}


DEFAULT_SPEC = CategorySpec(
    categorizations={
        "question_factuality": _cats(
            factoid=(0.52, "asks for a specific fact: a name, number, date or short phrase"),
            open_ended=(0.48, "asks for an explanation or description that needs a few sentences"),
        ),
        "question_premise": _cats(
            with_premise=(0.51, "starts with a short statement about the asker's situation, then asks"),
            direct=(0.49, "asks directly, with no context about the asker"),
        ),
        "question_phrasing": _cats(
            verbose_and_natural=(0.30, "a long, natural sentence"),
            short_search_query=(0.24, "a few keywords, like a search engine query, no question mark"),
            concise_and_natural=(0.24, "a short, natural question"),
            long_search_query=(0.22, "many keywords, like a detailed search query"),
        ),
        "question_linguistic_variation": _cats(
            similar_to_document=(0.52, "uses the document's own words"),
            distant_from_document=(0.48, "uses other words than the document (synonyms, paraphrase)"),
        ),
        "question_multi-doc": _cats(
            single_doc=(0.47, "answerable from one document"),
            multi_aspect=(0.28, "asks about two aspects, each answered by a different document"),
            comparison=(0.17, "compares something described in one document with something in the other"),
            three_doc=(0.08, "needs facts from three documents"),
        ),
        "user_expertise-categorization": _cats(
            novice=(0.50, "the asker is new to the topic: plain words"),
            expert=(0.50, "the asker knows the field: technical terms"),
        ),
    },
    incompatible=[
        ("question_phrasing=short-search-query", "question_premise=with-premise"),
        ("question_phrasing=long-search-query", "question_premise=with-premise"),
    ],
    documents={"question_multi-doc=multi-aspect": 2, "question_multi-doc=comparison": 2, "question_multi-doc=three-doc": 3},
)


def load_spec(path: str | Path | None) -> CategorySpec:
    if path is None:
        return DEFAULT_SPEC
    try:
        return CategorySpec.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise MaragError(f"cannot read the category spec {path}: {exc}", hint="see marag.synth.categories for the format") from None
