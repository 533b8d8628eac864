"""`auto`: one read, a router learned from runs, an agent only where the router doubts
the read. The router file (round trip, refusals), the knob (monotone in cost), the
route step, the agent continuing from the first pass, training on planted runs and the
quality-cost chart, with scripted models over real BM25 indexes."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import numpy as np
import pytest

from marag.errors import MaragError
from marag.eval.datasets import load_dataset
from marag.eval.quality_cost import Outcome, knee, knob_curve, oracle
from marag.eval.runner import EvalConfig, run_eval
from marag.index.store import IndexConfig
from marag.llm import ScriptedLLM
from marag.strategies import make_strategy
from marag.strategies.auto.router import ROUTER_FORMAT, Router, RouterFile
from marag.strategies.auto.signals import SIGNALS, answer_logprobs, first_pass_signals, from_trace
from marag.trace import TokenLogprob
from marag.train.router import examples
from twohop import DOCS, QUESTION, bm25_retriever

# p(right) rises with the reader's confidence and with an answer found in a passage;
# the quantiles are 0..1, so a share of questions sent on is the score threshold itself
ROUTER = {"format": ROUTER_FORMAT, "features": ["lp_mean", "in_passages"], "mean": [-1.0, 0.5], "scale": [1.0, 0.5],
          "weights": [2.0, 1.0], "intercept": 0.0, "quantiles": np.linspace(0, 1, 101).tolist(), "escalate_default": 0.5,
          "model": "scripted"}  # fmt: skip
# the reader's log-probability for each answer it may give ("Maren Holt" is in the
# passages the question's search finds, the others are not)
CONFIDENCE = {"Maren Holt": -0.01, "Brekke": -0.4, "Norway": -1.5, "Oslo": -3.0}


def router_file(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "router.json"
    path.write_text(json.dumps({**ROUTER, **changes}))
    return path


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    return bm25_retriever(tmp_path_factory.mktemp("twohop"), DOCS)


def reader(first: str | dict[str, str], planner: dict | None = None) -> ScriptedLLM:
    """The first pass answers `first` (or by question), unirag's planner answers at
    once, its final read says Brekke when the passages hold it; each answer's tokens
    carry `CONFIDENCE`."""
    def fn(messages, output):
        user = messages[1]["content"]  # (a recheck's note is the last message; the question is in the first)
        if output.__name__ == "PlanStep":
            return planner or {"thought": "the evidence names it", "action": "final_answer", "query": ""}
        if output.__name__ == "Reflection":
            return {"found": False, "evidence": []}
        question = user.split("Question: ")[-1].split("\n")[0]
        if "Working memory" in user or fn.first_done.get(question):  # unirag's final read
            return {"answer": "Brekke" if "Brekke" in user else "unknown"}
        fn.first_done[question] = True
        return {"answer": first if isinstance(first, str) else first[question]}

    fn.first_done = {}

    def logprob(reply: str) -> float:
        return next((v for k, v in CONFIDENCE.items() if k in reply), -1.0)

    return ScriptedLLM(fn=fn, logprob=logprob)


def auto(llm, retriever, tmp_path, **config):
    return make_strategy("auto", llm, retriever, {"router": str(router_file(tmp_path)), **config})


def steps(answer) -> list[str]:
    return [s.agent for s in answer.trace.steps]


def searched(answer, query: str) -> int:
    """Searches for `query` (not counting the linked documents' lookup among named pages)."""
    return sum(c.query == query and "linked" not in c.retriever for c in answer.trace.searches())


def test_a_sure_first_answer_is_kept_with_one_call(retriever, tmp_path):
    ans = asyncio.run(auto(reader("Maren Holt"), retriever, tmp_path).run(QUESTION))
    route = next(s for s in ans.trace.steps if s.agent == "route")
    assert ans.answer == "Maren Holt" and ans.usage["llm_calls"] == 1
    assert route.outputs["decision"] == "first_pass" and route.outputs["score"] > 0.9
    assert route.outputs["signals"]["in_passages"] == 1.0 and route.outputs["signals"]["lp_mean"] == pytest.approx(-0.01)
    assert ans.details["path"] == "first_pass" and ans.usage["escalated"] == 0.0
    assert "planner" not in steps(ans)


def test_a_doubtful_answer_goes_to_the_agent_which_continues_from_the_read(retriever, tmp_path):
    ans = asyncio.run(auto(reader("Oslo"), retriever, tmp_path).run(QUESTION))
    route = next(s for s in ans.trace.steps if s.agent == "route")
    assert route.outputs["decision"] == "unirag" and route.outputs["score"] < 0.01
    assert route.outputs["first_answer"] == "Oslo" and set(route.outputs["signals"]) == set(SIGNALS)
    assert "lp_mean" in route.outputs["why"]  # the largest parts of the decision
    # the first pass's passages are the agent's first search: not searched nor read again
    assert steps(ans)[:4] == ["search", "answerer", "route", "first_pass"]
    assert "reflector" not in steps(ans) and searched(ans, QUESTION) == 1
    planner = next(s for s in ans.trace.steps if s.agent == "planner")
    assert "grew up in Brekke" in planner.llm_calls[0].messages[-1]["content"]  # the read passages are its memory
    assert ans.answer == "Brekke" and ans.details["path"] == "unirag" and ans.usage["escalated"] == 1.0
    assert ans.details["first_answer"] == "Oslo"


def test_the_agent_can_start_over_instead(retriever, tmp_path):
    ans = asyncio.run(auto(reader("Oslo"), retriever, tmp_path, start_from_first=False).run(QUESTION))
    assert "first_pass" not in steps(ans) and searched(ans, QUESTION) == 2  # its own search for the question


def test_the_agents_calls_carry_its_own_role_names(retriever, tmp_path):
    from marag.trace import current_role

    seen = []
    base = reader("Oslo")
    original = base._complete

    async def spy(*args, **kwargs):
        seen.append(current_role())
        return await original(*args, **kwargs)

    base._complete = spy
    asyncio.run(auto(base, retriever, tmp_path).run(QUESTION))
    assert seen[0] == "auto.answerer" and "unirag.planner" in seen and seen[-1] == "unirag.final_answer"


def test_the_knob_is_monotone_in_cost(retriever, tmp_path):
    questions = [QUESTION, "Where did the author of Salt Winter grow up?", "In which village was Maren Holt raised?",
                 "Which country was the printer Maren Holt from?"]  # fmt: skip
    first = dict(zip(questions, ["Maren Holt", "Brekke", "Norway", "Oslo"]))
    escalated, calls = [], []
    for share in (0.0, 0.25, 0.5, 0.75, 1.0):
        strategy = auto(reader(first), retriever, tmp_path, escalate=share)
        answers = [asyncio.run(strategy.run(q)) for q in questions]
        escalated.append(sum(a.usage["escalated"] for a in answers))
        calls.append(sum(a.usage["llm_calls"] for a in answers))
    assert escalated[0] == 0 and escalated[-1] == len(questions)
    assert escalated == sorted(escalated) and calls == sorted(calls) and len(set(escalated)) >= 3


def test_router_file_round_trip(tmp_path):
    router = Router.load(router_file(tmp_path))
    signals = {"lp_mean": -0.5, "in_passages": 1.0, "q_words": 3.0}  # signals it does not use are ignored
    z = np.array([(-0.5 + 1.0) / 1.0, (1.0 - 0.5) / 0.5])
    assert router.score(signals) == pytest.approx(1 / (1 + math.exp(-(2.0 * z[0] + 1.0 * z[1]))))
    assert router.score({}) == pytest.approx(0.5)  # every signal missing: the training means
    assert router.threshold(0.0) == -math.inf and router.threshold(1.0) == math.inf and router.threshold(0.3) == pytest.approx(0.3)
    again = RouterFile.model_validate_json(json.dumps(router.spec.model_dump(mode="json")))
    assert again == router.spec


@pytest.mark.parametrize(
    "content, says",
    [
        ("not json {", "not a JSON router file"),
        (json.dumps({**ROUTER, "format": "pickle"}), "format"),
        (json.dumps({**ROUTER, "weights": [1.0]}), "weights has 1 values for 2 features"),
        (json.dumps({**ROUTER, "scale": [1.0, 0.0]}), "scale must be positive"),
        (json.dumps({**ROUTER, "code": "import os"}), "code"),
        (json.dumps({**ROUTER, "quantiles": [0.9, 0.1]}), "quantiles must not decrease"),
        ('{"format": "marag-router/1", "features": ["lp_mean"], "mean": [NaN], "scale": [1], "weights": [1], '
         '"intercept": 0, "quantiles": [0, 1], "escalate_default": 0.5}', "finite"),  # fmt: skip
    ],
)
def test_a_malformed_router_file_is_refused_in_one_line(tmp_path, content, says):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(MaragError) as e:
        Router.load(path)
    assert says in e.value.message and "\n" not in e.value.message and "marag train router" in e.value.hint


def test_a_missing_or_huge_router_file_is_refused(tmp_path):
    with pytest.raises(MaragError, match="not found"):
        Router.load(tmp_path / "none.json")
    big = tmp_path / "big.json"
    big.write_text(" " * 1_000_001)
    with pytest.raises(MaragError, match="too large"):
        Router.load(big)


def test_unknown_agent_and_bad_agent_settings_are_one_line_errors(retriever):
    with pytest.raises(MaragError) as e:
        make_strategy("auto", ScriptedLLM(), retriever, {"agent": "unirga"})
    assert "unknown agent 'unirga'" in e.value.message and "unirag" in e.value.message
    with pytest.raises(MaragError) as e:
        make_strategy("auto", ScriptedLLM(), retriever, {"agent_settings": {"k": 0}})
    assert "agent_settings" in e.value.message
    with pytest.raises(MaragError):
        make_strategy("auto", ScriptedLLM(), retriever, {"agent": "auto"})


def test_answer_logprobs_are_the_value_tokens():
    tokens = [TokenLogprob(token=t, logprob=lp) for t, lp in
              [('{"', -0.1), ("answer", -0.1), ('":', -0.1), (' "', -0.2), ("Ada", -0.5), (" Love", -1.5), ("lace", -0.3), ('"}', -0.1)]]  # fmt: skip
    assert [t.token for t in answer_logprobs(tokens)] == ["Ada", " Love", "lace"]
    assert answer_logprobs(tokens[:3]) == []


def test_signals_read_back_from_a_trace_equal_the_live_ones(retriever, tmp_path):
    live = asyncio.run(auto(reader("Winter Olympics"), retriever, tmp_path, escalate=0.0).run(QUESTION))
    read = asyncio.run(make_strategy("vanilla_rag_k5", reader("Winter Olympics"), retriever).run(QUESTION))
    signals = first_pass_signals(from_trace(read.trace))
    route = next(s for s in live.trace.steps if s.agent == "route").outputs["signals"]
    assert {k: round(v, 4) if math.isfinite(v) else None for k, v in signals.items()} == route
    assert signals["is_title"] == 1.0 and signals["in_passages"] == 1.0  # the answer is a page's title


def test_knob_curve_oracle_and_knee():
    first = {"a": Outcome(1.0, 1.0), "b": Outcome(0.0, 1.0), "c": Outcome(0.0, 1.0), "d": Outcome(1.0, 1.0)}
    agent = {"a": Outcome(0.0, 10.0), "b": Outcome(1.0, 10.0), "c": Outcome(0.0, 10.0), "d": Outcome(1.0, 10.0)}
    scores = {"a": 0.9, "b": 0.1, "c": 0.2, "d": 0.8}
    curve = knob_curve(first, agent, scores)
    assert [round(p.quality, 2) for p in curve] == [0.5, 0.75, 0.75, 0.75, 0.5]
    assert [p.seconds for p in curve] == sorted(p.seconds for p in curve)  # more sent on, never cheaper
    assert knee(curve).escalated == 0.25  # b alone: all the gain for a quarter of the cost
    best = oracle(first, agent)
    assert best.quality == 0.75 and best.escalated == 0.25


def planted_llm(ds):
    """The first pass is right (and sure) on even-numbered questions, wrong (and unsure)
    on the others; the closed-book agent always knows the answer."""
    index = {q.question: i for i, q in enumerate(ds.questions)}
    gold = {q.question: q.answers[0] for q in ds.questions}

    def fn(messages, output):
        user = messages[1]["content"]  # (a recheck's note is the last message; the question is in the first)
        question = user.split("Question: ")[-1].split("\n")[0]
        if "own knowledge" in messages[0]["content"]:
            return {"answer": gold[question]}
        return {"answer": gold[question] if index[question] % 2 == 0 else "Nobody at all"}

    return ScriptedLLM(fn=fn, logprob=lambda reply: -3.0 if "Nobody" in reply else -0.05)


def test_a_router_trained_on_planted_runs_learns_their_labels(data_dir, tmp_path, marag):
    ds = load_dataset("hotpotqa_train100", data_dir)
    cfg = EvalConfig(dataset="hotpotqa_train100", strategies=["vanilla_rag_k5", "llm_only"], limit=24,
                     index=IndexConfig(retrievers=["bm25"]), concurrency=4)  # fmt: skip
    run_dir = tmp_path / "runs" / "planted"
    asyncio.run(run_eval(cfg, run_dir, dataset=ds, llm=planted_llm(ds), index_cache=tmp_path / "ix", progress=False))
    out = tmp_path / "router.json"
    png = tmp_path / "charts" / "fit.png"
    code, stdout, err = marag("train", "router", str(run_dir), "--out", str(out), "--agent", "llm_only", "--chart", str(png))
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"chart: {png}" in stdout
    spec = json.loads(out.read_text())
    weights = dict(zip(spec["features"], spec["weights"]))
    assert weights["lp_mean"] > 0  # a surer reader is more often right
    assert spec["auroc"]["cross_validated"] >= 0.95 and spec["auroc"]["examples"] == 24 and spec["auroc"]["right"] == 12
    assert spec["trained_on"][0]["run"] == "planted" and spec["trained_on"][0]["questions"] == 24
    # the agent fixes exactly the wrong half, so the knee sends about that half on
    assert 0.4 <= spec["escalate_default"] <= 0.6
    assert "router AUROC" in stdout and "oracle router" in stdout and "knee:" in stdout
    router = Router.load(out)  # what it wrote, read back as a router
    assert router.features == spec["features"]
    code, stdout, err = marag("train", "router", str(run_dir), "--check", str(out))
    assert code == 0 and "router AUROC 1.000" in stdout


def test_the_agents_answers_may_come_from_another_run_and_a_question_counts_once(data_dir, tmp_path):
    ds = load_dataset("hotpotqa_train100", data_dir)
    llm = planted_llm(ds)

    def run(name, strategies, limit):
        cfg = EvalConfig(dataset="hotpotqa_train100", strategies=strategies, limit=limit,
                         index=IndexConfig(retrievers=["bm25"]), concurrency=4)  # fmt: skip
        asyncio.run(run_eval(cfg, tmp_path / name, dataset=ds, llm=llm, index_cache=tmp_path / "ix", progress=False))
        return tmp_path / name

    first, again, agent = run("first", ["vanilla_rag_k5"], 6), run("again", ["vanilla_rag_k5"], 4), run("agent", ["llm_only"], 4)
    exs, runs = examples([first, again, agent], agent="llm_only")
    assert len(exs) == 6 and {ex.run for ex in exs} == {"first"}  # the second run's four questions were already counted
    assert [r["questions"] for r in runs] == [6, 0, 0]
    with_agent = [ex for ex in exs if ex.agent is not None]
    assert len(with_agent) == 4 and all(ex.agent.quality == 1.0 for ex in with_agent)  # the closed-book agent knows


def test_router_training_refuses_runs_without_first_pass_answers(tmp_path, marag, cli_index, repo):
    code, _, _ = marag("eval", str(repo / "samples/questions.jsonl"), "--index", str(cli_index), "--strategies", "llm_only",
                       "--llm", "scripted", "--runs", str(tmp_path / "runs"), "--run-id", "closed", "-q")  # fmt: skip
    assert code == 0
    code, _, err = marag("train", "router", str(tmp_path / "runs" / "closed"))
    assert code != 0 and "no answers of vanilla_rag_k5" in err


def test_the_quality_cost_chart_is_written_for_a_run_with_auto(tmp_path, marag, cli_index, repo):
    router = router_file(tmp_path)
    code, _, err = marag("eval", str(repo / "samples/questions.jsonl"), "--index", str(cli_index), "--strategies",
                         "vanilla_rag_k5,unirag,auto", "--llm", "scripted", "--set", f"auto.router={router}",
                         "--runs", str(tmp_path / "runs"), "--run-id", "r", "-q")  # fmt: skip
    assert code == 0, err
    run = tmp_path / "runs" / "r"
    report = (run / "report.md").read_text()
    assert "## Quality and cost" in report and "auto's knob" in report and "Oracle router" in report
    assert "| auto |" in report and "evaluated prompt tok/q" in report
    assert (run / "quality_cost.png").stat().st_size > 5000


def sentence_reader(recheck_fails: bool = False) -> ScriptedLLM:
    """A first reader that writes a sentence, writes it again when told to shorten it
    (or, `recheck_fails`, writes nothing usable twice), and a span reader that cuts it
    to the name: the answer that stands is the span, not the reader's reply."""
    sentence = "The novel Salt Winter was written by the printer Maren Holt in 1931."

    def fn(messages, output):
        if output.__name__ == "Span":
            return {"answer": "Maren Holt"}
        if len(messages) > 2:  # the recheck's turn
            return "not json" if recheck_fails else {"answer": sentence}
        return {"answer": sentence}

    return ScriptedLLM(fn=fn, logprob=lambda reply: -0.2 if "Salt" in reply else -2.0)


@pytest.mark.parametrize("recheck_fails", [False, True])
def test_the_trace_is_read_back_as_the_live_route_saw_it_after_a_recheck_and_a_span(retriever, tmp_path, recheck_fails):
    read = asyncio.run(make_strategy("vanilla_rag_k5", sentence_reader(recheck_fails), retriever).run(QUESTION))
    live = asyncio.run(auto(sentence_reader(recheck_fails), retriever, tmp_path, escalate=0.0).run(QUESTION))
    assert steps(read)[1:] == ["answerer", "span", "span_applied"]
    rechecked = next(s for s in read.trace.steps if s.agent == "answerer")
    assert len(rechecked.llm_calls) == 2 and (rechecked.llm_calls[-1].error is not None) == recheck_fails  # (a repair is part of its call)
    first = from_trace(read.trace)
    assert first.answer == read.answer == live.answer  # the answer that stood, after the span call
    assert first.logprobs and all(t.logprob == -0.2 for t in first.logprobs)  # the reply that stood, not a failed recheck
    route = next(s for s in live.trace.steps if s.agent == "route").outputs
    assert route["first_answer"] == first.answer
    assert {k: round(v, 4) if math.isfinite(v) else None for k, v in first_pass_signals(first).items()} == route["signals"]


def test_a_shipped_router_loads_and_names_only_known_signals():
    router = Router.load()  # the one marag ships: trained on the default model's reads
    assert set(router.features) <= set(SIGNALS) and router.spec.trained_on and router.spec.auroc["cross_validated"] >= 0.7
    assert 0.0 < router.spec.escalate_default < 1.0 and router.spec.first == "vanilla_rag_k5"


def test_an_unknown_signal_in_a_router_file_is_refused(tmp_path):
    with pytest.raises(MaragError, match="unknown signal"):
        Router.load(router_file(tmp_path, features=["lp_mean", "lp_maen"]))


def test_the_knee_becomes_a_share_of_every_training_question():
    from marag.eval.quality_cost import Point
    from marag.train.router import _share_below

    # the knee sends 2 of the 4 questions with the agent's answers on (scores .1, .2);
    # among all 8 training scores, 3 lie below the threshold between .2 and .3
    all_scores = np.array([0.05, 0.1, 0.2, 0.3, 0.6, 0.7, 0.8, 0.9])
    assert _share_below(all_scores, Point("knee", 0.5, 0.4, 0.6, 10.0, 4, 0.5), [0.1, 0.2, 0.3, 0.9]) == 3 / 8
    assert _share_below(all_scores, Point("none", 0.5, 0.4, 0.6, 10.0, 4, 0.0), [0.1, 0.2, 0.3, 0.9]) == 0.0
