"""The planted two-hop case the agent-strategy tests share: a novel's author (first
hop), then where she grew up (second hop), among distractors that share words."""

from __future__ import annotations

import json
import re
from pathlib import Path

from marag.index.pipeline import index_corpus
from marag.index.store import IndexConfig

QUESTION = "Where was the author of Salt Winter raised?"
DOCS = [
    ("salt-winter", "Salt Winter", "Salt Winter is a 1931 novel about a fishing crew, written by Maren Holt."),
    ("holt", "Maren Holt", "Maren Holt (1871-1950) was a Norwegian printer and writer. She grew up in Brekke, a village on the west coast."),
    ("olympics", "Winter Olympics", "The Winter Olympics are held every four years; one author called them a festival of salt and snow."),
    ("herring", "Herring", "Herring are small fish caught in the North Sea, often salted for the winter."),
]
MORE_DOCS = [
    ("printing", "Printing press", "The printing press spread across Europe in the fifteenth century."),
    ("brekke-church", "Stave churches", "Many wooden stave churches stand on the west coast of Norway."),
]


def bm25_retriever(directory: Path, docs=DOCS):
    corpus = directory / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in docs))
    return index_corpus(corpus, directory / "idx", IndexConfig(retrievers=["bm25"]), progress=False).retriever("bm25")


def numbered(user: str) -> dict[str, int]:
    """Document titles shown in a prompt as "[n] Title" lines -> their numbers."""
    return {t: int(n) for n, t in re.findall(r"^\[(\d+)\] (.*)$", user, re.M)}


def mrag_replies(query: str = "Salt Winter author", answer: str = "Brekke") -> dict[str, dict]:
    """A scripted mRAG, one reply per output schema: the coordinator asks to finish, the
    searcher writes `query`, judges every document relevant and ends, the answerer says
    `answer` (the tests of training and of per-role adapters share it)."""
    return {
        "CoordinatorDecision": {"agent": "finisher", "input": "", "reason": "done?"},
        "Query": {"query": query},
        "Judgement": {"explanation": "about it", "fact": "", "relevant": True},
        "Move": {"action": "end", "new_query": "", "reason": ""},
        "AnswerOutput": {"answer": answer},
    }
