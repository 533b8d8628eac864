"""mRAG with the real local model (SmolLM2-135M through llama.cpp) over a BM25 index of
samples/corpus: it must finish within its (small) budget, with coordinator and searcher
steps in the trace, whatever the quality of the 135M model's choices."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from marag.errors import LLMError
from marag.index.pipeline import index_corpus
from marag.index.store import IndexConfig
from marag.llm import make_llm
from marag.llm.llamacpp import default_model_path
from marag.strategies.mrag import MRAG

pytestmark = pytest.mark.integration

QUESTIONS = [
    "Who is often called the first computer programmer?",
    "What is the name of the Linux mascot?",
]
BUDGET = 8


@pytest.fixture(scope="module")
def llm():
    try:
        default_model_path()
    except LLMError as exc:
        pytest.skip(exc.message)
    # one thread: on a 2-core machine shared with another busy process, two llama.cpp
    # threads spin-wait on each other (measured: 33 s instead of 0.5 s for one call)
    model = make_llm("llamacpp", threads=1)
    yield model
    model.close()


@pytest.fixture(scope="module")
def retriever(tmp_path_factory, repo: Path):
    out = tmp_path_factory.mktemp("idx") / "sample"
    return index_corpus(repo / "samples" / "corpus", out, IndexConfig(retrievers=["bm25"]), progress=False).retriever(
        "bm25"
    )


def test_mrag_answers_sample_questions_within_budget(llm, retriever):
    strategy = MRAG(llm, retriever, {"max_agent_calls": BUDGET, "searcher_max_steps": 3})
    t0 = time.perf_counter()
    answers = [asyncio.run(strategy.run(q)) for q in QUESTIONS]
    seconds = time.perf_counter() - t0
    for a in answers:
        agents = [s.agent for s in a.trace.steps]
        print(
            f"\n{a.question!r} -> {a.answer!r} ({a.seconds:.1f}s, {int(a.usage['agent_calls'])} agent calls, "
            f"{int(a.usage['prompt_tokens'])}+{int(a.usage['completion_tokens'])} tokens)\n  {agents}"
        )
        assert a.answer.strip()
        assert a.usage["agent_calls"] <= BUDGET
        assert "coordinator" in agents and "searcher" in agents
        assert all(s.status != "error" for s in a.trace.steps)
        searcher = next(s for s in a.trace.steps if s.agent == "searcher")
        assert searcher.searches and searcher.outputs["steps"][0]["query"]
    assert seconds < 120
