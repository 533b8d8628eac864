"""What makes every agent strategy cheaper by construction: prompts laid out for prefix
reuse, compact structured output, short repairs, and hard per-question budgets."""

from __future__ import annotations

import asyncio
import json

import pytest
from judging import judge_page
from pydantic import BaseModel, Field

from marag.agents.mrag import AGENT_NAMES
from marag.index.pipeline import index_corpus
from marag.index.store import IndexConfig
from marag.errors import StructuredOutputError
from marag.llm import Message, ScriptedLLM
from marag.llm.budget import Budget, BudgetExhausted, activate_budget
from marag.llm.chat import outline
from marag.llm.llamacpp import json_grammar
from marag.llm.schema import output_schema
from marag.strategies import make_strategy
from marag.strategies.mrag import MRAG


@pytest.fixture(scope="module")
def retriever(tmp_path_factory, repo):
    out = tmp_path_factory.mktemp("idx") / "sample"
    cfg = IndexConfig(retrievers=["bm25"])
    return index_corpus(repo / "samples" / "corpus", out, cfg, progress=False).retriever("bm25")


def chatty(messages, output):
    """A model that plays every mRAG role: searches, answers, validates, finishes."""
    name = output.__name__
    user = messages[-1]["content"]
    if name == "CoordinatorDecision":
        done = user.count("\n1. ") + sum(user.count(f"\n{i}. ") for i in range(2, 10))
        order = ["planner", "searcher", "summarizer", "answerer", "validator", "finisher"]
        return {"agent": order[min(done, len(order) - 1)], "input": "", "reason": "in order"}
    replies = {
        "Plan": {"steps": ["find who created Python", "answer"]},
        "Query": {"query": "Python programming language creator"},
        "Judgement": {"explanation": "names the creator", "fact": "Guido van Rossum", "relevant": "Python" in user},
        "Move": {"action": "end", "new_query": "", "reason": "found"},
        "Summary": {"summary": "Guido van Rossum created Python."},
        "AnswerOutput": {"answer": "Guido van Rossum"},
        "Validation": {
            "criteria": ["names a person"],
            "valid": {"ok": True, "feedback": "ok"},
            "grounded": {"ok": True, "feedback": "ok"},
            "correct": {"ok": True, "feedback": "ok"},
        },
    }
    if name == "PageJudgement":  # one judgement per document of the page
        return judge_page(lambda doc: replies["Judgement"] | {"relevant": "Python" in doc}, user)
    return replies[name]


def test_prompts_keep_a_stable_prefix_across_a_questions_calls(retriever):
    llm = ScriptedLLM(fn=chatty)
    ans = asyncio.run(MRAG(llm, retriever, {"finish_on_answer": False}).run("Who created Python?"))  # every role
    assert [s.agent for s in ans.trace.steps if s.agent in AGENT_NAMES] == [
        "planner", "searcher", "summarizer", "answerer", "validator", "finisher",
    ]  # fmt: skip
    # every call of the question, whatever its role, starts its user message with the
    # question; calls of one role share their system prompt
    assert all(c.messages[1]["content"].startswith("Question: Who created Python?\n") for c in llm.calls)
    by_role: dict[str, set[str]] = {}
    for c in llm.calls:
        by_role.setdefault(c.output_model.__name__, set()).add(c.messages[0]["content"])
    assert all(len(v) == 1 for k, v in by_role.items() if k != "CoordinatorDecision")
    # coordinator turns: the user message is byte-identical up to the end of the
    # previous turn's history (the history only grows)
    turns = [c.messages[1]["content"] for c in llm.calls if c.output_model.__name__ == "CoordinatorDecision"]
    assert len(turns) == 6
    for before, after in zip(turns, turns[1:]):
        start = before.index("Done so far:\n") + len("Done so far:\n")
        history = before[start : before.index("Documents found:")].removeprefix("(nothing yet)\n")
        assert after.startswith(before[:start] + history)
    # the system prompt changes only when the hint does (a few times per question)
    systems = [c.messages[0]["content"] for c in llm.calls if c.output_model.__name__ == "CoordinatorDecision"]
    assert len(set(systems)) <= 4
    # readers (summarizer, answerer, validator) share everything up to the end of S
    readers = [c.messages[1]["content"] for c in llm.calls if c.output_model.__name__ in ("Summary", "AnswerOutput", "Validation")]
    docs_end = readers[0].index("Centrum Wiskunde")
    assert len({r[:docs_end] for r in readers}) == 1


def test_json_layouts_fix_the_whitespace():
    class Out(BaseModel):
        answer: str = Field(max_length=20)
        ok: bool

    grammar = json_grammar(output_schema(Out), "compact")
    head, _, schema = grammar.partition("start: %json ")
    assert head.startswith("%llguidance")
    parsed = json.loads(schema)
    assert parsed["x-guidance"] == {"whitespace_flexible": False}
    assert parsed["properties"]["answer"]["maxLength"] == 20
    spaced = json.loads(json_grammar(output_schema(Out)).partition("start: %json ")[2])["x-guidance"]
    assert spaced == {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "}
    with pytest.raises(ValueError):
        json_grammar(output_schema(Out), "free")  # sent as response_format instead


def test_repair_sends_an_outline_not_the_schema():
    class Out(BaseModel):
        agent: str = Field(max_length=10)
        n: list[bool] = Field(max_length=2)

    schema = output_schema(Out)
    assert outline(schema) == '{"agent": string(<=10), "n": [true|false, ...](<=2)}'
    llm = ScriptedLLM(["not json", {"agent": "a", "n": [True]}])
    r = asyncio.run(llm.generate([Message(role="user", content="go")], output=Out))
    repair = llm.calls[1].messages[-1]["content"]
    assert r.parsed.agent == "a" and outline(schema) in repair and '"additionalProperties"' not in repair
    assert len(repair) < 250


# -- hard budgets ---------------------------------------------------------------------------


def test_budget_counts_and_stops():
    b = Budget(max_llm_calls=2, max_tokens=None, deadline_s=None)
    b.charge(10, 5)
    assert b.spent() is None
    b.charge(10, 5)
    assert b.spent() == "llm_calls" and b.tokens == 30
    with pytest.raises(BudgetExhausted, match="llm_calls limit 2"):
        b.check()
    with b.grace():
        b.check()  # the final answer may still be written
    assert Budget(max_tokens=100, tokens=100).spent() == "tokens"
    assert Budget(deadline_s=1e-9).spent() == "deadline"


def test_a_call_past_the_budget_is_skipped_not_made():
    llm = ScriptedLLM(fn=lambda m, o: "hi")

    async def go():
        with activate_budget(Budget(max_llm_calls=1)):
            await llm.generate([Message(role="user", content="a")])
            await llm.generate([Message(role="user", content="b")])

    with pytest.raises(BudgetExhausted):
        asyncio.run(go())
    assert len(llm.calls) == 1


class _SlowLLM(ScriptedLLM):
    """Yields to the event loop inside each call, as a real round trip does."""

    async def _complete(self, *args):
        await asyncio.sleep(0.01)
        return await super()._complete(*args)


@pytest.mark.parametrize(("limits", "made"), [({"max_llm_calls": 2}, 2), ({"max_tokens": 12}, 1)])
def test_calls_at_once_count_against_the_budget_while_in_flight(limits, made):
    # before: all six passed the check before the first was charged, so the budget
    # overshot by all of them; now a call in flight holds its call and its tokens
    llm = _SlowLLM(fn=lambda m, o: "one two three")
    budget = Budget(**limits)

    async def six():
        with activate_budget(budget):
            msg = [Message(role="user", content="four words of prompt")]
            return await asyncio.gather(*(llm.generate(msg, max_tokens=8) for _ in range(6)), return_exceptions=True)

    results = asyncio.run(six())
    assert len(llm.calls) == made and budget.calls == made
    assert sum(isinstance(r, BudgetExhausted) for r in results) == 6 - made
    assert budget.stopped_by == next(iter(limits)).removeprefix("max_")


def test_a_repair_is_made_only_while_the_budget_has_room_for_it():
    # the repair round trip resends the whole prompt: unchecked, one call spent twice
    # its share (mRAG paper mode with SmolLM2 passed its token limit by 4,144 that way)
    class Reply(BaseModel):
        answer: str

    def run(budget):
        llm = ScriptedLLM(["not json at all", {"answer": "ok"}])

        async def go():
            with activate_budget(budget):
                return await llm.generate([Message(role="user", content="word " * 40)], output=Reply, max_tokens=8)

        try:
            return asyncio.run(go()).parsed, len(llm.calls)
        except StructuredOutputError as e:
            return e, len(llm.calls)

    assert run(Budget(max_tokens=10_000)) == (Reply(answer="ok"), 2)
    tight, calls = run(Budget(max_tokens=80))  # room for the call, not for its repair
    assert calls == 1 and "no room for a repair" in str(tight) and not isinstance(tight, BudgetExhausted)


@pytest.mark.parametrize(
    ("limits", "reason"),
    [({"max_llm_calls": 4}, "llm_calls"), ({"max_tokens": 300}, "tokens"), ({"deadline_s": 1e-6}, "deadline")],
)
def test_mrag_stops_on_its_budget_and_answers_from_what_it_has(retriever, limits, reason):
    def looping(messages, output):  # a coordinator that never finishes
        if output.__name__ == "CoordinatorDecision":
            return {"agent": "searcher", "input": "Python", "reason": "more"}
        return chatty(messages, output)

    llm = ScriptedLLM(fn=looping)
    ans = asyncio.run(MRAG(llm, retriever, limits).run("Who created Python?"))
    assert ans.trace.budget["stopped_by"] == reason and ans.usage["stopped_by_budget"] == 1.0
    # past the limit, only the final answer's call was let through
    if reason == "llm_calls":
        assert ans.usage["llm_calls"] == limits["max_llm_calls"] + 1
    assert ans.answer == "Guido van Rossum" and ans.usage["answered_after_budget"] == 1.0
    assert len(llm.calls) == ans.usage["llm_calls"]


def test_every_strategy_has_the_budget_fields(retriever):
    s = make_strategy("vanilla_rag", ScriptedLLM(fn=chatty), retriever, {"max_llm_calls": 3, "deadline_s": None})
    assert (s.config.max_llm_calls, s.config.max_tokens, s.config.deadline_s) == (3, 60_000, None)
    ans = asyncio.run(s.run("Who created Python?"))
    assert ans.trace.budget == {
        "max_llm_calls": 3,
        "max_tokens": 60_000,
        "deadline_s": None,
        "llm_calls": 1,
        "tokens": ans.usage["prompt_tokens"] + ans.usage["completion_tokens"],
        "stopped_by": None,
    }


def test_judge_pages_makes_one_call_per_page(retriever):
    def pages(messages, output):
        if output.__name__ == "PageJudgement":
            return {"judgements": [{"explanation": "x", "fact": "Guido", "relevant": True}] * 2}
        return chatty(messages, output)

    llm = ScriptedLLM(fn=pages)
    ans = asyncio.run(MRAG(llm, retriever, {"judge_pages": True, "next_move": "model"}).run("Who created Python?"))
    names = [c.output_model.__name__ for c in llm.calls]
    assert names.count("PageJudgement") == 1 and "Judgement" not in names
    assert len(ans.sources) == 2


def test_busy_seconds_counts_overlapping_calls_once():
    from marag.trace import LLMCall, SearchCall, Step, Trace, busy_seconds

    t = Trace(steps=[
        Step(agent="a", llm_calls=[LLMCall(model="m", messages=[], response="", started=100.0, latency_s=2.0),
                                   LLMCall(model="m", messages=[], response="", started=101.0, latency_s=2.0)]),
        Step(agent="b", searches=[SearchCall(retriever="r", query="q", k=1, started=105.0, latency_s=0.5)]),
    ])  # fmt: skip
    assert busy_seconds(t) == pytest.approx(3.5)  # [100, 103] and [105, 105.5]
