"""`marag synth`: category sampling (probabilities and incompatible pairs), the real
DataMorgana field names, SynAgent multi-hop questions from linked passages with a
verified solution, resume, and `marag eval` on the generated file with the index."""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
from collections import Counter

import pytest

from marag import cli
from marag.index.pipeline import index_corpus
from marag.index.store import IndexConfig
from marag.llm import ScriptedLLM
from marag.synth import DEFAULT_SPEC, DocumentPool, generate


def writer(messages, output):
    user = messages[-1]["content"]
    name = output.__name__
    if name == "QA":
        title = re.search(r"^\[1\] (.*)$", user, re.M).group(1)
        return {"question": f"What does the document about {title} say?", "answer": f"It is about {title}."}
    if name == "Solution":
        return {"steps": [{"thought": "look it up", "query": "the topic", "evidence": "the document"}], "final_answer": "it"}
    return {"reason": "fine", "score": 5 if "Kahuku" not in user else 2}


def test_category_sampling_follows_probabilities_and_compatibility():
    rng = random.Random(0)
    draws = [DEFAULT_SPEC.sample(rng) for _ in range(4000)]
    for field, cats in DEFAULT_SPEC.categorizations.items():
        counts = Counter(d[field] for d in draws)
        total = sum(c.p for c in cats.values())
        for name, c in cats.items():
            if field == "question_phrasing" or field == "question_premise":
                continue  # incompatible pairs shift these two, checked below
            assert abs(counts[name] / len(draws) - c.p / total) < 0.03, (field, name)
    assert not any(d["question_phrasing"].endswith("search-query") and d["question_premise"] == "with-premise" for d in draws)
    assert DEFAULT_SPEC.documents_needed({"question_multi-doc": "comparison"}) == 2


def test_fields_and_categories_are_datamorgana_s(data_dir):
    rows = [json.loads(line) for line in (data_dir / "datamorgana" / "dmds_multi_n50.jsonl").open()]
    real = {k for k in rows[0] if k.startswith(("question_", "user_")) and k not in ("question_length",)}
    assert set(DEFAULT_SPEC.categorizations) == real
    for field in real:
        assert {r[field] for r in rows} <= set(DEFAULT_SPEC.categorizations[field]), field


@pytest.fixture(scope="module")
def hotpot_index(tmp_path_factory, data_dir):
    from marag.eval.datasets import load_dataset

    ds = load_dataset("hotpotqa_train100", data_dir)
    from marag.index.pipeline import index_documents

    return index_documents(ds.documents, tmp_path_factory.mktemp("h") / "idx", IndexConfig(retrievers=["bm25"]), progress=False)


def test_multi_hop_questions_come_from_linked_passages(hotpot_index):
    pool = DocumentPool(hotpot_index, seed=1)
    for _ in range(5):
        a, b = pool.linked_pair()
        assert b.title.lower() in a.text.lower() and a.doc_id != b.doc_id


def test_synagent_keeps_verified_questions_with_solutions(hotpot_index, tmp_path):
    out = tmp_path / "q.jsonl"
    asyncio.run(generate(ScriptedLLM(fn=writer), hotpot_index, 6, out, style="synagent", seed=3, multi_hop_share=1.0, progress=False))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and all(r["verification"]["score"] >= 4 and r["solution"]["steps"] for r in rows)
    assert all(r["hops"] == 2 and len(r["gold_doc_ids"]) == 2 for r in rows)


def test_datamorgana_style_records_and_resume(hotpot_index, tmp_path):
    out = tmp_path / "dm.jsonl"
    asyncio.run(generate(ScriptedLLM(fn=writer), hotpot_index, 3, out, seed=5, progress=False))
    first = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in first] == ["synth-00001", "synth-00002", "synth-00003"]
    for r in first:
        assert set(DEFAULT_SPEC.categorizations) <= set(r) and r["answers"] == [r["reference_answer"]]
        assert len(r["gold_doc_ids"]) == DEFAULT_SPEC.documents_needed({k: r[k] for k in DEFAULT_SPEC.categorizations})
    asyncio.run(generate(ScriptedLLM(fn=writer), hotpot_index, 5, out, seed=5, progress=False))  # continues
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[:3] == first and len(rows) == 5


def test_synth_then_eval_on_the_same_index(tmp_path, repo, monkeypatch):
    idx = tmp_path / "idx"
    index_corpus(repo / "samples" / "corpus", idx, IndexConfig(retrievers=["bm25"]), progress=False)

    def run(*args):
        monkeypatch.setattr(sys, "argv", ["marag", *args])
        try:
            cli.main()
        except SystemExit as e:
            assert not e.code, e.code

    from marag.llm.factory import LLM_BACKENDS

    monkeypatch.setitem(LLM_BACKENDS._items, "scripted", lambda cfg: ScriptedLLM(fn=writer))
    q = tmp_path / "q.jsonl"
    run("synth", "--index", str(idx), "--n", "4", "--out", str(q), "--llm", "scripted", "-q")
    runs = tmp_path / "runs"
    monkeypatch.setitem(LLM_BACKENDS._items, "scripted", lambda cfg: ScriptedLLM(fn=lambda m, o: {"answer": "It is about it."}))
    run("eval", str(q), "--index", str(idx), "--strategies", "vanilla_rag", "--llm", "scripted", "--runs", str(runs), "--run-id", "s", "-q")
    results = [json.loads(line) for line in (runs / "s" / "results.jsonl").read_text().splitlines()]
    assert len(results) == 4 and all(r["error"] is None for r in results)
    assert all("retrieval_recall" in r["metrics"] for r in results)  # scored against the generating documents
