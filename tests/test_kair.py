"""KAIR: the known/required cycle, query choice (redundant queries rejected), fact
checks (conflicts and unsupported facts discarded), termination on an empty Required,
competition and collaboration; scripted models over a real BM25 index."""

from __future__ import annotations

import asyncio

import pytest

from marag.llm import ScriptedLLM
from marag.strategies import STRATEGIES, make_strategy
from marag.strategies.kair import supported
from twohop import DOCS, QUESTION, bm25_retriever, numbered

GAP2 = "Where did Maren Holt grow up?"



@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    return bm25_retriever(tmp_path_factory.mktemp("twohop"), DOCS)


def gaps(user: str) -> list[str]:
    block = user.split("What is required (open gaps):\n", 1)[1].split("\n\n", 1)[0]
    return [line.split(". ", 1)[1] for line in block.splitlines() if ". " in line]


def updater(user: str) -> dict:
    """Reads what the passages say: the novel names its author (a new gap follows), the
    author's page answers both gaps."""
    p, open_gaps = numbered(user), gaps(user)
    if "Maren Holt" in p:
        closed = [n for n, g in enumerate(open_gaps, 1)]
        return {"facts": [{"text": "Maren Holt grew up in Brekke", "passage": p["Maren Holt"], "status": "new"}], "closed": closed, "new_gaps": []}
    if "Salt Winter" in p:
        fact = {"text": "Salt Winter was written by Maren Holt", "passage": p["Salt Winter"], "status": "new"}
        return {"facts": [fact], "closed": [], "new_gaps": [GAP2]}
    return {"facts": [], "closed": [], "new_gaps": []}


def keep_relevant(user: str) -> dict:
    p = numbered(user.split("Passages:\n", 1)[1])
    return {"keep": [n for t, n in p.items() if t in ("Salt Winter", "Maren Holt")]}


def planner(user: str) -> dict:
    if "Maren Holt" in user.split("What is known:", 1)[1].split("What is required", 1)[0]:
        return {"candidates": [{"query": "Maren Holt grew up", "gap": 2}]}
    return {"candidates": [{"query": "Salt Winter author", "gap": 1}]}


def llm(plan=planner, update=updater, keep=keep_relevant) -> ScriptedLLM:
    def fn(messages, output):
        user = messages[-1]["content"]
        replies = {
            "Candidates": plan,
            "Update": update,
            "Kept": keep,
            "Verdict": lambda u: {"sufficient": False, "reason": ""},
            "AnswerOutput": lambda u: {"answer": "Brekke" if "Brekke" in u else "unknown"},
        }
        return replies[output.__name__](user)

    return ScriptedLLM(fn=fn)


def run(name, model, retriever, config=None):
    return asyncio.run(make_strategy(name, model, retriever, config).run(QUESTION))


def steps(ans, agent):
    return [s for s in ans.trace.steps if s.agent == agent]


def test_registered_variants():
    assert {"kair", "kair_2", "kair_3", "kair_collab"} <= set(STRATEGIES.names())
    assert supported("Maren Holt grew up in Brekke", DOCS[1][2]) and not supported("Holt was born on Mars", DOCS[1][2])


def test_two_hops_in_two_cycles_then_required_is_empty(retriever):
    model = llm()
    ans = run("kair", model, retriever, {"max_steps": 6})
    assert [s.inputs["query"] for s in steps(ans, "search")] == ["Salt Winter author", "Maren Holt grew up"]
    states = [s.outputs for s in steps(ans, "state")]
    assert states[0]["known"] == ["Salt Winter was written by Maren Holt"] and states[0]["required"] == [QUESTION, GAP2]
    assert states[1]["required"] == [] and len(states) == 2  # stopped on an empty Required, not at max_steps
    assert ans.usage["cycles"] == 2 and ans.usage["open_gaps"] == 0
    assert [s.doc_id for s in ans.sources] == ["salt-winter", "holt"] and ans.answer == "Brekke"
    names = [s.agent for s in ans.trace.steps]
    for role in ("query_planner", "search", "knowledge_update", "context_filter", "generator"):
        assert role in names
    # the generator read the refined context verbatim
    gen = next(c for c in model.calls if c.output_model.__name__ == "AnswerOutput").messages[-1]["content"]
    assert DOCS[1][2] in gen and "Herring" not in gen


def test_a_redundant_query_is_rejected(retriever):
    def repetitive(user):
        known = "Maren Holt" in user.split("What is known:", 1)[1].split("What is required", 1)[0]
        first = {"query": "author of Salt Winter", "gap": 1}  # same words as the first query
        return {"candidates": [first, {"query": "Maren Holt childhood Brekke", "gap": 2}] if known else [{"query": "Salt Winter author", "gap": 1}]}

    ans = run("kair", llm(plan=repetitive), retriever)
    choice = steps(ans, "query_choice")[1].outputs
    assert choice["rejected"] == [{"query": "author of Salt Winter", "redundancy": 1.0}]
    assert choice["chosen"] == "Maren Holt childhood Brekke"


def test_conflicting_and_unsupported_facts_are_discarded(retriever):
    def update(user):
        out = updater(user)
        p = numbered(user)
        if "Maren Holt" in p:
            out["facts"] += [
                {"text": "Salt Winter was written by Knut Berg", "passage": p["Maren Holt"], "status": "conflict"},
                {"text": "Maren Holt was born on the Moon", "passage": p["Maren Holt"], "status": "new"},
            ]
        return out

    ans = run("kair", llm(update=update), retriever)
    applied = steps(ans, "knowledge_applied")[1].outputs
    assert applied["discarded_conflicts"] == ["Salt Winter was written by Knut Berg"]
    assert applied["discarded_unsupported"] == ["Maren Holt was born on the Moon"]
    assert steps(ans, "state")[-1].outputs["known"] == ["Salt Winter was written by Maren Holt", "Maren Holt grew up in Brekke"]


def test_competition_stops_when_one_agent_resolves_every_gap(retriever):
    def by_agent(user):
        if "agent 1 of 3" in user:
            return {"candidates": [{"query": "herring North Sea", "gap": 1}]}
        if "agent 2 of 3" in user:
            return {"candidates": [{"query": "Winter Olympics", "gap": 1}]}
        return {"candidates": [{"query": "Maren Holt grew up", "gap": 1}]}  # agent 3 goes straight to the author

    ans = run("kair_3", llm(plan=by_agent), retriever, {"max_steps": 5})
    rounds = steps(ans, "round")
    assert len(rounds) == 1 and rounds[0].outputs["winner"] == 2 and rounds[0].outputs["open_gaps"][2] == 0
    assert len(steps(ans, "query_planner")) == 3  # one round: every agent proposed once
    assert "holt" in [s.doc_id for s in ans.sources] and ans.answer == "Brekke"


def test_collaboration_shares_facts_on_one_blackboard(retriever):
    model = llm()
    ans = run("kair_collab", model, retriever, {"agents": 2})
    plans = [c.messages[-1]["content"] for c in model.calls if c.output_model.__name__ == "Candidates"]
    # round 1: one open gap, one agent; round 2: two gaps, two agents, both reading the shared facts
    assert len(plans) == 3 and "Work on gap: " + GAP2 in plans[2]
    assert "Salt Winter was written by Maren Holt" in plans[2]
    managers = [s.outputs["assignments"] for s in steps(ans, "goal_manager")]
    assert managers == [{"0": QUESTION}, {"0": QUESTION, "1": GAP2}]
    assert steps(ans, "state")[-1].outputs["required"] == [] and ans.answer == "Brekke"
