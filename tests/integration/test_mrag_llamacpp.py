"""mRAG with the real local model (SmolLM2-135M through llama.cpp) over a BM25 index of
samples/corpus: it must finish within its (small) budget, with coordinator and searcher
steps in the trace, whatever the quality of the 135M model's choices. Budgets are
asserted in calls and steps, never in seconds (a busy machine makes any time limit
flaky; time belongs in benchmarks/)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from marag.index.pipeline import index_corpus
from marag.index.store import IndexConfig
from marag.strategies.mrag import MRAG

pytestmark = pytest.mark.integration

QUESTIONS = [
    "Who is often called the first computer programmer?",
    "What is the name of the Linux mascot?",
]
BUDGET = 8
PAGES = 3
QUERY_TRIES = 2  # the query writer, asked once more when its query repeats an earlier one
# per agent call at most: one coordinator call, plus a searcher run of one query, two
# judgements per page and a move between pages; plus one answer after the budget
MAX_LLM_CALLS = BUDGET * (1 + QUERY_TRIES + 2 * PAGES + (PAGES - 1)) + 1
PAPER_MAX_LLM_CALLS = 30
PAPER_MAX_TOKENS = 8000


@pytest.fixture(scope="module")
def llm(smoke_llm):
    return smoke_llm


@pytest.fixture(scope="module")
def retriever(tmp_path_factory, repo: Path):
    out = tmp_path_factory.mktemp("idx") / "sample"
    return index_corpus(repo / "samples" / "corpus", out, IndexConfig(retrievers=["bm25"]), progress=False).retriever(
        "bm25"
    )


@pytest.mark.parametrize("paper", [False, True])
def test_mrag_answers_sample_questions_within_budget(llm, retriever, paper):
    cfg = {"max_agent_calls": BUDGET, "searcher_max_steps": PAGES}
    # the paper's searcher pages until its judge stops it and its planner writes long
    # plans: hard caps on LLM calls and tokens bound the test (SmolLM2's paper-mode run
    # took 7 minutes without them, 30,000 tokens a question)
    paper_cfg = {"paper": True, "max_agent_calls": BUDGET, "max_llm_calls": PAPER_MAX_LLM_CALLS,
                 "max_tokens": PAPER_MAX_TOKENS}  # fmt: skip
    strategy = MRAG(llm, retriever, paper_cfg if paper else cfg)
    async def both():  # at once: the shared server has a slot for each
        return await asyncio.gather(*(strategy.run(q) for q in QUESTIONS))

    answers = asyncio.run(both())
    for a in answers:
        agents = [s.agent for s in a.trace.steps]
        print(
            f"\n{a.question!r} -> {a.answer!r} ({a.seconds:.1f}s, {int(a.usage['agent_calls'])} agent calls, "
            f"{int(a.usage['prompt_tokens'])}+{int(a.usage['completion_tokens'])} tokens)\n  {agents}"
        )
        assert a.usage["agent_calls"] <= BUDGET and a.usage["coordinator_calls"] <= BUDGET
        assert "coordinator" in agents
        assert all(s.status != "error" for s in a.trace.steps)
        if paper:  # the paper's coordinator may never search or answer: only the budget is certain
            assert not [s for s in a.trace.steps if s.agent == "guard"]
            assert a.usage["llm_calls"] <= PAPER_MAX_LLM_CALLS
            # checked before each call: the last call may overshoot by its own size
            assert a.usage["prompt_tokens"] + a.usage["completion_tokens"] <= PAPER_MAX_TOKENS + 4096
            continue
        assert a.answer.strip() and "searcher" in agents
        assert a.usage["llm_calls"] <= MAX_LLM_CALLS
        for searcher in (s for s in a.trace.steps if s.agent == "searcher"):
            assert searcher.searches and len(searcher.outputs["steps"]) <= PAGES
            assert searcher.outputs["steps"][0]["query"]
