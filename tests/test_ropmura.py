"""RopMura: knowledge boundaries (complete linkage, floor(sqrt(m)) clusters), routing by
centroids to the planted collection, a router that never sees raw documents and grades
every reply in one call with the conversation so far, the multi-hop planner flow and
its round limit, the variants as the paper's rows (one-shot, single-hop rows without the
planner, single-agent rows), the paper's mode, topic splits and the agent-level
metrics; scripted models over a real BM25 + MiniLM index."""

from __future__ import annotations

import asyncio
import json
import math
import re

import numpy as np
import pytest

from marag.errors import MaragError
from marag.eval.metrics import EvalExample, score_example
from marag.corpus.models import Question
from marag.index.cluster import boundary, kmeans
from marag.index.pipeline import index_corpus
from marag.index.store import IndexConfig
from marag.llm import ScriptedLLM
from marag.strategies import make_strategy
from marag.strategies.ropmura import PAPER_SETTINGS, RopMura, RopMuraConfig

TOPICS = {
    "astronomy": [
        "The Moon orbits the Earth every 27 days and shows phases as sunlight falls on it.",
        "Jupiter is the largest planet of the solar system, a gas giant with a great red storm.",
        "A telescope gathers starlight with a mirror or lens so astronomers can see faint galaxies.",
        "Mars is a cold desert planet with two small moons, Phobos and Deimos.",
        "Comets are icy bodies whose tails point away from the Sun as they approach it.",
        "The Milky Way is a spiral galaxy holding hundreds of billions of stars.",
        "Saturn's rings are made of ice and rock particles orbiting the planet.",
        "A solar eclipse happens when the Moon passes between the Earth and the Sun.",
        "Astronomers measure distances to nearby stars with parallax.",
    ],
    "cooking": [
        "Bread rises because yeast ferments sugar and releases carbon dioxide into the dough.",
        "A roux of butter and flour thickens sauces such as bechamel.",
        "Pasta should be cooked in plenty of salted boiling water until al dente.",
        "Caramel forms when sugar is heated until it melts and browns.",
        "Braising cooks meat slowly in a small amount of liquid in a covered pot.",
        "Risotto is made by stirring rice with hot stock until it turns creamy.",
        "An emulsion like mayonnaise holds oil droplets suspended in egg yolk.",
        "Searing meat in a hot pan browns its surface through the Maillard reaction.",
        "Pickling preserves vegetables in vinegar or brine.",
    ],
    "football": [
        "A football match lasts ninety minutes, split into two halves.",
        "The offside rule stops attackers from waiting behind the last defender.",
        "A penalty kick is taken from twelve yards after a foul in the box.",
        "The World Cup is held every four years and gathers national teams.",
        "A goalkeeper may handle the ball only inside the penalty area.",
        "A hat-trick is three goals scored by one player in one match.",
        "Teams earn three points for a league win and one for a draw.",
        "A red card sends a player off and his team plays with ten men.",
        "Corner kicks are awarded when the defending side puts the ball over its own goal line.",
    ],
}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    d = tmp_path_factory.mktemp("ropmura")
    corpus = d / "docs.jsonl"
    rows = [
        {"id": f"{t}-{i}", "title": f"{t} {i}", "text": text, "topic": t}
        for t, texts in TOPICS.items()
        for i, text in enumerate(texts)
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return index_corpus(corpus, d / "idx", IndexConfig(collection_field="topic"), progress=False)


def script(**replies):
    def fn(messages, output):
        reply = replies[output.__name__]
        return reply(messages[-1]["content"]) if callable(reply) else reply.pop(0)

    return ScriptedLLM(fn=fn)


def agent_reply(user: str) -> dict:
    """Answers Jupiter when one of its documents names it, else does not know."""
    coll = user.split("Your collection: ", 1)[1].split("\n", 1)[0]
    docs = user.split("Documents:", 1)[1].split("Your collection: ", 1)[0]
    return {"analysis": f"quote from {coll}", "answer": "Jupiter" if "Jupiter" in docs else "I don't know"}


def responses(user: str) -> list[tuple[str, str]]:
    """(agent, answer) of each response shown to the router, in order."""
    return re.findall(r"^\[\d+\] (.+)\nAnalysis: .*\nAnswer: (.*)$", user, re.M)


def router_reply(user: str) -> dict:
    """Grades a response reliable when it names Jupiter, else unhelpful; answers Jupiter
    when any response (or passage) says so."""
    grades = ["reliable" if "Jupiter" in a else "unhelpful" for _, a in responses(user)]
    return {"grades": grades, "answer": "Jupiter" if "Jupiter" in user else "unknown"}


ANSWERING = dict(
    KnowledgeReply=agent_reply,
    RouterReply=router_reply,
    AnswerOutput=lambda u: {"answer": "Jupiter" if "Jupiter" in u else "unknown"},
)


def called(llm, model: str) -> list[str]:
    return [c.messages[-1]["content"] for c in llm.calls if c.output_model.__name__ == model]


def run(name, llm, index, config=None, q="Which planet is the largest gas giant of the solar system?"):
    return asyncio.run(make_strategy(name, llm, index.retriever(), config).run(q))


def test_boundary_has_floor_sqrt_m_clusters_and_unit_centroids():
    rng = np.random.default_rng(0)
    for m in (1, 5, 17, 50):
        x = rng.normal(size=(m, 8))
        centroids, labels = boundary(x)
        assert len(centroids) == math.isqrt(m) == len(set(labels.tolist()))
        assert np.allclose(np.linalg.norm(centroids, axis=1), 1.0, atol=1e-5)
    # above max_exact the linkage runs on a sample and every vector gets its nearest centroid
    # floor(sqrt(500)) = 22 clusters of the whole collection, each with members
    x = rng.normal(size=(500, 8))
    centroids, labels = boundary(x, max_exact=100)
    assert len(centroids) == math.isqrt(500) == 22 and labels.shape == (500,)
    assert np.bincount(labels, minlength=22).min() > 0 and np.allclose(np.linalg.norm(centroids, axis=1), 1.0, atol=1e-5)
    # each centroid is its members' unit mean
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    mean = unit[labels == 0].mean(axis=0)
    assert np.allclose(centroids[0], mean / np.linalg.norm(mean), atol=1e-5)


def test_routing_invites_the_planted_collection(index):
    llm = script(**ANSWERING)
    ans = run("ropmura_route", llm, index, {"max_agents": 1})
    router = next(s for s in ans.trace.steps if s.agent == "router")
    assert router.outputs["invited"] == ["astronomy"]
    strat = make_strategy("ropmura", llm, index.retriever())
    owners, centroids = asyncio.run(strat.boundaries())
    assert np.bincount(owners).tolist() == [3, 3, 3]  # floor(sqrt(9)) centroids per agent
    ans = run("ropmura_route", script(**ANSWERING), index, {"max_agents": 2}, q="How many minutes does a football match last?")
    assert next(s for s in ans.trace.steps if s.agent == "router").outputs["invited"][0] == "football"


def test_the_router_never_receives_raw_chunk_text(index):
    llm = script(**ANSWERING)
    ans = run("ropmura_route", llm, index)
    router_prompts = called(llm, "RouterReply")
    texts = [t for ts in TOPICS.values() for t in ts]
    assert router_prompts and not any(t in p for p in router_prompts for t in texts)
    assert any(TOPICS["astronomy"][1] in p for p in called(llm, "KnowledgeReply"))  # the agents did read their documents
    assert ans.answer == "Jupiter" and ans.details["reliable_collections"] == ["astronomy"]
    # sources: the pieces of agents not graded unhelpful
    assert {s.doc_id.split("-")[0] for s in ans.sources} == {"astronomy"} and "astronomy-1" in [s.doc_id for s in ans.sources]


def test_the_router_grades_every_reply_in_one_call_with_the_conversation_so_far(index):
    """No reply is dropped before grading (a reply saying "I don't know" is graded by the
    model too); grades and answer come from one call per routed question; from the
    second round on, the router sees the earlier sub-questions and answers."""
    seen = []

    def grade(user):
        seen.append(responses(user))
        return {"grades": ["conjecture" if "know" in a else "reliable" for _, a in responses(user)], "answer": "Jupiter"}

    llm = script(
        SubQuestions=[{"questions": ["Which planets are gas giants?"]}, {"questions": ["Which gas giant is the largest?"]}],
        Selection=lambda u: {"choice": 1, "question": u.split("Candidates:\n1. ", 1)[1].split("\n", 1)[0]},
        Judgment=[{"justification": "size missing", "answerable": False}, {"justification": "enough", "answerable": True}],
        **{**ANSWERING, "RouterReply": grade},
    )
    ans = run("ropmura", llm, index, {"max_agents": 3})
    routed = [s for s in ans.trace.steps if s.agent == "router"]
    assert len(routed) == 2 and len(called(llm, "RouterReply")) == 2  # one router call per routed question
    assert all(len(r) == 3 for r in seen) and ("football", "I don't know") in seen[0]  # every reply graded
    grades = [s.outputs for s in ans.trace.steps if s.agent == "router.grades"]
    assert grades[0] == {"astronomy": "reliable", "cooking": "conjecture", "football": "conjecture"}
    first, second = called(llm, "RouterReply")
    assert "Conversation so far" not in first
    assert "Conversation so far:\n- Which planets are gas giants? -> Jupiter" in second
    assert "football" in {s.doc_id.split("-")[0] for s in ans.sources}  # a conjecture's pieces count as sources


def test_an_analysis_of_ten_quoting_sentences_reaches_the_router(index):
    long = " ".join(f'Sentence {i} quotes it: "Jupiter is the largest planet of the solar system, a gas giant with a storm".' for i in range(10))
    assert 1000 < len(long) <= 1500

    def reply(user):
        coll = user.split("Your collection: ", 1)[1].split("\n", 1)[0]
        return {"analysis": long if coll == "astronomy" else "nothing here", "answer": "Jupiter" if coll == "astronomy" else "I don't know"}

    llm = script(**{**ANSWERING, "KnowledgeReply": reply})
    ans = run("ropmura_route", llm, index, {"max_agents": 2})
    assert [s.status for s in ans.trace.steps if s.agent == "knowledge_agent" and "documents" in s.inputs] == ["ok", "ok"]
    assert long in called(llm, "RouterReply")[0] and ans.answer == "Jupiter"


def test_planner_rounds_split_select_route_judge_defend(index):
    judgments = [{"justification": "the size is still missing", "answerable": False}, {"justification": "enough", "answerable": True}]
    llm = script(
        SubQuestions=[{"questions": ["Which planets are gas giants?"]}, {"questions": ["Which gas giant is the largest?"]}],
        Selection=lambda u: {"choice": 1, "question": u.split("Candidates:\n1. ", 1)[1].split("\n", 1)[0]},
        Judgment=judgments,
        **ANSWERING,
    )
    ans = run("ropmura", llm, index, {"answer_from": "records"})  # the paper's defender
    roles = [s.agent for s in ans.trace.steps if s.agent in ("splitter", "selector", "router", "judger", "defender")]
    assert roles == ["splitter", "selector", "router", "judger"] * 2 + ["defender"]
    defend = next(c for c in llm.calls if c.output_model.__name__ == "AnswerOutput" and "answers gathered" in c.messages[0]["content"])
    assert "- Which planets are gas giants? -> Jupiter" in defend.messages[-1]["content"]
    assert ans.usage["rounds"] == 2 and ans.answer == "Jupiter"


@pytest.mark.parametrize("answer_from", ["sources", "both"])
def test_the_defender_reads_the_pieces_of_agents_not_graded_unhelpful(index, answer_from):
    llm = script(
        SubQuestions=[{"questions": ["Which planets are gas giants?"]}, {"questions": ["Which gas giant is the largest?"]}],
        Selection=lambda u: {"choice": 1, "question": u.split("Candidates:\n1. ", 1)[1].split("\n", 1)[0]},
        Judgment=[{"justification": "not yet", "answerable": False}, {"justification": "enough", "answerable": True}],
        **ANSWERING,
    )
    ans = run("ropmura", llm, index, {"answer_from": answer_from, "answer_passages": 3, "max_agents": 3})
    defend = called(llm, "AnswerOutput")[-1]
    titles = re.findall(r"^\[\d+\] (.+)$", defend.split("Documents:", 1)[1], re.M)
    # the astronomy agent alone was graded reliable (the others did not know): its pieces
    # only, its best piece of each round first, each chunk once, at most answer_passages
    assert len(titles) == 3 and all(t.startswith("astronomy") for t in titles) and len(set(titles)) == 3
    router_steps = [s for s in ans.trace.steps if s.agent == "knowledge_agent" and s.inputs.get("collection") == "astronomy" and "chunk_ids" in s.outputs]
    firsts = [s.outputs["chunk_ids"][0] for s in router_steps]
    assert [index.chunk(c).title for c in dict.fromkeys(firsts)] == titles[: len(set(firsts))]
    assert ("Answered so far:" in defend) == (answer_from == "both") and ans.answer == "Jupiter"


def test_round_limit(index):
    llm = script(
        SubQuestions=lambda u: {"questions": [f"sub-question {u.count(' -> ') + 1} about planets"]},
        Selection=lambda u: {"choice": 1, "question": u.split("Candidates:\n1. ", 1)[1].split("\n", 1)[0]},
        Judgment=lambda u: {"justification": "not yet", "answerable": False},
        **ANSWERING,
    )
    ans = run("ropmura", llm, index, {"max_rounds": 2})
    assert [s.agent for s in ans.trace.steps].count("judger") == 2 and ans.usage["rounds"] == 2
    assert [s.agent for s in ans.trace.steps if s.agent == "defender"] == ["defender"]


PLANNING = dict(
    SubQuestions=lambda u: {"questions": ["Which planet is the largest?", "Is it a gas giant?"]},
    Selection=lambda u: {"choice": 1, "question": "Is Jupiter a gas giant?"},
    Judgment=lambda u: {"justification": "ok", "answerable": True},
)
Q = "Which planet is the largest gas giant of the solar system?"


@pytest.mark.parametrize("name", ["ropmura_one_shot", "ropmura_route", "ropmura_all_agents", "ropmura_raw_knowledge"])
def test_one_shot_and_single_hop_rows_route_the_original_question_once_without_the_planner(index, name):
    llm = script(**PLANNING, **ANSWERING)
    ans = run(name, llm, index)
    routers = [s for s in ans.trace.steps if s.agent == "router"]
    assert [r.inputs["question"] for r in routers] == [Q]  # no decomposition
    names = {c.output_model.__name__ for c in llm.calls}
    assert not names & {"SubQuestions", "Selection", "Judgment"} and not [s for s in ans.trace.steps if s.agent == "defender"]
    assert len(called(llm, "RouterReply")) == 1 and ans.answer == "Jupiter"
    assert all(s.inputs.get("question") == Q for s in ans.trace.steps if s.agent == "knowledge_agent")
    if name == "ropmura_one_shot":
        assert make_strategy(name, llm, index.retriever()).config.pieces >= 20
    if name == "ropmura_all_agents":
        assert routers[0].outputs["invited"] == ["astronomy", "cooking", "football"]
    if name == "ropmura_raw_knowledge":
        assert "KnowledgeReply" not in names
        assert TOPICS["astronomy"][1] in called(llm, "RouterReply")[0]  # the ablation: the router reads passages


@pytest.mark.parametrize("name", ["ropmura_presplit", "ropmura_greedy"])
def test_planning_baselines(index, name):
    llm = script(**PLANNING, **ANSWERING)
    ans = run(name, llm, index)
    asked = [s.inputs["question"] for s in ans.trace.steps if s.agent == "router"]
    names = [c.output_model.__name__ for c in llm.calls]
    assert "Judgment" not in names and names[-1] == "AnswerOutput"  # no judger; the defender answers
    if name == "ropmura_presplit":  # one split; the second sub-question polished with the first answer
        assert names.count("SubQuestions") == 1 and asked == ["Which planet is the largest?", "Is Jupiter a gas giant?"]
    if name == "ropmura_greedy":  # the splitter each round, its first new sub-question taken, no selector
        assert "Selection" not in names and asked == ["Which planet is the largest?", "Is it a gas giant?"]


@pytest.mark.parametrize("name", ["ropmura_single_one_shot", "ropmura_single_presplit", "ropmura_single_greedy"])
def test_single_agent_rows_need_no_collections(tmp_path_factory, name):
    """The paper's single-agent rows: one knowledge agent holding the whole corpus."""
    d = tmp_path_factory.mktemp("single")
    rows = [{"id": f"{t}-{i}", "title": f"{t} {i}", "text": x} for t, xs in TOPICS.items() for i, x in enumerate(xs)]
    (d / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    idx = index_corpus(d / "docs.jsonl", d / "idx", IndexConfig(retrievers=["bm25", "dense"]), progress=False)
    assert idx.collections() == []
    llm = script(**PLANNING, **ANSWERING)
    ans = asyncio.run(make_strategy(name, llm, idx.retriever()).run(Q))
    agents = [s for s in ans.trace.steps if s.agent == "knowledge_agent" and "chunk_ids" in s.outputs]
    assert agents and all(s.inputs["collection"] == "(whole corpus)" for s in agents)
    docs = {c.split("-")[0] for s in agents for c in s.outputs["chunk_ids"]}
    assert len(docs) > 1 or "astronomy" in docs  # pieces come from the whole corpus
    assert "invited_collections" not in ans.details  # no collection: the agent metrics do not apply
    assert ans.answer == "Jupiter"


def test_paper_mode_turns_every_addition_off(index):
    cfg = RopMuraConfig(paper=True, max_agents=1, repeat_check=True)  # paper wins
    assert cfg.additions() == [] and all(getattr(cfg, k) == v for k, v in PAPER_SETTINGS.items())
    assert RopMuraConfig().additions() == ["answer_recheck", "answer_type_check", "max_agents", "repeat_check", "answer_from"]
    strat = make_strategy("ropmura_paper", ScriptedLLM(), index.retriever())
    assert isinstance(strat, RopMura) and strat.config.paper and (strat.config.pieces, strat.config.rerank_to) == (20, 5)
    # no cap on the invited owners: every owner of the top centroids is asked
    llm = script(**ANSWERING)
    ans = run("ropmura_route", llm, index, {"paper": True, "max_agents": 1})
    assert len(next(s for s in ans.trace.steps if s.agent == "router").outputs["invited"]) == 3
    # no repeat check: a selector that repeats a sub-question is taken at its word
    repeat = dict(
        SubQuestions=lambda u: {"questions": ["Which planets are gas giants?", "Which gas giant is largest?"]},
        Selection=lambda u: {"choice": 1, "question": "Which planets are gas giants?"},
        Judgment=lambda u: {"justification": "not yet", "answerable": False},
    )
    for paper, second in ((True, "Which planets are gas giants?"), (False, "Which gas giant is largest?")):
        ans = run("ropmura", script(**repeat, **ANSWERING), index, {"paper": paper, "max_rounds": 2})
        assert [s.inputs["question"] for s in ans.trace.steps if s.agent == "router"][1] == second
    # nothing new offered: the paper's planner asks the same again; ours stops and answers
    same = dict(repeat, SubQuestions=lambda u: {"questions": ["Which planets are gas giants?"]})
    for paper, rounds in ((True, 3), (False, 1)):
        ans = run("ropmura", script(**same, **ANSWERING), index, {"paper": paper, "max_rounds": 3})
        assert [s.agent for s in ans.trace.steps].count("router") == rounds and ans.usage["rounds"] == rounds
        assert [s.outputs for s in ans.trace.steps if s.agent == "planner_stop"] == ([] if paper else [{"repeated": "Which planets are gas giants?"}])
        assert ans.answer == "Jupiter"


def test_an_index_without_collections_is_refused(tmp_path, repo):
    idx = index_corpus(repo / "samples" / "corpus", tmp_path / "plain", IndexConfig(retrievers=["bm25"]), progress=False)
    with pytest.raises(MaragError, match="split into collections"):
        make_strategy("ropmura", ScriptedLLM(), idx.retriever())

    class Bare:  # a retriever without an index: the message is about the index, not about splitting
        def search(self, query, k=10, offset=0):
            return []

    for name in ("ropmura", "ropmura_single_one_shot"):
        with pytest.raises(MaragError, match="needs marag's own index") as err:
            make_strategy(name, ScriptedLLM(), Bare())
        assert "split into collections" not in err.value.message


def test_kmeans_split_recovers_planted_topics(tmp_path, index):
    rows = [{"id": f"{t}-{i}", "title": "", "text": x} for t, texts in TOPICS.items() for i, x in enumerate(texts)]
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    idx = index_corpus(corpus, tmp_path / "split", IndexConfig(retrievers=["bm25", "dense"], split="kmeans:3"), progress=False)
    assert idx.config.collection_field == "topic" and len(idx.collections()) == 3
    by_topic: dict[str, set[str]] = {}
    for c, coll in zip(idx.chunks, idx.chunk_collections):
        by_topic.setdefault(c.doc_id.split("-")[0], set()).add(coll)
    pairs = [(c.doc_id.split("-")[0], coll) for c, coll in zip(idx.chunks, idx.chunk_collections)]
    majority = sum(max(pairs.count((t, k)) for k in ks) for t, ks in by_topic.items())
    assert majority / len(rows) >= 0.8
    assert sorted(kmeans(np.eye(4), 4).tolist()) == [0, 1, 2, 3]  # four orthogonal vectors, four clusters


def test_agent_metrics():
    """The paper's rates: answerable = some invited agent holds a gold document; useful =
    the share of invited agents that hold one (whatever the router graded)."""
    q = Question(id="q", question="?", answers=["x"], gold_doc_ids=["astronomy-1"])
    ex = EvalExample(
        question=q, prediction="x", details={"invited_collections": ["cooking", "astronomy"], "reliable_collections": []},
        gold_collections=["astronomy"],
    )  # fmt: skip
    out = asyncio.run(score_example(ex, ["agent_answerable", "agent_useful"]))
    assert out["agent_answerable"].value == 1.0 and out["agent_useful"].value == 0.5
    ex.details["invited_collections"] = ["cooking"]
    out = asyncio.run(score_example(ex, ["agent_answerable", "agent_useful"]))
    assert out["agent_answerable"].value == 0.0 and out["agent_useful"].value == 0.0
    assert asyncio.run(score_example(EvalExample(question=q, prediction="x"), ["agent_answerable", "agent_useful"])) == {}


def test_agent_useful_is_not_zero_with_raw_knowledge(index):
    ans = run("ropmura_raw_knowledge", script(**ANSWERING), index, {"max_agents": 2})
    invited = ans.details["invited_collections"]
    assert invited[0] == "astronomy" and len(invited) == 2
    q = Question(id="q", question=Q, answers=["Jupiter"], gold_doc_ids=["astronomy-1"])
    ex = EvalExample(question=q, prediction=ans.answer, details=ans.details, gold_collections=["astronomy"])
    assert asyncio.run(score_example(ex, ["agent_useful"]))["agent_useful"].value == 0.5
