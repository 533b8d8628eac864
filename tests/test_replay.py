"""Behaviour pinned across refactors: every registered strategy (paper modes and
ablations too) answers two questions over the sample corpus with a scripted model whose
replies are varied but fixed (drawn from the output schema with a seed made of the
strategy, the question and the *set* of words in the prompt: calls running at once may
come in any order, and a prompt may reorder its parts, without changing a reply), and
what happens is compared with a recording: the answer, every trace step (agent,
status), every search (query, hits) and the schema of every model call.

Prompts may change their layout without changing this record; control flow and what
the model is shown may not.
After a deliberate change of behaviour, record again:
    MARAG_RECORD_REPLAY=1 pytest tests/test_replay.py
and read the diff of tests/replay/strategies.json before committing it."""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path

import pytest

from marag.index.cross_encoder import CROSS_ENCODER_ENV
from marag.index.pipeline import index_corpus
from marag.index.store import IndexConfig
from marag.llm import ScriptedLLM
from marag.llm.schema import output_schema
from marag.strategies import STRATEGIES, make_strategy

RECORDING = Path(__file__).parent / "replay" / "strategies.json"
QUESTIONS = ["Who created Python?", "What is the name of the Linux mascot?"]
WORDS = ["Guido van Rossum", "Tux", "Python", "Linux", "penguin", "1991", "yes", "Ada Lovelace", "Everest", "no"]


def varied(schema: dict, rng: random.Random, defs: dict):
    """A reply that fits `schema`, chosen by `rng`: enough variety to take branches a
    placeholder never takes (empty lists, false flags, other enum values)."""
    if "$ref" in schema:
        return varied(defs[schema["$ref"].split("/")[-1]], rng, defs)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return varied(rng.choice(schema[key]), rng, defs)
    if "allOf" in schema:
        return varied(schema["allOf"][0], rng, defs)
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return {k: varied(v, rng, defs) for k, v in schema.get("properties", {}).items()}
    if kind == "array":
        low, high = schema.get("minItems", 0), min(schema.get("maxItems", 3), 3)
        return [varied(schema.get("items", {"type": "string"}), rng, defs) for _ in range(rng.randint(low, max(low, high)))]
    if kind == "string":
        return rng.choice(WORDS)[: schema.get("maxLength", 100)].ljust(schema.get("minLength", 0), "x")
    if kind == "integer":
        return rng.randint(schema.get("minimum", 0), min(schema.get("maximum", 5), schema.get("minimum", 0) + 5))
    if kind == "number":
        return round(rng.uniform(schema.get("minimum", 0.0), schema.get("maximum", 1.0)), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    return None


def responder(strategy: str, question: str):
    def reply(messages, output):
        words = sorted({w for m in messages for w in m["content"].split()})
        rng = random.Random(f"{strategy}|{question}|{' '.join(words)}")
        if output is None:
            return rng.choice(WORDS)
        schema = output_schema(output)
        return varied(schema, rng, schema.get("$defs", {}))

    return reply


def record(ans) -> dict:
    return {
        "answer": ans.answer,
        "sources": [s.doc_id for s in ans.sources],
        "steps": [
            {
                "agent": s.agent,
                "status": s.status,
                "searches": [[x.query, [h["doc_id"] for h in x.hits]] for x in s.searches],
                "calls": [c.schema_name for c in s.llm_calls],
            }
            for s in ans.trace.steps
        ],
    }


@pytest.fixture(scope="module")
def sample_index(tmp_path_factory, repo: Path):
    out = tmp_path_factory.mktemp("idx") / "sample"
    cfg = IndexConfig(collection_field="folder")  # BM25 and dense: GINGER needs both
    return index_corpus(repo / "samples" / "corpus", out, cfg, progress=False)


def run_all(index) -> dict:
    out = {}
    for name in sorted(STRATEGIES.names()):
        runs = []
        for q in QUESTIONS:
            llm = ScriptedLLM(fn=responder(name, q))
            strategy = make_strategy(name, llm, index.retriever())
            runs.append(record(asyncio.run(strategy.run(q))))
        out[name] = runs
    return out


def test_every_strategy_does_what_it_did_when_recorded(sample_index, monkeypatch):
    monkeypatch.delenv(CROSS_ENCODER_ENV, raising=False)  # GINGER's reranker: the shipped one
    now = run_all(sample_index)
    if os.environ.get("MARAG_RECORD_REPLAY"):
        RECORDING.parent.mkdir(exist_ok=True)
        RECORDING.write_text(json.dumps(now, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    then = json.loads(RECORDING.read_text(encoding="utf-8"))
    assert sorted(now) == sorted(then), "strategies were added or removed: record again (see the module docstring)"
    for name in then:
        for q, a, b in zip(QUESTIONS, then[name], now[name], strict=True):
            assert b == a, f"{name} on {q!r} behaves differently from the recording"
    # the recording exercises what it claims to: most strategies search and answer
    assert sum(any(s["searches"] for s in runs[0]["steps"]) for runs in now.values()) >= 20
    assert len({runs[0]["answer"] for runs in now.values()}) >= 3
