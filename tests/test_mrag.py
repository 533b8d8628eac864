"""mRAG: the coordinator loop, the searcher's paging/re-querying, budgets, guards and
fallbacks, driven by scripted models over a real BM25 index of samples/corpus."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from judging import judge_page

from marag.agents.mrag import AGENT_NAMES
from marag.index.base import Hit
from marag.index.pipeline import index_corpus
from marag.index.store import IndexConfig
from marag.llm import ScriptedLLM
from marag.strategies import STRATEGIES, make_strategy
from marag.strategies.mrag import MRAG, MRAGConfig
from marag.strategies.mrag.search import Searcher, SearcherInput, SearchLimits
from marag.trace import Trace, activate

ADA = "computing/ada-lovelace.md#0"
GRACE = "computing/grace-hopper.md#0"
BEES = "science/honeybees.md#0"


@pytest.fixture(scope="module")
def retriever(tmp_path_factory, repo: Path):
    out = tmp_path_factory.mktemp("idx") / "sample"
    return index_corpus(repo / "samples" / "corpus", out, IndexConfig(retrievers=["bm25"]), progress=False).retriever(
        "bm25"
    )


class Script:
    """Replies by output model name: a list is consumed in order, a callable gets the
    last user message; `calls` counts the round trips per model."""

    def __init__(self, **replies: list | Callable[[str], Any]):
        self.replies = replies
        self.calls: dict[str, int] = {}

    def __call__(self, messages, output):
        name = output.__name__
        self.calls[name] = self.calls.get(name, 0) + 1
        if name == "PageJudgement" and name not in self.replies:  # a per-document judge answers a page
            return judge_page(self.replies["Judgement"], messages[-1]["content"])
        reply = self.replies[name]
        return reply(messages[-1]["content"]) if callable(reply) else reply.pop(0)


def coord(agent: str, input: str = "", reason: str = "next") -> dict:
    return {"agent": agent, "input": input, "reason": reason}


def move(action: str, new_query: str = "", reason: str = "") -> dict:
    return {"action": action, "new_query": new_query, "reason": reason}


def doc_title(user: str) -> str:
    """The title of the document a judge prompt shows."""
    m = re.search(r"^Document: (.*)$", user, re.M)
    return m.group(1) if m else ""  # a repair turn shows no document


def judge_titles(*titles: str) -> Callable[[str], dict]:
    """A judge that calls a document relevant when its title is one of `titles`."""

    def judge(user: str) -> dict:
        title = doc_title(user)
        ok = title in titles
        return {"explanation": f"{title} {'is' if ok else 'is not'} about it", "relevant": ok}

    return judge


def agents(trace: Trace) -> list[str]:
    """The agents the coordinator ran, in order (not the searcher's inner calls)."""
    return [s.agent for s in trace.steps if s.agent in AGENT_NAMES]


def run(strategy, question: str):
    return asyncio.run(strategy.run(question))


def test_registered_with_paper_budgets_as_defaults(retriever):
    assert "mrag" in STRATEGIES.names()
    s = make_strategy("mrag", ScriptedLLM(), retriever)
    assert isinstance(s, MRAG)
    c = s.config
    assert (c.max_agent_calls, c.docs_per_step, c.query_reuse_limit) == (30, 2, 5)
    with pytest.raises(Exception) as e:
        MRAGConfig(role_llms={"speller": {"backend": "scripted"}})
    assert "speller" in str(e.value) and "answerer" in str(e.value)


def test_case_study_1_control_flow(retriever):
    """Planner -> searcher (two aspects) -> reasoner -> searcher -> summarizer ->
    answerer -> validator -> finisher."""
    q = "How did Ada Lovelace and Grace Hopper each shape programming?"
    script = Script(
        CoordinatorDecision=[
            coord("planner", reason="two people to cover"),
            coord("searcher", "Ada Lovelace's program; Grace Hopper's compiler", "need sources for both"),
            coord("reasoner", "what each of them contributed"),
            coord("searcher", "Grace Hopper compiler", "Hopper is still thin"),
            coord("summarizer", "contributions"),
            coord("answerer", "contrast the two"),
            coord("validator"),
            coord("finisher", reason="validated"),
        ],
        Plan=[{"steps": ["Find Lovelace's contribution", "Find Hopper's contribution", "Compare"]}],
        Query=[{"query": "Ada Lovelace first program"}, {"query": "Grace Hopper compiler"}],
        Judgement=judge_titles("Ada Lovelace", "Grace Hopper"),
        Move=[
            move("continue", reason="one more page for Hopper"),
            move("end", reason="both found"),
            move("end", reason="found"),
        ],
        Analysis=[{"analysis": "Lovelace wrote the first program; Hopper built the first compiler."}],
        Summary=[{"summary": "Lovelace: Note G program. Hopper: A-0 compiler, COBOL."}],
        AnswerOutput=[{"answer": "Lovelace: the first program; Hopper: the first compiler"}],
        Validation=[
            {
                "criteria": ["covers both"],
                "valid": {"ok": True, "feedback": "ok"},
                "grounded": {"ok": True, "feedback": "ok"},
                "correct": {"ok": True, "feedback": "ok"},
            }
        ],
    )
    # the paper's case study: the coordinator, not `finish_on_answer`, decides after the answer
    ans = run(MRAG(ScriptedLLM(fn=script), retriever, {"next_move": "model", "finish_on_answer": False, "question_first": False}), q)  # the moves are the model's
    t = ans.trace
    assert agents(t) == [
        "planner",
        "searcher",
        "reasoner",
        "searcher",
        "summarizer",
        "answerer",
        "validator",
        "finisher",
    ]
    assert ans.answer == "Lovelace: the first program; Hopper: the first compiler"
    # S in retrieval order: the first query's top two (Ada Lovelace judged relevant, the
    # second kept by the rank floor though judged irrelevant), then Grace Hopper, found on
    # that query's second page and again by the second query, kept once
    assert [s.chunk_id for s in ans.sources] == [ADA, "computing/python-language.md#0", GRACE]
    # the coordinator's reasons are in its steps
    reasons = [s.outputs["reason"] for s in t.steps if s.agent == "coordinator"]
    assert reasons[1] == "need sources for both" and len(reasons) == 8
    # the first searcher read two pages of one query and judged every document
    first = next(s for s in t.steps if s.agent == "searcher")
    assert first.inputs["aspects"] == "Ada Lovelace's program; Grace Hopper's compiler"
    assert [(p["query"], p["offset"], p["action"]) for p in first.outputs["steps"]] == [
        ("Ada Lovelace first program", 0, "continue"),
        ("Ada Lovelace first program", 2, "end"),
    ]
    page1 = first.outputs["steps"][0]["docs"]
    assert [(d["chunk_id"], d["relevant"]) for d in page1] == [(ADA, True), ("computing/python-language.md#0", False)]
    assert page1[0]["explanation"] == "Ada Lovelace is about it"
    assert [(c.query, c.offset, c.k) for c in first.searches] == [
        ("Ada Lovelace first program", 0, 2),
        ("Ada Lovelace first program", 2, 2),
    ]
    # the answerer saw the summary and the reasoner's analysis, and both documents
    answer_prompt = next(s for s in t.steps if s.agent == "answerer").llm_calls[0].messages[-1]["content"]
    assert "Summary: Lovelace: Note G" in answer_prompt and "Analysis: Lovelace wrote" in answer_prompt
    assert "Note G" in answer_prompt and "COBOL" in answer_prompt
    # budgets are reported
    assert ans.usage["agent_calls"] == 8 and ans.usage["max_agent_calls"] == 30
    assert ans.usage["searcher_steps"] == 3 and ans.usage["query_reuses"] == 1
    assert ans.config["max_agent_calls"] == 30 and ans.config["query_reuse_limit"] == 5
    assert t.steps[-1].agent == "budget" and t.steps[-1].outputs["finished"] is True


def test_case_study_2_searcher_changes_an_unproductive_query(retriever):
    q = "Which scientist decoded the honeybee waggle dance?"
    judged = []

    def judge(user: str) -> dict:
        judged.append(user)
        title = doc_title(user)
        return {
            "explanation": f"{title}: {'the waggle dance' if title == 'Honeybees' else 'unrelated'}",
            "relevant": title == "Honeybees",
        }

    script = Script(
        CoordinatorDecision=[coord("searcher", "who decoded the waggle dance"), coord("answerer"), coord("finisher")],
        Query=[{"query": "first discovery of the world"}],
        Judgement=judge,
        Move=[
            move("continue", reason="nothing yet"),
            move("continue", reason="try one more page"),
            move("change", "honeybee waggle dance", "three pages without anything on bees: ask about bees"),
            move("end", reason="found the dance"),
        ],
        AnswerOutput=[{"answer": "Karl von Frisch"}],
    )
    # the paper's searcher: judged by the model alone, any query goes
    ans = run(MRAG(ScriptedLLM(fn=script), retriever, {"keep_top_ranked": 0, "guards": False, "searcher_max_steps": 6, "next_move": "model", "question_first": False}), q)
    searcher = next(s for s in ans.trace.steps if s.agent == "searcher")
    pages = searcher.outputs["steps"]
    assert [(p["query"], p["offset"]) for p in pages] == [
        ("first discovery of the world", 0),
        ("first discovery of the world", 2),
        ("first discovery of the world", 4),
        ("honeybee waggle dance", 0),
    ]
    assert [d["relevant"] for p in pages[:3] for d in p["docs"]] == [False] * 6
    assert pages[2]["action"] == "change" and pages[2]["reason"].startswith("three pages without anything")
    assert searcher.outputs["queries"] == ["first discovery of the world", "honeybee waggle dance"]
    assert [d["chunk_id"] for d in searcher.outputs["relevant"]] == [BEES]
    assert searcher.outputs["relevant"][0]["explanation"] == "Honeybees: the waggle dance"
    assert [(c.query, c.offset) for c in searcher.searches] == [(p["query"], p["offset"]) for p in pages]
    assert len(judged) == 7  # one judgement per document: 3 pages of 2, then the bees
    assert [s.chunk_id for s in ans.sources] == [BEES] and ans.answer == "Karl von Frisch"
    assert ans.usage["query_reuses"] == 2


def test_budget_exhaustion_still_answers(retriever):
    script = Script(
        CoordinatorDecision=lambda _: coord("summarizer", "keep summarizing"),
        Summary=lambda _: {"summary": "nothing new"},
        AnswerOutput=[{"answer": "an answer from the collection"}],
    )
    cfg = {"max_agent_calls": 4, "guards": False, "progress_guard": False}
    ans = run(MRAG(ScriptedLLM(fn=script), retriever, cfg), "What is the Sahara?")
    assert agents(ans.trace) == ["summarizer"] * 4 + ["answerer"]
    assert script.calls["CoordinatorDecision"] == 4
    assert ans.answer == "an answer from the collection"
    budget = ans.trace.steps[-1].outputs
    assert budget["agent_calls"] == 4 and budget["finished"] is False and budget["answered_after_budget"] is True
    assert ans.usage["answered_after_budget"] == 1.0


@pytest.mark.parametrize("plan_first", [False, True])
def test_repetition_guard_moves_the_fixed_sequence_on(retriever, plan_first):
    # a small model that always names the reasoner: after 3 in a row the guard runs the
    # fixed sequence's next agent instead (planner, searcher, answerer, finisher; without
    # plan_first no planner)
    script = Script(
        CoordinatorDecision=lambda _: coord("reasoner", "think"),
        Analysis=lambda _: {"analysis": "hmm"},
        Plan=lambda _: {"steps": ["search"]},
        Query=lambda _: {"query": "Sahara desert"},
        Judgement=judge_titles("The Sahara"),
        Move=lambda _: move("end"),
        AnswerOutput=lambda _: {"answer": "a desert"},
    )
    cfg = {"max_agent_calls": 20, "progress_guard": False, "plan_first": plan_first, "finish_on_answer": False}  # this guard alone
    ans = run(MRAG(ScriptedLLM(fn=script), retriever, cfg), "What is the Sahara?")
    r3, sequence = ["reasoner"] * 3, ["planner"] * plan_first + ["searcher", "answerer", "finisher"]
    assert agents(ans.trace) == [a for agent in sequence for a in r3 + [agent]]
    guards = [s for s in ans.trace.steps if s.agent == "guard"]
    assert [g.outputs["agent"] for g in guards] == sequence and guards[0].inputs["picked"] == "reasoner"
    hints = [s.inputs["default_next"] for s in ans.trace.steps if s.agent == "coordinator"]
    assert hints[0] == sequence[0] and ("planner" in hints) == plan_first
    assert ans.answer == "a desert" and [s.chunk_id for s in ans.sources] == ["geography/sahara.md#0"]


def test_query_reuse_limit_forces_end_or_change(retriever):
    def search_with(move_reply: dict, max_steps: int = 8, query: str = "first discovery of the world"):
        script = Script(Query=[{"query": query}], Judgement=judge_titles(), Move=lambda _: move_reply)
        strat = MRAG(ScriptedLLM(), retriever)
        trace = Trace()
        limits = SearchLimits(max_steps=max_steps)
        with activate(trace):
            out, _ = asyncio.run(Searcher()(ScriptedLLM(fn=script), strat.search, SearcherInput(question="q"), limits))
        return out

    # asks to continue forever with no new query: the sixth page is refused, the search ends
    # (the question shares no word with these queries: the on-topic check is off by default here)
    out = search_with(move("continue", reason="more"))
    assert [s.offset for s in out.steps] == [0, 2, 4, 6, 8]
    assert out.steps[-1].action == "end" and out.steps[-1].forced == "query_reuse_limit"
    assert all(s.forced is None for s in out.steps[:-1])
    # with a fresh query on offer, the forced move is a change to it
    out = search_with(move("continue", "Marie Curie radium", "more"))
    assert [(s.query, s.offset) for s in out.steps[4:6]] == [
        ("first discovery of the world", 8),
        ("Marie Curie radium", 0),
    ]
    assert out.steps[4].action == "change" and out.steps[4].forced == "query_reuse_limit"
    # a page with no results ends the query the same way (one hit only for this query)
    out = search_with(move("continue"), query="Grace Hopper compiler")
    assert [(s.offset, len(s.docs)) for s in out.steps] == [(0, 1), (1, 0)]
    assert out.steps[-1].action == "end" and out.steps[-1].forced == "no_more_results"
    # and the step budget caps it all
    out = search_with(move("continue"), max_steps=3)
    assert len(out.steps) == 3 and out.steps[-1].forced == "max_steps"


def test_reviser_before_answerer_is_a_recorded_refusal(retriever):
    script = Script(
        CoordinatorDecision=[
            coord("reviser", "make it shorter"),
            coord("answerer"),
            coord("reviser", "just the name"),
            coord("finisher"),
        ],
        Query=[{"query": "first computer programmer"}],
        Judgement=judge_titles("Ada Lovelace"),
        Move=[move("end")],
        AnswerOutput=[{"answer": "Ada Lovelace, daughter of Lord Byron"}, {"answer": "Ada Lovelace"}],
    )
    ans = run(
        MRAG(ScriptedLLM(fn=script), retriever, {"guards": False, "finish_on_answer": False}), "Who is often called the first computer programmer?"
    )
    revisers = [s for s in ans.trace.steps if s.agent == "reviser"]
    assert revisers[0].status == "refused" and revisers[0].llm_calls == []
    assert revisers[0].outputs["refused"] is True and "answerer" in revisers[0].outputs["reason"]
    # without guards nobody else runs that turn: the coordinator chooses again
    assert agents(ans.trace) == ["reviser", "answerer", "reviser", "finisher"]
    assert revisers[1].status == "ok" and ans.answer == "Ada Lovelace"
    assert revisers[0].outputs["routed_to"] is None and ans.usage["refusals"] == 1
    assert ans.usage["agent_calls"] == 4


def test_with_guards_a_refused_turn_goes_to_the_fixed_sequence(retriever):
    script = Script(
        CoordinatorDecision=[
            coord("reviser", "make it shorter"),
            coord("reviser", "shorter"),
            coord("reviser", "just the name"),
            coord("finisher"),
        ],
        Query=[{"query": "first computer programmer"}],
        Judgement=judge_titles("Ada Lovelace"),
        Move=[move("end")],
        AnswerOutput=[{"answer": "Ada Lovelace, daughter of Lord Byron"}, {"answer": "Ada Lovelace"}],
    )
    ans = run(MRAG(ScriptedLLM(fn=script), retriever, {"finish_on_answer": False}), "Who is often called the first computer programmer?")
    # refused reviser -> the sequence's next agent (the planner is skipped): searcher;
    # refused again (no response yet) -> answerer; then the reviser may run
    assert agents(ans.trace) == ["reviser", "searcher", "reviser", "answerer", "reviser", "finisher"]
    assert ans.answer == "Ada Lovelace" and ans.usage["refusals"] == 2 and ans.usage["agent_calls"] == 6


def test_finisher_before_any_response_is_refused_and_routed(retriever):
    script = Script(
        CoordinatorDecision=lambda _: coord("finisher"),
        Query=[{"query": "Linux mascot"}],
        Judgement=judge_titles("The Linux kernel"),
        Move=[move("end")],
        AnswerOutput=[{"answer": "Tux"}],
    )
    ans = run(MRAG(ScriptedLLM(fn=script), retriever), "What is the name of the Linux mascot?")
    assert agents(ans.trace) == ["finisher", "searcher", "finisher", "answerer", "finisher"]
    assert [s.status for s in ans.trace.steps if s.agent == "finisher"] == ["refused", "refused", "ok"]
    assert ans.answer == "Tux" and ans.sources[0].doc_id == "computing/linux-kernel.md"


def hinted(log: list[str], q: str) -> Script:
    """A run where the coordinator names the agent its prompt hints at (its prompts
    collected in `log`), the searcher finds Ada Lovelace and the answerer names her."""

    def decide(user: str) -> dict:
        log.append(user)
        return coord(re.search(r"usual next agent is: (\w+)", user).group(1), q)

    return Script(
        CoordinatorDecision=decide,
        Plan=lambda _: {"steps": ["find the programmer"]},
        Query=lambda _: {"query": "first computer programmer"},
        Judgement=judge_titles("Ada Lovelace"),
        Move=lambda _: move("end"),
        AnswerOutput=lambda _: {"answer": "Ada Lovelace"},
    )


def test_after_an_answer_the_run_finishes_without_a_coordinator_turn(retriever):
    # the hinted coordinator names the finisher after the answerer; by default
    # (`finish_on_answer`) that turn is not asked for, and a report whose input only
    # repeats the question does not repeat it
    q = "Who is often called the first computer programmer?"

    on, off = [], []
    ans = run(MRAG(ScriptedLLM(fn=hinted(on, q)), retriever), q)
    assert agents(ans.trace) == ["planner", "searcher", "answerer", "finisher"] and ans.answer == "Ada Lovelace"
    rule = [s for s in ans.trace.steps if s.agent == "guard"]
    assert [(g.inputs["rule"], g.outputs["agent"]) for g in rule] == [("finish_on_answer", "finisher")]
    assert len(on) == 3 and "planner: find the programmer" in on[-1] and f"planner({q})" not in on[-1]
    ans_off = run(MRAG(ScriptedLLM(fn=hinted(off, q)), retriever, {"finish_on_answer": False}), q)
    assert len(off) == 4 and agents(ans_off.trace) == agents(ans.trace) and ans_off.answer == ans.answer
    assert off[:3] == on  # the same run up to the answer: the last turn is the one saved
    paper = []
    run(MRAG(ScriptedLLM(fn=hinted(paper, q)), retriever, {"guards": False, "finish_on_answer": False}), q)
    assert f"planner({q})" in paper[-1]  # without the echo filter the input is reported as given


def test_the_searchers_report_names_what_it_found_by_title(retriever):
    # the coordinator's "Documents found" line gives each document's fact; the report of
    # the searcher's run in its history names them by title only (`report_titles`),
    # where the paper's report repeats the judge's explanation of each
    q = "Who is often called the first computer programmer?"

    titles, explained = [], []
    ans = run(MRAG(ScriptedLLM(fn=hinted(titles, q)), retriever), q)
    ans_paper = run(MRAG(ScriptedLLM(fn=hinted(explained, q)), retriever, {"report_titles": False}), q)
    assert ans.answer == ans_paper.answer == "Ada Lovelace" and agents(ans.trace) == agents(ans_paper.trace)
    report = re.search(r"searcher[^\n]*: found ([^\n]*)", titles[-1]).group(1)
    assert report.startswith("[Ada Lovelace]") and "about it" not in report
    assert "found [Ada Lovelace] Ada Lovelace is about it" in explained[-1]
    assert len(titles[-1]) < len(explained[-1])
    assert "report_titles" not in MRAGConfig(routing="sequence").additions()  # only the coordinator reads it


def test_unusable_coordinator_output_falls_back_to_the_fixed_sequence(retriever):
    def script() -> Script:
        return Script(
            CoordinatorDecision=lambda _: "I think we should maybe search?",  # garbage, and again on repair
            Plan=[{"steps": ["look up Python's creator"]}],
            Query=[{"query": "Python programming language created"}],
            Judgement=judge_titles("The Python programming language"),
            Move=[move("end")],
            AnswerOutput=[{"answer": "Guido van Rossum"}],
        )

    ans = run(MRAG(ScriptedLLM(fn=script()), retriever, {"finish_on_answer": False, "question_first": False}), "Who created the Python programming language?")
    assert agents(ans.trace) == ["planner", "searcher", "answerer", "finisher"]
    coordinators = [s for s in ans.trace.steps if s.agent == "coordinator"]
    assert [s.status for s in coordinators] == ["fallback"] * 4
    assert all(len(s.llm_calls) == 1 and s.llm_calls[0].repaired for s in coordinators)  # reply + repair
    assert coordinators[1].outputs["agent"] == "searcher" and coordinators[1].outputs["reason"].startswith("fallback")
    assert ans.answer == "Guido van Rossum" and ans.usage["fallbacks"] == 4
    # without plan_first the sequence opens with the searcher: no plan is asked for
    first = script()
    ans = run(MRAG(ScriptedLLM(fn=first), retriever, {"plan_first": False, "finish_on_answer": False, "question_first": False}), "Who created the Python programming language?")
    assert agents(ans.trace) == ["searcher", "answerer", "finisher"] and "Plan" not in first.calls
    assert ans.usage["fallbacks"] == 3


def test_sequence_routing_runs_the_agents_without_a_coordinator(retriever):
    """routing="sequence" (`mrag_sequence`): no coordinator call; searcher, answerer,
    finisher, each on the question (the planner's plan only served the coordinator)."""
    script = Script(
        Query=lambda user: {"query": "Python programming language created"},
        Judgement=judge_titles("The Python programming language"),
        Move=[move("end")],
        AnswerOutput=[{"answer": "Guido van Rossum"}],
    )
    ans = run(make_strategy("mrag_sequence", ScriptedLLM(fn=script), retriever), "Who created the Python programming language?")
    assert agents(ans.trace) == ["searcher", "answerer", "finisher"]
    assert "CoordinatorDecision" not in script.calls and "Plan" not in script.calls
    assert [s.outputs["agent"] for s in ans.trace.steps if s.agent == "sequence"] == ["searcher", "answerer", "finisher"]
    assert ans.answer == "Guido van Rossum" and ans.usage["coordinator_calls"] == 0
    assert MRAGConfig(paper=True, routing="sequence").routing == "coordinator"
    # what only the coordinator reads is not an addition in use without it
    assert {"hints", "history_window", "report_chars", "coordinator_input_chars"} <= set(MRAGConfig().additions())
    on = MRAGConfig(routing="sequence").additions()
    assert "routing" in on and not {"hints", "history_window", "report_chars", "coordinator_input_chars"} & set(on)


def test_fallback_continues_the_sequence_from_where_it_stands(retriever):
    # a valid first pick (searcher), then garbage: the sequence resumes after the search
    replies = [coord("searcher", "Everest first ascent")]
    script = Script(
        CoordinatorDecision=lambda _: replies.pop(0) if replies else "{not json",
        Query=[{"query": "Mount Everest first ascent"}],
        Judgement=judge_titles("Mount Everest"),
        Move=[move("end")],
        AnswerOutput=[{"answer": "Hillary and Tenzing"}],
    )
    ans = run(MRAG(ScriptedLLM(fn=script), retriever), "Who made the first confirmed ascent of Mount Everest?")
    assert agents(ans.trace) == ["searcher", "answerer", "finisher"]


@pytest.mark.parametrize("heuristic", [True, False])
def test_searcher_judge_and_move_fallbacks(heuristic):
    """With our heuristic fallbacks, unusable judgements count a document relevant only
    when it was on its query's first page, and an unusable next move ends the search
    after a page that added nothing. In the paper's mode an unusable judgement is "not
    relevant" and an unusable move ends the search."""
    pages = {0: ["a", "b"], 2: ["c", "d"]}

    async def search(query: str, k: int, offset: int) -> list[Hit]:
        return [
            Hit(doc_id=x, chunk_id=f"{x}#0", score=1.0, text=f"text {x}", title=x.upper())
            for x in pages.get(offset, [])
        ]

    script = Script(
        Query=[{"query": "q1"}],
        Judgement=lambda _: "garbage",
        Move=[move("continue", reason="more"), "garbage", "garbage"],
    )
    trace = Trace()
    with activate(trace):
        out, hits = asyncio.run(
            Searcher()(
                ScriptedLLM(fn=script), search, SearcherInput(question="q"), SearchLimits(heuristic_fallbacks=heuristic)
            )
        )
    assert [h.chunk_id for h in hits] == (["a#0", "b#0"] if heuristic else [])
    judged = [d for s in out.steps for d in s.docs]
    assert [(d.chunk_id, d.relevant, d.fallback) for d in judged] == [
        ("a#0", heuristic, True),
        ("b#0", heuristic, True),
        ("c#0", False, True),
        ("d#0", False, True),
    ]
    assert out.steps[-1].action == "end" and out.steps[-1].reason.startswith("fallback")
    assert [s.status for s in trace.steps if s.agent == "searcher.judge"] == ["fallback"] * 4


@pytest.mark.parametrize("focused", [True, False])
def test_the_judge_reads_the_sentences_nearest_the_query_when_focused(focused):
    filler = " ".join(f"In {1890 + i} she printed a pamphlet on herring prices." for i in range(6))
    text = f"Maren Holt (1871-1950) was a Norwegian printer. {filler} She grew up in Brekke, a village."

    async def search(query: str, k: int, offset: int) -> list[Hit]:
        return [Hit(doc_id="holt", chunk_id="holt#0", score=1.0, text=text, title="Maren Holt")] if offset == 0 else []

    seen: list[str] = []

    def judge(user: str) -> dict:
        seen.append(user)
        return {"explanation": "names the village", "relevant": True}

    script = Script(Query=[{"query": "Maren Holt grew up village"}], Judgement=judge, Move=[move("end")])
    limits = SearchLimits(doc_chars=150, focused=focused)
    asyncio.run(Searcher()(ScriptedLLM(fn=script), search, SearcherInput(question="Where did Maren Holt grow up?"), limits))
    assert seen and ("grew up in Brekke" in seen[0]) is focused and ("… She grew up" in seen[0]) is focused


def test_per_role_llm_override(retriever):
    main = Script(
        CoordinatorDecision=[coord("searcher"), coord("answerer"), coord("finisher")],
        Query=[{"query": "Marie Curie elements 1898"}],
        Judgement=judge_titles("Marie Curie"),
        Move=[move("end")],
    )
    answerer_llm = ScriptedLLM([{"answer": "polonium and radium"}], model="big-answerer")
    with pytest.warns(FutureWarning, match="mrag.answerer"):  # a bare role name still works, with a warning
        strat = MRAG(ScriptedLLM(fn=main), retriever, llms={"answerer": answerer_llm})
    ans = run(strat, "Which two elements did Marie Curie discover in 1898?")
    assert ans.answer == "polonium and radium"
    assert "AnswerOutput" not in main.calls and len(answerer_llm.calls) == 1
    step = next(s for s in ans.trace.steps if s.agent == "answerer")
    assert step.llm_calls[0].model == "big-answerer" and "Marie Curie" in step.llm_calls[0].messages[-1]["content"]
    # the same from config: an LLMConfig per role, built with make_llm
    strat = MRAG(ScriptedLLM(fn=main), retriever, {"role_llms": {"mrag.answerer": {"backend": "scripted", "model": "cfg"}}})
    assert strat.llms["mrag.answerer"].model == "cfg"
    with pytest.raises(ValueError):
        MRAG(ScriptedLLM(), retriever, llms={"answerrer": answerer_llm})


def test_prompts_stay_small(retriever):
    """Long histories and many documents are clipped before they reach a prompt."""
    script = Script(
        CoordinatorDecision=lambda _: coord("searcher", "x" * 150),
        Query=lambda _: {"query": "first discovery of the world"},
        Judgement=lambda _: {"explanation": "y" * 150, "relevant": True},
        Move=lambda _: move("continue"),
        AnswerOutput=lambda _: {"answer": "z"},
        Plan=lambda _: {"steps": ["p" * 150] * 5},
    )
    llm = ScriptedLLM(fn=script)
    strat = MRAG(llm, retriever, {"max_agent_calls": 6, "guards": False})
    run(strat, "Which river carries the most water?")
    longest = max(sum(len(m["content"]) for m in c.messages) for c in llm.calls)
    # the collected documents are packed into context_chars; the rest of a prompt is
    # small: well under SmolLM2's 4k-token slot
    assert longest < strat.config.context_chars + 2500


def test_small_model_guards_in_the_searcher(retriever):
    """Our additions for small models: an off-topic query is not run (the question is
    searched instead), a move named as a query is ignored, a change to a rejected query
    ends the search (it never reads the same query again instead), and a query's top hit
    stays relevant when the judge rejects it (`keep_top_ranked`)."""
    script = Script(
        Query=[{"query": "2022-01-01 12:32:53.132 planner.py"}],
        Judgement=lambda _: {"explanation": "no", "relevant": False},
        Move=[move("continue", "change", "x"), move("change", "Sahara desert facts", "y"), move("end")],
    )
    strat = MRAG(ScriptedLLM(), retriever)
    limits = SearchLimits(keep_top_ranked=1, on_topic_queries=True)
    trace = Trace()
    with activate(trace):
        out, hits = asyncio.run(
            Searcher()(
                ScriptedLLM(fn=script),
                strat.search,
                SearcherInput(question="Who made the first ascent of Mount Everest?"),
                limits,
            )
        )
    assert out.rejected_queries == ["2022-01-01 12:32:53.132 planner.py", "change", "Sahara desert facts"]
    assert out.queries == ["Who made the first ascent of Mount Everest?"]
    assert [(s.offset, s.action, s.forced) for s in out.steps] == [(0, "continue", None), (2, "end", "no_new_query")]
    assert not any(d.relevant for s in out.steps for d in s.docs)  # the judge's verdicts stand
    # the run found nothing, so the rank floor keeps the first query's top hit
    assert [(d.chunk_id, d.rank, d.by_rank) for d in out.relevant] == [("geography/mount-everest.md#0", 0, True)]
    assert [h.chunk_id for h in hits] == ["geography/mount-everest.md#0"]


def test_coordinator_input_echoes_are_dropped_and_hints_are_optional(retriever):
    from marag.agents.mrag.coordinator import Coordinator, CoordinatorInput, useful_input

    assert useful_input("planner") == "" and useful_input("1.1.1.1; 2.1.1.1") == ""
    assert useful_input("finds documents about the topic") == ""  # copied from its own prompt
    assert useful_input("The usual next agent is: finisher") == ""
    assert useful_input(" Linux mascot name ") == "Linux mascot name"
    hinted = Coordinator().messages(CoordinatorInput(question="q", default_next="searcher"))
    assert "usual next agent is: searcher" in hinted[1].content and hinted[1].content.endswith("Which agent acts next?")
    plain = Coordinator().messages(CoordinatorInput(question="q", default_next="searcher", hint=False))
    assert "usual" not in plain[1].content
    # one system prompt whatever the hint names, so a question's turns share their prefix
    later = Coordinator().messages(CoordinatorInput(question="q", default_next="finisher", history=["searcher: found 2"]))
    assert hinted[0].content == plain[0].content == later[0].content
    assert later[1].content.startswith(hinted[1].content.split("Done so far:")[0])
    # end to end: the echoed input never reaches the agent
    script = Script(
        CoordinatorDecision=[coord("searcher", "searcher"), coord("answerer"), coord("finisher")],
        Query=[{"query": "Sahara"}],
        Judgement=judge_titles("The Sahara"),
        Move=[move("end")],
        AnswerOutput=[{"answer": "a desert"}],
    )
    ans = run(MRAG(ScriptedLLM(fn=script), retriever, {"question_first": False}), "What is the Sahara?")
    assert next(s for s in ans.trace.steps if s.agent == "searcher").inputs["aspects"] == ""


# -- all of S reaches the agents; the paper's mode --------------------------------------


@pytest.mark.parametrize("rank_docs", [False, True])
def test_a_second_hop_document_found_late_reaches_the_answerer(retriever, rank_docs):
    """Five documents are collected before the second-hop one; the answerer still reads
    it (all of S is packed into the prompt, most relevant first). In retrieval order it
    comes after the first query's documents (the default); with `rank_docs` the
    question ranks it first, so it is printed last, nearest the question, and the
    answer's sources list it first. A retriever that cannot search a subset keeps
    retrieval order."""
    python = "computing/python-language.md#0"

    def script():  # a fresh one per run: a Script pops its replies
        return Script(
            CoordinatorDecision=[
                coord("searcher", "mountains, deserts, rivers, reefs and bees"),
                coord("searcher", "who created Python"),
                coord("answerer"),
                coord("finisher"),
            ],
            Query=[{"query": "Everest Sahara Amazon reef honeybees"}, {"query": "Python programming language creator"}],
            Judgement=lambda user: {
                "explanation": "about it",
                "relevant": "Python" not in doc_title(user) or "creator" in user or "Python" in user.split("Looking for: ")[-1],
            },
            Move=[move("continue"), move("continue"), move("end"), move("end")],
            AnswerOutput=[{"answer": "Guido van Rossum"}],
        )

    llm = ScriptedLLM(fn=script())
    # three pages for the first query, so that five documents come before Python's
    cfg = MRAGConfig(rank_docs=rank_docs, searcher_max_steps=3, question_first=False)
    ans = run(MRAG(llm, retriever, cfg), "Where did the creator of Python begin working on it?")
    ids = [s.chunk_id for s in ans.sources]
    assert python in ids and len(ids) >= 6 and (ids.index(python) == 0) is rank_docs
    found_order = list(dict.fromkeys(d["chunk_id"] for s in ans.trace.steps if s.agent == "searcher" for d in s.outputs["relevant"]))
    assert found_order.index(python) >= 5  # discovered after five others
    answer_prompt = next(c for c in llm.calls if c.output_model.__name__ == "AnswerOutput").messages[-1]["content"]
    assert "Centrum Wiskunde" in answer_prompt  # the second-hop document's text
    printed_last = answer_prompt.split("Documents:\n\n", 1)[1].split("\n\nQuestion:", 1)[0].rsplit("\n\n[", 1)[-1]
    assert ("Centrum Wiskunde" in printed_last) is rank_docs
    ranked = [s for s in ans.trace.steps if s.agent == "documents_ranked"]
    # ranked once for the answerer; the sources reuse it (S did not grow in between)
    assert [s.outputs["chunk_ids"] for s in ranked] == ([ids] if rank_docs else [])
    if rank_docs:

        class Plain:  # a retriever over a remote engine: search, no subsets
            name = "plain"

            def search(self, query, k=10, offset=0):
                return retriever.search(query, k, offset)

        plain = run(MRAG(ScriptedLLM(fn=script()), Plain(), MRAGConfig(rank_docs=True, question_first=False)), "Where did the creator of Python begin working on it?")
        assert [s.chunk_id for s in plain.sources].index(python) > 0
        assert "documents_ranked" not in [s.agent for s in plain.trace.steps]
    # by default no document carries the query that found it (a guessed answer written
    # into a query would read as evidence); `unlabelled_docs=false` (and the paper's mode) shows it
    assert "found for:" not in answer_prompt and "Python programming language creator" not in answer_prompt
    labelled = ScriptedLLM(fn=script())
    run(MRAG(labelled, retriever, MRAGConfig(unlabelled_docs=False, question_first=False)), "Where did the creator of Python begin working on it?")
    labelled_prompt = next(c for c in labelled.calls if c.output_model.__name__ == "AnswerOutput").messages[-1]["content"]
    assert "(found for: Python programming language creator)" in labelled_prompt


def test_a_document_named_in_s_joins_it_after_a_search(tmp_path):
    """linked_docs: one searcher run reads the novel's page, which names Maren Holt; her
    page, which no query ranked, joins S by its title and reaches the answerer (what the
    1.5B's one-search runs lacked: the second hop). Off, the answerer has the first hop only."""
    from twohop import DOCS, QUESTION, bm25_retriever

    twohop = bm25_retriever(tmp_path, DOCS)

    def script():
        return Script(
            CoordinatorDecision=[coord("searcher", "the novel's author"), coord("answerer"), coord("finisher")],
            Query=[{"query": "Salt Winter novel"}],
            Judgement=judge_titles("Salt Winter"),
            Move=[move("end")],
            AnswerOutput=lambda user: {"answer": "Brekke" if "Brekke" in user else "unknown"},
        )

    config = {"docs_per_step": 1, "searcher_max_steps": 1, "keep_top_ranked": 1, "question_first": False}
    ans = run(MRAG(ScriptedLLM(fn=script()), twohop, MRAGConfig(**config)), QUESTION)
    linked = next(s for s in ans.trace.steps if s.agent == "linked_docs")
    assert linked.outputs["chunk_ids"] == ["holt#0"] and linked.inputs["query"] == "Salt Winter novel"
    assert [s.doc_id for s in ans.sources] == ["salt-winter", "holt"] and ans.answer == "Brekke"
    assert {r["doc_id"] for r in ans.read} == {"salt-winter", "holt"}
    searcher = next(s for s in ans.trace.steps if s.agent == "coordinator" and "linked: [Maren Holt]" in str(s.inputs["history"]))
    assert searcher  # the coordinator is told what joined S
    off = run(MRAG(ScriptedLLM(fn=script()), twohop, MRAGConfig(**config, linked_docs=0)), QUESTION)
    assert [s.doc_id for s in off.sources] == ["salt-winter"] and off.answer == "unknown"
    assert "linked_docs" not in [s.agent for s in off.trace.steps]


def test_pack_texts_shows_every_document_within_the_budget():
    from marag.agents.mrag._shared import pack_texts

    assert pack_texts([100, 200], None) == [100, 200]
    assert pack_texts([100, 200], 1000) == [100, 200]  # fits whole
    # 1000 over three: 100 stays whole, the two long ones share the remaining 900
    assert pack_texts([3000, 100, 2000], 1000) == [450, 100, 450]
    # more documents than `floor`-sized slots: the least relevant (last) are left out
    assert pack_texts([500] * 8, 1000, floor=200) == [200] * 5 + [0] * 3


def test_paper_mode_leaves_no_addition_active(retriever):
    cfg = MRAGConfig(paper=True, guards=True, hints=True, keep_top_ranked=3)  # paper wins
    assert cfg.additions() == [] and not cfg.guards and not cfg.hints and cfg.keep_top_ranked == 0
    assert cfg.searcher_max_steps is None and cfg.history_window is None and cfg.doc_chars is None
    assert cfg.max_searcher_runs is None and cfg.judge_pages is False and cfg.unlabelled_docs is False
    assert MRAGConfig().additions() == [
        "answer_recheck", "answer_type_check", "guards", "hints", "keep_top_ranked", "searcher_max_steps", "history_window", "report_chars", "doc_chars",
        "focused", "coordinator_input_chars", "late_answer", "answer_guidance", "memory", "progress_guard", "judge_pages", "max_searcher_runs",
        "unlabelled_docs", "linked_docs", "next_move", "finish_on_answer", "report_titles", "question_first",
    ]  # fmt: skip
    assert "finish_on_answer" not in MRAGConfig(routing="sequence").additions()  # only the coordinator's turn is saved
    assert "plan_first" in MRAGConfig(plan_first=False).additions()
    assert "grounded_relevance" in MRAGConfig(grounded_relevance=True).additions()
    assert "grounded_relevance" not in MRAGConfig(grounded_relevance=True, guards=False).additions()  # it narrows a guard
    assert isinstance(make_strategy("mrag_paper", ScriptedLLM(), retriever), MRAG)
    assert make_strategy("mrag_paper", ScriptedLLM(), retriever).config.paper is True


def test_a_full_run_in_paper_mode(retriever):
    """Only the paper's behaviour: a premature finisher runs (no precondition), an
    unusable judgement is "not relevant" (no first-page rule), an unusable move ends the
    search, a long coordinator input reaches the agent whole, the judge reads the whole
    document, the history is never clipped, and no answer is written after the budget."""
    long_input = "aspects: " + "the first ascent of the highest mountain, " * 10
    script = Script(
        CoordinatorDecision=[
            coord("searcher", long_input),
            coord("searcher", "Hillary"),
            coord("planner", "plan"),
            coord("planner", "plan again"),
            coord("planner", "and again"),
            coord("planner", "and once more"),
        ],
        Query=[{"query": "Everest first ascent"}, {"query": "Hillary Tenzing"}],
        Judgement=lambda user: "garbage"
        if "Looking for: aspects" in user
        else {"explanation": "names the climbers", "relevant": doc_title(user) == "Mount Everest"},
        Move=["garbage", "garbage", move("end", reason="found")],
        Plan=lambda _: {"steps": ["look up the climbers"]},
    )
    llm = ScriptedLLM(fn=script)
    ans = run(MRAG(llm, retriever, {"paper": True, "max_agent_calls": 6}), "Who made the first ascent of Mount Everest?")
    t = ans.trace
    assert agents(t) == ["searcher", "searcher", "planner", "planner", "planner", "planner"]  # no repetition guard
    assert not [s for s in t.steps if s.agent in ("guard", "refused")]
    first = next(s for s in t.steps if s.agent == "searcher")
    assert first.inputs["aspects"] == long_input  # not dropped, not clipped
    assert [d["relevant"] for d in first.outputs["steps"][0]["docs"]] == [False, False]  # fallback: not relevant
    assert first.outputs["steps"][0]["action"] == "end" and first.outputs["relevant"] == []  # no rank floor
    judge_prompt = next(c for c in llm.calls if c.output_model.__name__ == "Judgement").messages[-1]["content"]
    everest = retriever.search("Everest first ascent", 1)[0]
    assert " ".join(everest.text.split()) in " ".join(judge_prompt.split())  # the whole document
    assert ans.answer == "" and ans.usage["answered_after_budget"] == 0  # no late answer
    assert [s.chunk_id for s in ans.sources] == [everest.chunk_id]


def test_what_the_reference_model_did_ends_within_budget_and_keeps_s_on_topic(retriever):
    """The 0.5B reference model's mRAG trajectories, replayed: the coordinator sends the
    searcher again and again with the question as its input, the query writer copies the
    question, the judge calls every document relevant and fills `fact` with the
    document's first words, every move asks to change the query to the question. The run
    ends well inside the question's budget, and S holds no document off the topic."""
    q = "Who is often called the first computer programmer?"

    def judge(user: str) -> dict:
        text = user.split("Document: ", 1)[1].split("\n", 1)[1] if "Document: " in user else ""
        return {"explanation": "it is relevant", "fact": text[:60], "relevant": True}

    script = Script(
        CoordinatorDecision=lambda _: coord("searcher", q),
        Query=lambda _: {"query": q},
        Judgement=judge,
        Move=lambda _: move("change", q, "more"),
        AnswerOutput=lambda _: {"answer": "Ada Lovelace"},
    )
    llm = ScriptedLLM(fn=script)
    ans = run(MRAG(llm, retriever), q)
    assert len(llm.calls) <= 25 and not ans.usage["stopped_by_budget"]
    assert ans.answer == "Ada Lovelace"
    ran = [s.agent for s in ans.trace.steps if s.agent in AGENT_NAMES and s.status != "refused"]
    assert ran == ["searcher", "searcher", "answerer", "finisher"]  # the searcher's runs are capped
    refused = [s.outputs["routed_to"] for s in ans.trace.steps if s.status == "refused" and s.agent == "searcher"]
    assert refused == ["answerer"]  # to the answerer while S is new to it
    finished = [s for s in ans.trace.steps if s.agent == "guard" and s.inputs.get("rule") == "finish_on_answer"]
    assert len(finished) == 1 and finished[0].outputs["agent"] == "finisher"  # then to the end, without a coordinator turn
    # off-topic documents were overruled, never kept: S shares words with the question
    pages = [p for s in ans.trace.steps if s.agent == "searcher" and s.status != "refused" for p in s.outputs["steps"]]
    overruled = [d for p in pages for d in p["docs"] if d["overruled"]]
    assert overruled and all(d["relevant"] is False for d in overruled)
    floor = {d["chunk_id"] for s in ans.trace.steps if s.agent == "searcher" and s.status != "refused" for d in s.outputs["relevant"] if d["by_rank"]}
    # only the rank floor (what vanilla_rag would read: the first query's top two) keeps one
    assert {d["chunk_id"] for d in overruled} & {s.chunk_id for s in ans.sources} <= floor
    assert ADA in [s.chunk_id for s in ans.sources]


def test_a_bridge_title_anchors_the_second_hop(retriever):
    """A document that shares no word with the question is on topic when it shares one
    with the title of a document already found (the bridge entity)."""
    from marag.strategies.mrag.search import Judged, Searcher

    hit = Hit(doc_id="x", chunk_id="x#0", score=1.0, title="Hannah Gross", text="Hannah Gross is the daughter of Paul Gross and Martha Burns.")
    j = Judged(chunk_id="x#0", doc_id="x", rank=0, relevant=True, explanation="")
    assert Searcher._anchored(hit, j, {"actor", "constable", "fraser"}).overruled
    assert not Searcher._anchored(hit, j, {"actor", "constable", "fraser", "paul", "gross"}).overruled


def test_a_grounded_judge_keeps_a_page_only_where_the_title_or_the_fact_is_the_documents_own(retriever):
    """With `grounded_relevance`, a verdict copied from one document of a page to the
    next (the 1.5B's page judge) stands only for a document whose title shares a topic
    word with the anchor, or whose judged fact it contains and that adds to the question."""
    from marag.agents.queries import content_words
    from marag.strategies.mrag.search import Judged, Searcher

    q = content_words("Are Christopher Nolan and Sathish Kalathil both film directors?")
    anchor = {"christopher", "nolan", "sathish", "kalathil", "film", "director"}
    kubrick = Hit(
        doc_id="k", chunk_id="k#0", score=1.0, title="Influence of Stanley Kubrick",
        text="Stanley Kubrick is regarded as one of the most influential directors; Christopher Nolan cites him.",
    )
    nolan = Hit(doc_id="n", chunk_id="n#0", score=1.0, title="Christopher Nolan", text="Christopher Nolan is a film director.")

    def verdict(fact: str) -> Judged:
        return Judged(chunk_id="k#0", doc_id="k", rank=0, relevant=True, explanation="", fact=fact)

    copied = verdict("Christopher Nolan")  # the first document's fact, repeated for the second
    assert not Searcher._anchored(kubrick, copied, anchor).overruled  # the text names Nolan: on topic
    assert Searcher._anchored(kubrick, copied, anchor, q).overruled  # but it adds nothing to the question
    assert not Searcher._anchored(kubrick, verdict("Stanley Kubrick"), anchor, q).overruled  # its own, new
    assert Searcher._anchored(kubrick, verdict("Malayalam documentary"), anchor, q).overruled  # not in it
    assert Searcher._anchored(kubrick, verdict(""), anchor, q).overruled
    assert not Searcher._anchored(nolan, verdict(""), anchor, q).overruled  # its title is the question's
    floor = verdict("").model_copy(update={"by_rank": True})
    assert not Searcher._anchored(kubrick, floor, anchor, q).overruled  # the rank floor is never overruled


def test_a_page_verdict_copied_to_every_document_keeps_only_the_documents_it_is_about(retriever):
    """The 1.5B's page judge writes one verdict ("Ada Lovelace", relevant) for every
    document of every page: with `grounded_relevance` only Ada's page and the rank floor
    reach S; without it (the default), the Python page too (its text names a computer)."""
    q = "Who is often called the first computer programmer?"
    copied = {"judgements": [{"explanation": "it names the programmer", "fact": "Ada Lovelace", "relevant": True}] * 2}

    def sources(**cfg: Any) -> tuple[list[str], list[str]]:
        script = Script(
            CoordinatorDecision=lambda _: coord("searcher", q),
            Query=lambda _: {"query": "first computer programmer"},
            PageJudgement=lambda _: copied,
            AnswerOutput=lambda _: {"answer": "Ada Lovelace"},
        )
        ans = run(MRAG(ScriptedLLM(fn=script), retriever, cfg), q)
        searches = [s for s in ans.trace.steps if s.agent == "searcher" and s.status != "refused"]
        kept = [d["chunk_id"] for s in searches for p in s.outputs["steps"] for d in p["docs"] if d["relevant"]]
        return kept, [h.chunk_id for h in ans.sources]

    kept, s_grounded = sources(grounded_relevance=True)
    assert kept == [ADA] and s_grounded == [ADA, GRACE]  # Grace Hopper: the first page's rank floor
    kept_off, s_off = sources()
    assert set(kept) < set(kept_off) and "computing/python-language.md#0" in s_off


def test_the_no_progress_guard_never_searches_past_the_searcher_cap_nor_for_an_off_topic_fact(retriever):
    """After two searcher runs the coordinator keeps picking the planner, which changes
    nothing: the guard steers, but not to a third search, and never with a "bridge" fact
    that has nothing to do with the question (the judge's junk)."""
    q = "Who is often called the first computer programmer?"
    picks = iter([coord("searcher", q), coord("searcher", "Ada Lovelace")])
    script = Script(
        CoordinatorDecision=lambda _: next(picks, coord("planner", "plan")),
        Query=[{"query": "first computer programmer"}, {"query": "Ada Lovelace"}],
        Judgement=lambda user: {"explanation": "yes", "fact": "Sahara desert sand dunes", "relevant": True},
        Move=lambda _: move("end"),
        Plan=lambda _: {"steps": ["look it up"]},
        AnswerOutput=lambda _: {"answer": "Ada Lovelace"},
    )
    ans = run(MRAG(ScriptedLLM(fn=script), retriever), q)
    ran = [s.agent for s in ans.trace.steps if s.agent in AGENT_NAMES and s.status != "refused"]
    assert ran.count("searcher") == 2 and ran[-1] == "finisher" and ans.answer == "Ada Lovelace"
    steers = [s.outputs for s in ans.trace.steps if s.agent == "guard"]
    assert steers and all(o["agent"] != "searcher" for o in steers)


@pytest.mark.parametrize("plan_first", [True, False])
def test_the_no_progress_steer_runs_the_planner_only_when_the_sequence_has_one(retriever, plan_first):
    """Searches used up, no plan and no response: the steer goes to the planner when the
    fixed sequence opens with it, else (`plan_first=False`) straight to the answerer."""
    from marag.strategies.mrag.state import State

    st = State("Who is often called the first computer programmer?")
    st.ran = ["searcher", "searcher"]
    with activate(Trace(question=st.question)):
        agent, _ = MRAG(ScriptedLLM(), retriever, {"plan_first": plan_first})._steer(st)
    assert agent == ("planner" if plan_first else "answerer")


def test_the_answerer_reads_what_vanilla_rag_reads_whole_and_nearest_the_question(retriever):
    """An agent that holds the documents vanilla_rag reads must not read them worse: with
    more documents in S, the first query's top two (vanilla_rag's k=2 when the query is
    the question) are shown whole and printed last, right before the request, as
    vanilla_rag's answerer shows its passages."""
    q = "Who is often called the first computer programmer?"
    script = Script(
        CoordinatorDecision=[coord("searcher", q), coord("searcher", "Grace Hopper"), coord("answerer"), coord("finisher")],
        Query=[{"query": q}, {"query": "Grace Hopper compiler"}],
        Judgement=lambda user: {"explanation": "yes", "fact": "", "relevant": True},
        Move=lambda _: move("continue"),
        AnswerOutput=lambda _: {"answer": "Ada Lovelace"},
    )
    llm = ScriptedLLM(fn=script)
    ans = run(MRAG(llm, retriever, {"question_first": False}), q)
    vanilla = retriever.search(q, 2)
    assert len(ans.sources) > 2 and [s.chunk_id for s in ans.sources[:2]] == [h.chunk_id for h in vanilla]
    prompt = next(c for c in llm.calls if c.output_model.__name__ == "AnswerOutput").messages[-1]["content"]
    blocks = prompt.split("Documents:\n\n", 1)[1].split("\n\nQuestion:", 1)[0].split("\n\n[")
    last_two = "\n\n[".join(blocks[-2:])
    for h in vanilla:  # whole, and among the two printed nearest the question
        assert " ".join(h.text.split()) in " ".join(last_two.split())


HOPPER_Q = "Which destroyer is named in honour of Grace Hopper?"


def _destroyer_run(retriever, config: dict, search_for: str, answerer_input: str = ""):
    """mRAG on HOPPER_Q with a script that searches `search_for` once (Grace Hopper's page
    judged relevant), hands the answerer `answerer_input` and finishes: the answer and
    the answerer's messages."""
    script = Script(
        CoordinatorDecision=[coord("searcher", search_for), coord("answerer", answerer_input), coord("finisher")],
        Query=lambda _: {"query": search_for},
        Judgement=judge_titles("Grace Hopper"),
        Move=lambda _: move("end"),
        AnswerOutput=lambda _: {"answer": "USS Hopper"},
        FinisherDecision=lambda _: {"finish": True, "reason": "answered"},
    )
    llm = ScriptedLLM(fn=script)
    ans = run(MRAG(llm, retriever, config), HOPPER_Q)
    return ans, next(c for c in llm.calls if c.output_model.__name__ == "AnswerOutput").messages


def test_answer_chars_the_agents_reading_s_see_each_document_near_the_question(retriever):
    """answer_chars=N (ours): each document of S reaches the answerer as its excerpt for
    the question and S's findings within N characters: the line about the destroyer near
    the end of Grace Hopper's page stays, her work on the Harvard Mark I does not; without
    it (and in the paper's mode) the page is whole."""
    shown = {}
    for config in ({}, {"answer_chars": 200}, {"answer_chars": 200, "paper": True}):
        ans, messages = _destroyer_run(retriever, config, HOPPER_Q)
        assert ans.answer == "USS Hopper" and GRACE in [s.chunk_id for s in ans.sources], config
        shown[str(config)] = " ".join(messages[-1]["content"].split())
    assert "USS Hopper is named in her honour" in shown["{'answer_chars': 200}"]
    assert "Harvard Mark I" not in shown["{'answer_chars': 200}"]
    assert "Harvard Mark I" in shown["{}"] and "Harvard Mark I" in shown["{'answer_chars': 200, 'paper': True}"]


@pytest.mark.parametrize("config", [{}, {"answer_guidance": True}, {"paper": True}])
def test_the_answerer_reads_the_question_not_the_coordinators_claim(retriever, config):
    """By default (`answer_guidance=False`) the answerer's prompt holds the question and
    S, not what the coordinator wrote to it (a small model's coordinator passes on a
    judge's invented claim); with `answer_guidance` and in the paper's mode it does. The
    searcher still runs on its input in every mode."""
    claim = "Grace Hopper served on the USS Enterprise."
    ans, messages = _destroyer_run(retriever, config, "Grace Hopper destroyer", claim)
    assert ans.answer == "USS Hopper"
    prompt = " ".join(m["content"] for m in messages)
    assert HOPPER_Q in prompt and "Grace Hopper" in prompt  # the question and S
    assert (claim.rstrip(".") in prompt) == bool(config), config
    searched = next(s for s in ans.trace.steps if s.agent == "searcher").inputs
    assert "Grace Hopper destroyer" in str(searched)


@pytest.mark.parametrize("next_move", ["rule", "model"])
def test_by_rule_the_searcher_reads_on_while_pages_add_documents_with_no_move_call(retriever, next_move):
    """`next_move="rule"` (the default): no next-move call; the same query's next page
    while a page adds relevant documents, then (a page added nothing) the question
    itself. The model's "continue" after the page that added nothing ends the query."""
    q = "Who is often called the first computer programmer?"
    script = Script(
        CoordinatorDecision=[coord("searcher", "the first programmer"), coord("answerer"), coord("finisher")],
        Query=[{"query": "first computer programmer"}],
        Judgement=judge_titles("Ada Lovelace"),
        Move=lambda _: move("continue", reason="still finding"),
        AnswerOutput=[{"answer": "Ada Lovelace"}],
    )
    # three pages, so that the page after the dry one can be shown
    cfg = {"next_move": next_move, "keep_top_ranked": 0, "linked_docs": 0, "searcher_max_steps": 3, "question_first": False}
    ans = run(MRAG(ScriptedLLM(fn=script), retriever, cfg), q)
    pages = next(s for s in ans.trace.steps if s.agent == "searcher").outputs["steps"]
    first = [("first computer programmer", 0, "continue")]
    if next_move == "rule":
        assert [(p["query"], p["offset"], p["action"]) for p in pages] == [
            *first, ("first computer programmer", 2, "change"), (q, 0, "end")
        ]
        assert pages[1]["reason"] == "rule: the page added nothing; the question itself" and pages[2]["forced"] == "max_steps"
    else:
        assert [(p["query"], p["offset"], p["action"]) for p in pages] == [*first, ("first computer programmer", 2, "end")]
        assert pages[1]["forced"] == "page_added_nothing"
    assert script.calls.get("Move", 0) == (0 if next_move == "rule" else 2)
    assert sum(s.agent == "searcher.next" for s in ans.trace.steps) == script.calls.get("Move", 0)
    assert [s.chunk_id for s in ans.sources] == [ADA] and ans.answer == "Ada Lovelace"


def test_hop_moves_to_a_query_for_the_entity_the_first_page_gives(retriever):
    """`next_move="hop"`: after the first page, one `searcher.hop` call reads the page's
    relevant documents and names the entity the question depends on; its query runs next
    (led by the entity's name when the model left it out; the name alone when the query
    only copies the question), and the rule decides the moves after it. An entity the
    question already names, none, or one the documents do not name is no hop: the rule's
    move stands."""
    q = "Whose engine did the first computer programmer write about?"
    for hop, second in (
        ({"entity": "Charles Babbage", "query": "Analytical Engine designer"}, "Charles Babbage Analytical Engine designer"),
        ({"entity": "Charles Babbage", "query": "Charles Babbage Difference Engine"}, "Charles Babbage Difference Engine"),
        ({"entity": "Charles Babbage", "query": q}, "Charles Babbage"),  # the question copied: the entity alone
        ({"entity": "", "query": ""}, None),
        ({"entity": "Alan Turing", "query": "Alan Turing engine"}, None),  # not in the documents read
        ({"entity": "the first computer programmer", "query": "engine"}, None),
    ):
        script = Script(
            CoordinatorDecision=[coord("searcher", q), coord("answerer"), coord("finisher")],
            Query=[{"query": "Ada Lovelace programmer"}],
            Hop=[hop],
            Judgement=judge_titles("Ada Lovelace"),
            AnswerOutput=[{"answer": "Charles Babbage"}],
        )
        llm = ScriptedLLM(fn=script)
        ans = run(MRAG(llm, retriever, {"next_move": "hop", "keep_top_ranked": 0, "linked_docs": 0, "doc_chars": None, "question_first": False}), q)
        pages = next(s for s in ans.trace.steps if s.agent == "searcher").outputs["steps"]
        hop_call = next(c for c in llm.calls if c.output_model.__name__ == "Hop")
        assert "Documents found:\n[1] Ada Lovelace" in hop_call.messages[-1]["content"]
        assert script.calls["Hop"] == 1 and script.calls.get("Move", 0) == 0
        assert pages[0]["query"] == "Ada Lovelace programmer"
        if second:
            assert (pages[0]["action"], pages[0]["reason"]) == ("change", "rule: the next hop, from the first page")
            assert pages[1]["query"] == second
        else:  # no hop: the rule read on (the page added Ada's article)
            assert (pages[0]["action"], pages[1]["query"]) == ("continue", "Ada Lovelace programmer")
    # the paper's moves and the plain rule never call the hop role
    for cfg in ({"next_move": "rule"}, {"paper": True}):
        script = Script(
            CoordinatorDecision=[coord("searcher", q), coord("answerer"), coord("finisher")],
            Query=lambda _: {"query": "Ada Lovelace programmer"},
            Judgement=judge_titles("Ada Lovelace"),
            Move=lambda _: move("end"),
            AnswerOutput=lambda _: {"answer": "Charles Babbage"},
            FinisherDecision=lambda _: {"finish": True, "reason": "answered"},
        )
        run(MRAG(ScriptedLLM(fn=script), retriever, cfg), q)
        assert "Hop" not in script.calls, cfg


def test_the_first_search_is_the_question_and_the_query_writers_follows(retriever):
    """`question_first` (the default): the question's first searcher run reads the
    question's own first page (what a retrieve-then-read baseline reads; the rank floor
    keeps its top hits), then the query writer's query; a later searcher run opens with
    the writer's query. Off (and in the paper's mode), the writer's query comes first."""
    q = "Who is often called the first computer programmer?"

    def script() -> Script:
        return Script(
            CoordinatorDecision=[coord("searcher", q), coord("searcher", "her notes"), coord("answerer"), coord("finisher")],
            Query=[{"query": "first programmer Analytical Engine"}, {"query": "Lovelace notes Babbage"}],
            Judgement=judge_titles("Ada Lovelace"),
            AnswerOutput=lambda _: {"answer": "Ada Lovelace"},
        )

    first = script()
    ans = run(MRAG(ScriptedLLM(fn=first), retriever, {"linked_docs": 0}), q)
    runs = [[(p["query"], p["action"]) for p in s.outputs["steps"]] for s in ans.trace.steps if s.agent == "searcher"]
    assert runs[0] == [(q, "change"), ("first programmer Analytical Engine", "end")]
    assert next(s for s in ans.trace.steps if s.agent == "searcher").outputs["steps"][0]["reason"] == (
        "rule: the query writer's query, after the question's page"
    )
    assert runs[1][0][0] == "Lovelace notes Babbage" and first.calls["Query"] == 2  # one writer call a run
    top = [h.chunk_id for h in retriever.search(q, 2)]
    assert [s.chunk_id for s in ans.sources][:2] == top  # the question's top two, kept by the rank floor
    kept = next(s for s in ans.trace.steps if s.agent == "searcher").outputs["relevant"]
    assert [(j["chunk_id"], j["by_rank"]) for j in kept[:2]] == [(top[0], top[0] != ADA), (top[1], top[1] != ADA)]
    assert set(top) - {ADA}  # the floor kept a page the judge did not call relevant
    off = run(MRAG(ScriptedLLM(fn=script()), retriever, {"linked_docs": 0, "question_first": False}), q)
    pages = next(s for s in off.trace.steps if s.agent == "searcher").outputs["steps"]
    assert pages[0]["query"] == "first programmer Analytical Engine"
    # a writer that repeats the question after its page is not asked again (the 1.5B's
    # retry repeated it every time); its fallback, the coordinator's input (here the
    # question again, then a near-repeat of it), is no new query either: the rule reads
    # the question's next page instead
    for said in (q, q.rstrip("?")):
        echo = Script(
            CoordinatorDecision=[coord("searcher", said), coord("answerer"), coord("finisher")],
            Query=lambda _: {"query": q},
            Judgement=judge_titles("Ada Lovelace"),
            AnswerOutput=lambda _: {"answer": "Ada Lovelace"},
        )
        ans = run(MRAG(ScriptedLLM(fn=echo), retriever, {"linked_docs": 0}), q)
        pages = next(s for s in ans.trace.steps if s.agent == "searcher").outputs["steps"]
        assert echo.calls["Query"] == 1 and [(p["query"], p["offset"]) for p in pages] == [(q, 0), (q, 2)], said
    assert MRAGConfig(paper=True).question_first is False
