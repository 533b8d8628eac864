"""KAIR: the known/required cycle, query choice (redundant queries rejected), fact
checks (conflicts and unsupported facts discarded; a gap closes only with a new,
supported fact), termination on an empty Required, C re-filtered when K changes and
packed for the generator, competition as in the paper's Eq. 6 (only the moderator's
best-scored C is shared), collaboration, and the paper's mode; scripted models over a
real BM25 index."""

from __future__ import annotations

import asyncio

import pytest

from marag.agents.kair import Candidate, Candidates, Fact, KnowledgeState
from marag.index.pipeline import index_corpus
from marag.index.store import IndexConfig
from marag.llm import ScriptedLLM
from marag.strategies import make_strategy
from marag.strategies.kair import KAIR, PAPER_SETTINGS, KAIRConfig, answers, grounded, leap_supported, supported
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


def moderate(user: str) -> dict:
    """Scores a refined context: high once it holds the novel's page."""
    return {"reason": "", "score": 8 if "Salt Winter" in numbered(user) else 1}


def llm(plan=planner, update=updater, keep=keep_relevant, verdict=moderate) -> ScriptedLLM:
    def fn(messages, output):
        user = messages[-1]["content"]
        replies = {
            "Candidates": plan,
            "Update": update,
            "Kept": keep,
            "Verdict": verdict,
            "AnswerOutput": lambda u: {"answer": "Brekke" if "Brekke" in u else "unknown"},
        }
        return replies[output.__name__](user)

    return ScriptedLLM(fn=fn)


def run(name, model, retriever, config=None):
    """One run over the planted corpus. The cycle's mechanics are tested over two cycles,
    so the link lookup (which would fetch Maren Holt's page in the first) is off unless
    a test turns it on; C is refined by the paper's filter role (a call) unless a test
    asks for the default, `context="cited"` (no call); the first query is the planner's
    unless a test asks for the default, `question_first` (the question itself)."""
    defaults = {"linked_docs": 0, "context": "filter", "question_first": False}
    return asyncio.run(make_strategy(name, model, retriever, {**defaults, **(config or {})}).run(QUESTION))


def steps(ans, agent):
    return [s for s in ans.trace.steps if s.agent == agent]


def test_support_check_needs_nearly_all_of_a_facts_words_in_its_passage():
    assert supported("Maren Holt grew up in Brekke", DOCS[1][2]) and not supported("Holt was born on Mars", DOCS[1][2])
    assert not supported("", DOCS[1][2])  # no content words: nothing supported


def test_support_is_judged_on_what_a_fact_adds_to_the_question():
    """A bridge fact joins the question's words to one passage's answer; the passage need
    not have the question's words. A fact that only restates the question is no fact."""
    holt = DOCS[1][2]
    assert supported("The author of Salt Winter was raised in Brekke", holt, QUESTION)
    assert not supported("The author of Salt Winter was raised in Brekke", holt)  # without the question: 1 of 5 words
    assert not supported("The author of Salt Winter was raised on the Moon", holt, QUESTION)
    assert not supported("The author of Salt Winter was raised", holt, QUESTION)  # nothing added


def test_a_fact_that_answers_a_gap_closes_it_though_the_update_named_none(retriever):
    """The 1.5B states the answer as a fact and leaves its gap open ("closed": []); the
    gap a new fact restates with something added closes, and a run whose every gap is
    answered ends."""
    where = "Where Maren Holt grew up"

    def update(user):
        p = numbered(user)
        if "Maren Holt" in p:
            facts = ["Maren Holt grew up in Brekke", "The author of Salt Winter was raised in Brekke"]
            return {"facts": [{"text": t, "passage": p["Maren Holt"], "status": "new"} for t in facts], "closed": [], "new_gaps": []}
        fact = {"text": "Salt Winter was written by Maren Holt", "passage": p["Salt Winter"], "status": "new"}
        return {"facts": [fact], "closed": [], "new_gaps": [where]}

    ans = run("kair", llm(update=update), retriever, {"max_steps": 6})
    applied = steps(ans, "knowledge_applied")[1].outputs
    assert applied["answered"] == sorted([QUESTION, where]) and applied["required"] == []
    assert ans.usage["cycles"] == 2 and ans.answer == "Brekke"
    ans = run("kair", llm(update=update), retriever, {"max_steps": 2, "close_answered": False})
    assert steps(ans, "knowledge_applied")[1].outputs["required"] == [QUESTION, where]


def test_a_passage_title_is_neither_a_fact_nor_a_gap(retriever):
    """The 1.5B listed titles of the passages in front of it as facts ("Amri language")
    and as gaps, which the planner then searched for. A title is known by its content
    words: "The Herring" is the title "Herring". (Such a fact passes the support check:
    its one added word is in its passage.)"""
    seen = []

    def update(user):
        out, p = updater(user), numbered(user)
        if "Maren Holt" not in p:
            other = next(t for t in p if t != "Salt Winter")
            seen.append(other)
            out["facts"].append({"text": f"The {other}", "passage": p[other], "status": "new"})
            out["new_gaps"] = [f"the {other.lower()}", GAP2]
        return out

    ans = run("kair", llm(update=update), retriever, {"max_steps": 1})
    applied = steps(ans, "knowledge_applied")[0].outputs
    assert applied["discarded_unsupported"] == [f"The {seen[0]}"] and applied["required"] == [QUESTION, GAP2]
    # with `title_facts` the title stands for its passage's own words, which add a fact
    # without closing anything
    seen.clear()
    ans = run("kair", llm(update=update), retriever, {"max_steps": 1, "title_facts": 2})
    applied = steps(ans, "knowledge_applied")[0].outputs
    (pointed,) = applied["from_titles"]
    page = next(text for _, title, text in DOCS if title == seen[0])
    assert pointed in applied["added"] and pointed == page  # (whole: it fits `title_fact_chars`)
    assert applied["required"] == [QUESTION, GAP2] and applied["closed"] == []
    ans = run("kair", llm(update=update), retriever, {"max_steps": 1, "support_check": False})
    assert f"The {seen[0]}" in steps(ans, "knowledge_applied")[0].outputs["added"]


def test_a_gap_closed_by_a_fact_does_not_reopen_in_the_same_update(retriever):
    """The update that states the answer and leaves its gap open tends to list that gap
    again among its new gaps; once closed, it stays closed."""
    where = "Where Maren Holt grew up"

    def update(user):
        p = numbered(user)
        if "Maren Holt" in p:
            fact = {"text": "Maren Holt grew up in Brekke", "passage": p["Maren Holt"], "status": "new"}
            return {"facts": [fact], "closed": [], "new_gaps": [where]}
        fact = {"text": "Salt Winter was written by Maren Holt", "passage": p["Salt Winter"], "status": "new"}
        return {"facts": [fact], "closed": [], "new_gaps": [where]}

    applied = steps(run("kair", llm(update=update), retriever, {"max_steps": 2}), "knowledge_applied")[1].outputs
    assert applied["answered"] == [where] and applied["required"] == [QUESTION]


def test_a_fact_that_says_the_answer_is_unknown_answers_no_gap():
    where = "Where Maren Holt grew up"
    assert answers("Maren Holt grew up in Brekke", where)
    for fact in ("It is unknown where Maren Holt grew up", "Where Maren Holt grew up is not mentioned", "The passage does not say where Maren Holt grew up"):
        assert not answers(fact, where), fact


def test_the_generator_reads_what_is_known_before_c(retriever):
    for config, first in (({}, True), ({"known_first": False}, False)):
        model = llm()
        run("kair", model, retriever, config)
        gen = next(c.messages[-1]["content"] for c in model.calls if c.output_model.__name__ == "AnswerOutput")
        shown = "What is known" in gen and gen.index("Maren Holt grew up in Brekke") < gen.index(DOCS[0][2])
        assert shown is first, config


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


def test_grounded_relevance_prefers_the_query_that_names_a_known_bridge(retriever):
    """The MuSiQue trace behind `query_relevance=grounded`: the gap is the question, which
    was also the first query. By overlap with the gap, the candidate restating the question
    wins; grounded, the one naming what a known fact gives (Zimbabwe) does, and a query
    sharing no word with its gap scores nothing."""
    question = "What is the name of the waterfall in the country where the Bubye River is found?"
    st = KnowledgeState(
        known=[Fact(text="The Bubye River is a tributary of the Limpopo River in Gwanda District, Zimbabwe.", source="bubye#0")],
        required=[question],
        history=[question],
    )
    cands = Candidates(candidates=[
        Candidate(query="What is the name of the waterfall in Zimbabwe?", gap=1),
        Candidate(query="What is the name of the waterfall in the country where the Limpopo River is found?", gap=1),
    ])  # fmt: skip
    chosen = {mode: make_strategy("kair", llm(), retriever, {"query_relevance": mode})._choose(cands, st, "") for mode in ("gap", "grounded")}
    assert chosen == {"gap": cands.candidates[1].query, "grounded": cands.candidates[0].query}
    assert grounded(frozenset({"zimbabwe", "capital"}), frozenset({"waterfall"}), frozenset({"zimbabwe"})) == 0.0
    assert grounded(frozenset({"waterfall", "zimbabwe", "tallest"}), frozenset({"waterfall"}), frozenset({"zimbabwe"})) == 2 / 3
    assert KAIRConfig(paper=True, query_relevance="grounded").query_relevance == "gap"


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


def by_agent(user: str) -> dict:
    """Agent 1 follows the two hops; agent 2 wanders (herring, then the Olympics)."""
    if "agent 2 of 2" in user:
        return {"candidates": [{"query": "Winter Olympics" if "herring" in user else "herring North Sea", "gap": 1}]}
    return planner(user)


def test_competition_shares_only_the_best_scored_context_and_each_agent_keeps_its_knowledge(retriever):
    """The paper's Eq. 6: the moderator scores each agent's refined context C (not its
    facts); the best C, at or above the threshold, becomes every agent's C; K and R stay
    each agent's own."""
    model = llm(plan=by_agent)
    ans = run("kair_2", model, retriever)
    rounds = steps(ans, "round")
    # round 1: agent 1 kept the novel's page (scored 8), agent 2 kept nothing (0, no call)
    assert rounds[0].outputs == {"scores": [8, 0], "winner": 0, "shared": True, "open_gaps": [2, 1]}
    prompts = [c.messages[-1]["content"] for c in model.calls]
    moderator = [p for p in prompts if "score it from 0" in model.calls[prompts.index(p)].messages[0]["content"]]
    assert moderator and all(DOCS[0][2] in p and "What is known" not in p for p in moderator)  # it judges C, not K
    # round 2: agent 2 has agent 1's C but not its facts or gaps
    second = [p for p in prompts if "agent 2 of 2" in p][1]
    assert "What is known:\n(none)" in second and "Salt Winter was written by Maren Holt" not in second
    assert "Maren Holt" not in second.split("What is required (open gaps):", 1)[1]
    assert ans.usage["open_gaps"] == 0 and ans.answer == "Brekke"
    assert [s.doc_id for s in ans.sources] == ["salt-winter", "holt"]


def test_competition_shares_nothing_below_the_threshold(retriever):
    ans = run("kair_2", llm(plan=by_agent), retriever, {"moderator_threshold": 9})
    first = steps(ans, "round")[0].outputs
    assert first["scores"] == [8, 0] and first["shared"] is False


def test_a_cycle_whose_facts_were_all_rejected_closes_no_gap(retriever):
    """Cycle 2's only fact is unsupported by its passage: the gaps it claims to close
    stay open (the run does not end with Required emptied by a rejected fact)."""

    def update(user):
        p = numbered(user)
        if "Maren Holt" in p:
            unsupported = {"text": "Maren Holt was raised on the Moon", "passage": p["Maren Holt"], "status": "new"}
            return {"facts": [unsupported], "closed": list(range(1, len(gaps(user)) + 1)), "new_gaps": []}
        return updater(user)

    ans = run("kair", llm(update=update), retriever, {"max_steps": 2})
    applied = steps(ans, "knowledge_applied")[1].outputs
    assert applied["discarded_unsupported"] == ["Maren Holt was raised on the Moon"]
    assert applied["closed"] == [] and applied["kept_open"] == sorted([QUESTION, GAP2])
    assert steps(ans, "state")[1].outputs["required"] == [QUESTION, GAP2] and ans.usage["open_gaps"] == 2

    def already_known(user):  # a fact it already had closes nothing either
        p = numbered(user)
        if "Maren Holt" in p:
            again = {"text": "Salt Winter was written by Maren Holt", "passage": p["Maren Holt"], "status": "known"}
            return {"facts": [again], "closed": [1, 2], "new_gaps": []}
        return updater(user)

    ans = run("kair", llm(update=already_known), retriever, {"max_steps": 2})
    assert steps(ans, "state")[1].outputs["required"] == [QUESTION, GAP2]


def test_context_is_refiltered_when_knowledge_changes(retriever):
    """Cycle 1 keeps the novel and the Olympics page; cycle 2 learns a new fact, so C is
    judged again beside the new passage and the Olympics page leaves it."""

    def keep(user):
        p = numbered(user.split("Passages:\n", 1)[1])
        wanted = ("Salt Winter", "Maren Holt") if "Maren Holt" in p else ("Salt Winter", "Winter Olympics")
        return {"keep": [n for t, n in p.items() if t in wanted]}

    model = llm(keep=keep)
    ans = run("kair", model, retriever)
    assert [s.doc_id for s in ans.sources] == ["salt-winter", "holt"]
    applied = [s.outputs for s in steps(ans, "context_applied")]
    assert applied[0]["refiltered"] and applied[0]["context"] == ["salt-winter#0", "olympics#0"]
    assert applied[1]["refiltered"] and applied[1]["dropped"] == ["olympics#0"]
    second = [c.messages[-1]["content"] for c in model.calls if c.output_model.__name__ == "Kept"][1]
    assert DOCS[2][2] in second and DOCS[1][2] in second  # the old C shown again beside the new passage


def test_the_filter_reads_each_passage_clipped_to_filter_chars_and_the_update_reads_it_whole(retriever):
    model = llm()
    run("kair", model, retriever, {"filter_chars": 60})
    prompts = {name: [c.messages[-1]["content"] for c in model.calls if c.output_model.__name__ == name] for name in ("Kept", "Update")}
    novel = next(text for _, title, text in DOCS if title == "Salt Winter")
    assert len(novel) > 60
    assert any(novel in u for u in prompts["Update"])
    assert prompts["Kept"] and not any(novel in u for u in prompts["Kept"])
    assert any(novel[:40] in u for u in prompts["Kept"])  # its opening is what the filter judges
    # C keeps the passage as the other roles read it: the generator reads it whole
    generator = next(c.messages[-1]["content"] for c in model.calls if c.output_model.__name__ == "AnswerOutput")
    assert novel in generator
    model = llm()
    run("kair", model, retriever, {"filter_chars": None})
    assert any(novel in c.messages[-1]["content"] for c in model.calls if c.output_model.__name__ == "Kept")


def test_the_generator_reads_c_packed_most_relevant_first(retriever):
    """Everything retrieved is kept; the generator gets C within `context_chars`, the
    passages that support a known fact first, the rest left out."""
    def update(user):  # the author's page adds nothing new here, so C is not re-filtered
        return updater(user) if "Maren Holt" not in numbered(user) else {"facts": [], "closed": [], "new_gaps": []}

    model = llm(update=update, keep=lambda u: {"keep": list(numbered(u.split("Passages:\n", 1)[1]).values())})
    ans = run("kair", model, retriever, {"context_chars": 300})
    assert ans.usage["context"] == 4 and ans.usage["context_shown"] == 1
    gen = next(c for c in model.calls if c.output_model.__name__ == "AnswerOutput").messages[-1]["content"]
    assert DOCS[0][2] in gen and DOCS[2][2] not in gen and DOCS[3][2] not in gen
    assert [s.doc_id for s in ans.sources] == ["salt-winter"]


def test_an_empty_context_is_answered_closed_book_and_recorded(retriever):
    """Closed-book only when nothing was found: an empty C with known facts reads the
    facts (with `known_first`)."""
    nothing = lambda u: {"facts": [], "closed": [], "new_gaps": []}  # noqa: E731
    for update, config, blind in ((nothing, {}, True), (updater, {"known_first": False}, True), (updater, {}, False)):
        model = llm(keep=lambda u: {"keep": []}, update=update)
        ans = run("kair", model, retriever, config)
        gen = steps(ans, "generator")[0]
        assert gen.outputs["closed_book"] is blind and ans.details["closed_book"] is blind and ans.usage["closed_book"] == float(blind)
        call = next(c for c in model.calls if c.output_model.__name__ == "AnswerOutput")
        assert ("own knowledge" in call.messages[0]["content"]) is blind and ans.sources == []
        assert ("Maren Holt grew up in Brekke" in call.messages[-1]["content"]) is not blind
    assert run("kair", llm(), retriever).details["closed_book"] is False


def test_default_max_steps_allows_the_papers_average_of_about_five(retriever):
    """The paper's single agent took 4.9 steps on average: a run that keeps finding new
    gaps for 6 cycles is not cut at 4."""
    queries = ["Salt Winter novel", "fishing crew 1931", "Maren Holt printer", "Norwegian writer", "west coast village", "Brekke"]

    def run_so_far(user):
        block = user.split("Queries already run:\n", 1)[1].split("\n\n", 1)[0]
        return [] if block.startswith("(none)") else block.splitlines()

    def plan(user):
        return {"candidates": [{"query": queries[min(len(run_so_far(user)), 5)], "gap": 1}]}

    def update(user):  # each cycle opens a new gap, until "Brekke" was searched
        if len(gaps(user)) >= 6:
            return {"facts": [], "closed": [], "new_gaps": []}
        return {"facts": [], "closed": [], "new_gaps": [f"{queries[len(gaps(user))]} detail"]}

    assert KAIRConfig().max_steps >= 8
    ans = run("kair", llm(plan=plan, update=update), retriever, {"memory": False})
    assert ans.usage["cycles"] >= 6


def test_paper_mode_turns_every_addition_off(retriever):
    cfg = KAIRConfig(paper=True, support_check=True, memory=True, gap_as_query=True, agent_angles=True)  # paper wins
    assert cfg.additions() == [] and all(getattr(cfg, k) == v for k, v in PAPER_SETTINGS.items())
    assert KAIRConfig().additions() == [
        "answer_recheck", "answer_type_check", "support_check", "close_answered", "known_first", "drop_claims", "memory", "gap_as_query", "agent_angles", "context", "update_chars",
        "answer_excerpts", "answer_passages", "named_passages", "linked_docs", "question_first",
    ]  # fmt: skip
    # the filter's reading counts as an addition only where the filter runs
    assert "filter_chars" in KAIRConfig(context="filter").additions()
    assert "filter_chars" not in KAIRConfig(context="filter", filter_chars=None).additions()
    assert (KAIRConfig().context_chars, KAIRConfig(paper=True).context_chars) == (3000, 6000)
    assert (KAIRConfig().k, KAIRConfig(paper=True).k, KAIRConfig(paper=True, k=7).k) == (5, 10, 7)  # the caller's k wins
    strat = make_strategy("kair_paper", llm(), retriever)
    assert isinstance(strat, KAIR) and strat.config.paper and strat.config.k == 10
    # the paper's knowledge update: a fact the model calls new is taken (no lexical support check)
    def update(user):
        out = updater(user)
        p = numbered(user)
        if "Maren Holt" in p:
            out["facts"].append({"text": "Maren Holt was raised on the Moon", "passage": p["Maren Holt"], "status": "new"})
        return out

    ans = run("kair_paper", llm(update=update), retriever)
    assert "Maren Holt was raised on the Moon" in steps(ans, "state")[-1].outputs["known"]


def test_the_runs_retriever_is_the_default_and_paper_true_selects_the_papers_bm25(tmp_path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(f'{{"id": "{i}", "title": "{t}", "text": "{x}"}}\n' for i, t, x in DOCS))
    idx = index_corpus(corpus, tmp_path / "idx", IndexConfig(retrievers=["bm25", "dense"]), progress=False)
    hybrid = idx.retriever("hybrid")
    assert make_strategy("kair", llm(), hybrid).retriever is hybrid
    assert make_strategy("kair", llm(), hybrid, {"retrieval": "bm25"}).retriever is idx.retriever("bm25")
    assert make_strategy("kair_paper", llm(), hybrid).retriever is idx.retriever("bm25")
    assert make_strategy("kair", llm(), hybrid, {"paper": True, "retrieval": "given"}).retriever is hybrid  # the caller wins
    ans = asyncio.run(make_strategy("kair_paper", llm(), hybrid).run(QUESTION))
    assert ans.details["retriever"] == "bm25" and ans.answer == "Brekke"
    ans = asyncio.run(make_strategy("kair", llm(), hybrid).run(QUESTION))
    assert ans.details["retriever"] == "given" and ans.answer == "Brekke"


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


def test_a_passage_left_out_of_the_prompt_does_not_shift_the_numbers_onto_other_hits():
    from marag.index.base import Hit
    from marag.strategies.kair import packed

    hits = [Hit(doc_id=n, chunk_id=f"{n}#0", score=1.0, title=n, text=t) for n, t in [("A", "a" * 100), ("B", ""), ("C", "c" * 100)]]
    pairs = packed(hits, 6000)  # everything fits; B's allowance is 0 only because it is empty
    # the model numbers the documents it was shown 1, 2: number 2 must be C, not B
    assert [h.chunk_id for h, _ in pairs] == ["A#0", "C#0"] and [d.title for _, d in pairs] == ["A", "C"]
    assert all(h.title == d.title for h, d in packed(hits * 40, 1000))  # clipped and cut at the end: still paired


def test_cited_context_keeps_what_facts_cite_and_the_best_new_passages_without_a_filter_call(retriever):
    model = llm(keep=lambda u: pytest.fail("context='cited' makes no filter call"))
    ans = run("kair", model, retriever, {"context": "cited", "keep_top": 1})
    applied = [s.outputs for s in steps(ans, "context_applied")]
    top = [s.searches[0].hits[0]["chunk_id"] for s in steps(ans, "search")]
    # cycle 1: the novel (cited by the fact learned), then the search's best hit; cycle 2: the author's page
    assert applied[0]["kept"] == list(dict.fromkeys(["salt-winter#0", top[0]]))
    assert applied[1]["kept"][0] == "holt#0" and len(applied[1]["kept"]) <= 2 and ans.answer == "Brekke"
    assert not any(c.output_model.__name__ == "Kept" for c in model.calls)
    # keep_top=0: only what a fact cites
    ans = run("kair", llm(keep=lambda u: pytest.fail("no filter")), retriever, {"context": "cited", "keep_top": 0})
    assert [s.doc_id for s in ans.sources] == ["salt-winter", "holt"]
    assert KAIRConfig(paper=True, context="cited").context == "filter"  # the paper's filter role
    # the default: no filter call either
    strat = make_strategy("kair", llm(keep=lambda u: pytest.fail("the default makes no filter call")), retriever, {"linked_docs": 0})
    assert strat.config.context == "cited" and asyncio.run(strat.run(QUESTION)).answer == "Brekke"


def test_cited_context_keeps_the_document_a_title_link_joined(retriever):
    """context='cited' with linked_docs: the author's page, joined by title link, enters C
    in cycle 1 although no fact cites it yet (the update here only reads the novel)."""

    def novel_only(user: str) -> dict:
        p = numbered(user)
        fact = {"text": "Salt Winter was written by Maren Holt", "passage": p["Salt Winter"], "status": "new"}
        return {"facts": [fact], "closed": [], "new_gaps": [GAP2]}

    no_filter = lambda u: pytest.fail("context='cited' makes no filter call")  # noqa: E731
    ans = run("kair", llm(update=novel_only, keep=no_filter), retriever, {"context": "cited", "keep_top": 0, "linked_docs": 1, "max_steps": 1})
    assert steps(ans, "context_applied")[0].outputs["kept"] == ["salt-winter#0", "holt#0"]
    off = run("kair", llm(update=novel_only, keep=no_filter), retriever, {"context": "cited", "keep_top": 0, "max_steps": 1})
    assert steps(off, "context_applied")[0].outputs["kept"] == ["salt-winter#0"]


def test_an_answer_put_in_the_questions_words_from_a_page_that_does_not_say_it_is_a_leap(retriever):
    """leap_check (off by default): "The author of Salt Winter was raised in Herring", from the page on
    herring, restates the question with one word added that its page has; the support
    check passes it, but its page holds 2 of its 5 content words, so it is not learned
    and the question stays open (a second cycle finds Maren Holt). Off, it closes the
    question in cycle 1 and is the answer."""

    def leaping(user: str) -> dict:
        p = numbered(user)
        if "Herring" in p and "Salt Winter" in p:
            fact = {"text": "The author of Salt Winter was raised in Herring", "passage": p["Herring"], "status": "new"}
            return {"facts": [fact, {"text": "Salt Winter was written by Maren Holt", "passage": p["Salt Winter"], "status": "new"}],
                    "closed": [], "new_gaps": [GAP2]}  # fmt: skip
        return updater(user)

    def answer_from_known(messages, output):
        user = messages[-1]["content"]
        if output.__name__ == "AnswerOutput":
            return {"answer": "Herring" if "raised in Herring" in user else "Brekke" if "Brekke" in user else "unknown"}
        return {"Candidates": planner, "Update": leaping, "Kept": keep_relevant, "Verdict": moderate}[output.__name__](user)

    herring = DOCS[3][1] + " " + DOCS[3][2]
    assert supported("The author of Salt Winter was raised in Herring", herring, QUESTION)  # the one word it adds is there
    assert not leap_supported("The author of Salt Winter was raised in Herring", herring)
    holt = DOCS[1][1] + " " + DOCS[1][2]
    assert leap_supported("Maren Holt grew up in Brekke", holt)
    # what is known is the bridge: the author's page never names the novel
    assert not leap_supported("The author of Salt Winter was raised in Brekke", holt)
    assert leap_supported("The author of Salt Winter was raised in Brekke", holt, "Salt Winter was written by Maren Holt")
    ans = run("kair", ScriptedLLM(fn=answer_from_known), retriever, {"leap_check": True})
    applied = steps(ans, "knowledge_applied")
    assert applied[0].outputs["discarded_leaps"] == ["The author of Salt Winter was raised in Herring"]
    assert applied[0].outputs["added"] == ["Salt Winter was written by Maren Holt"] and QUESTION in applied[0].outputs["required"]
    assert ans.usage["cycles"] == 2 and ans.answer == "Brekke"
    # off (the default), the leap closes the question in cycle 1; read as known it is
    # the answer, and `drop_claims` (the default) leaves it out of the generator's K
    for config, answer in (({"drop_claims": False}, "Herring"), ({}, "Brekke")):
        off = run("kair", ScriptedLLM(fn=answer_from_known), retriever, config)
        assert steps(off, "knowledge_applied")[0].outputs["closed"] == [QUESTION] and off.answer == answer, config


def test_gaps_that_are_not_words_are_not_opened(retriever):
    """The 1.5B wrote a gap's number or a scrap of a passage ("/70's") as a new gap: it
    would be searched for and never close, so it is not added to Required."""

    def update(user):
        out = updater(user)
        if "Salt Winter" in numbered(user) and "Maren Holt" not in numbered(user):
            out["new_gaps"] = ["/70's", GAP2]
        return out

    ans = run("kair", llm(update=update), retriever, {"max_steps": 1})
    assert steps(ans, "knowledge_applied")[0].outputs["required"] == [QUESTION, GAP2]


def test_the_update_reads_the_sentences_nearest_the_query_within_update_chars(tmp_path):
    filler = " ".join(f"In {1890 + i} she printed a pamphlet on herring prices." for i in range(6))
    holt = ("holt", "Maren Holt", f"Maren Holt (1871-1950) was a Norwegian printer and writer. {filler} She grew up in Brekke, a village.")
    retriever = bm25_retriever(tmp_path, [d if d[0] != "holt" else holt for d in DOCS])
    for config, reads_village in (({"update_chars": 200}, True), ({"update_chars": None, "doc_chars": 200}, False)):
        model = llm()
        run("kair", model, retriever, config)
        pages = [c.messages[-1]["content"] for c in model.calls if c.output_model.__name__ == "Update"]
        page = next(u for u in pages if "Maren Holt (1871-1950)" in u)
        assert ("grew up in Brekke" in page) is reads_village, config
        generator = next(c.messages[-1]["content"] for c in model.calls if c.output_model.__name__ == "AnswerOutput")
        assert "Brekke" in generator or not reads_village  # C keeps the passage as doc_chars reads it


def test_a_document_a_search_names_follows_its_passages_and_the_second_hop_takes_one_cycle(retriever):
    """linked_docs: the search for the novel ranks no page of its author; the novel's page
    names her, so her page follows the search's passages, the update reads both and the
    run ends after one cycle. Off, a second cycle searches for her."""
    ans = run("kair", llm(), retriever, {"linked_docs": 1})
    linked = steps(ans, "linked_docs")
    assert len(linked) == 1 and linked[0].outputs["chunk_ids"] == ["holt#0"] and linked[0].inputs["query"] == "Salt Winter author"
    assert ans.usage["cycles"] == 1 and ans.answer == "Brekke" and "holt" in {r["doc_id"] for r in ans.read}
    off = run("kair", llm(), retriever)
    assert off.usage["cycles"] == 2 and not steps(off, "linked_docs") and off.answer == "Brekke"


def test_a_clipped_context_shows_the_generator_the_sentences_nearest_what_is_known(tmp_path):
    """answer_excerpts: C packed into too few characters shows each passage's sentences
    nearest the question and the known facts, not only its opening (where the 1.5B's
    answer was cut off); off, the opening."""
    filler = " ".join(f"In {1890 + i} she printed a pamphlet on herring prices." for i in range(6))
    holt = ("holt", "Maren Holt", f"Maren Holt (1871-1950) was a Norwegian printer and writer. {filler} She grew up in Brekke, a village.")
    retriever = bm25_retriever(tmp_path, [d if d[0] != "holt" else holt for d in DOCS])
    for excerpts in (True, False):
        model = llm()
        ans = run("kair", model, retriever, {"context_chars": 450, "update_chars": None, "doc_chars": None, "answer_excerpts": excerpts})
        generator = next(c.messages[-1]["content"] for c in model.calls if c.output_model.__name__ == "AnswerOutput")
        shown = generator.split("Maren Holt (1871-1950)", 1)[1]
        assert ("grew up in Brekke" in shown) is excerpts and [s.doc_id for s in ans.sources] == ["salt-winter", "holt"]


def test_a_claim_is_read_from_its_passage_not_as_known(retriever):
    """A known fact that restates the question with an answer added is the update's guess
    at the answer (`drop_claims`): the generator reads C without it, the other known facts
    still first. With the option off, or with an empty C, it is read as known."""
    claim = "The author of Salt Winter was raised in Brekke"

    def update(user):
        p = numbered(user)
        if "Maren Holt" in p:
            return {"facts": [{"text": claim, "passage": p["Maren Holt"], "status": "new"}], "closed": [], "new_gaps": []}
        return updater(user)

    nothing_kept = lambda u: {"keep": []}  # noqa: E731
    for config, keep, dropped in (({}, keep_relevant, True), ({"drop_claims": False}, keep_relevant, False), ({}, nothing_kept, False)):
        model = llm(update=update, keep=keep)
        ans = run("kair", model, retriever, {"max_steps": 3, **config})
        assert [s.outputs["known"] for s in steps(ans, "state")][-1] == ["Salt Winter was written by Maren Holt", claim]
        gen = next(c.messages[-1]["content"] for c in model.calls if c.output_model.__name__ == "AnswerOutput")
        assert ("Salt Winter was written by Maren Holt" in gen) and (claim in gen) is not dropped, config
        assert steps(ans, "generator")[0].outputs["claims_dropped"] == ([claim] if dropped else []), config
        assert (DOCS[1][2] in gen) is (keep is keep_relevant) and ans.answer == "Brekke"


def test_the_generator_reads_the_passages_of_c_the_question_and_the_known_facts_rank_highest(retriever):
    """answer_passages: C holds all four pages; the generator reads the two that the
    question and the known facts rank highest (the run's retriever searching only C), not
    all of C in the order the facts were learned. The question alone would rank the
    Olympics page first; the known facts name the author, whose page then comes first.
    A retriever that cannot search a subset keeps C's first two; `None` (the paper)
    reads all of C. (named_passages off: it ranks all of C, next test.)"""
    assert retriever.search(QUESTION, 1)[0].doc_id == "olympics"
    keep_all = lambda u: {"keep": list(numbered(u.split("Passages:\n", 1)[1]).values())}  # noqa: E731

    class Plain:  # a retriever over a remote engine: search, no subsets
        name = "plain"

        def search(self, query, k=10, offset=0):
            return retriever.search(query, k, offset)

    for source, n, shown in ((retriever, 2, ["holt", "salt-winter"]), (Plain(), 2, ["salt-winter", "holt"]), (retriever, None, ["salt-winter", "holt", "olympics", "herring"])):
        ans = run("kair", llm(keep=keep_all), source, {"answer_passages": n, "named_passages": False})
        assert ans.usage["context"] == 4 and [s.doc_id for s in ans.sources] == shown, (source, n)
        nearest = steps(ans, "answer_passages")
        assert [s.outputs["chunk_ids"] for s in nearest] == ([[f"{d}#0" for d in shown]] if source is retriever and n else []), (source, n)
        assert ans.answer == "Brekke"  # what is known still comes first


def test_named_passages_keeps_the_page_the_question_names_among_those_read(retriever):
    """named_passages: the page whose title the question names ("Salt Winter") is read even
    when the question and K rank it below `answer_passages`; the generator step records it
    as kept by name. Off (the default), the ranking's first n alone."""
    keep_all = lambda u: {"keep": list(numbered(u.split("Passages:\n", 1)[1]).values())}  # noqa: E731
    for named, shown, by_name in ((False, ["holt"], []), (True, ["salt-winter"], ["salt-winter#0"])):
        ans = run("kair", llm(keep=keep_all), retriever, {"answer_passages": 1, "named_passages": named})
        assert [s.doc_id for s in ans.sources] == shown, named
        assert steps(ans, "generator")[0].outputs["kept_by_name"] == by_name
    ans = run("kair", llm(keep=keep_all), retriever, {"answer_passages": 2, "named_passages": True})
    assert [s.doc_id for s in ans.sources] == ["holt", "salt-winter"]  # in the first 2 anyway: nothing kept by name
    assert steps(ans, "generator")[0].outputs["kept_by_name"] == []


def test_a_title_stands_for_its_passages_words_at_most_title_facts_an_update_and_closes_nothing(retriever):
    """`title_facts`: the 1.5B named the bridge page ("Dawn Penn") instead of stating what it
    says. That page's own words become the fact; they restate the question (the search
    found the page by them) yet must not close it, and at most `title_facts` of them count."""
    from marag.agents.kair import NewFact, Update
    from marag.index.base import Hit

    question = "Who produced the single that the reggae singer born in 1952 in Kingston was most known for?"
    texts = {
        "Dawn Penn": "Dawn Penn (born 1952 in Kingston) is a reggae singer. She is most known for her single You Don't Love Me.",
        "Junior Byles": "Junior Byles (born 1948 in Kingston) is a reggae singer.",
        "Mikey Spice": "Mikey Spice (born 1965 in Kingston) is a reggae singer.",
    }
    hits = [Hit(doc_id=t, chunk_id=f"{t}#0", score=1.0, text=x, title=t) for t, x in texts.items()]
    update = Update(facts=[NewFact(text=t, passage=n, status="new") for n, t in enumerate(texts, 1)])
    for cap, expected in [(2, 2), (0, 0)]:
        st = KnowledgeState(required=[question])
        strat = make_strategy("kair", ScriptedLLM(), retriever, {"title_facts": cap})
        changed = strat._apply(question, st, [question], hits, update)
        assert [f.text for f in st.known] == list(texts.values())[:expected] and changed == bool(expected)
        assert answers(st.known[0].text, question) if expected else True  # it restates the question ...
        assert st.required == [question]  # ... and leaves it open
        assert [f.source for f in st.known] == [h.chunk_id for h in hits][:expected]


def test_the_first_search_is_the_question_with_no_planner_call(retriever):
    """`question_first` (the default; the other tests turn it off): the first cycle
    searches the whole question (what a retrieve-then-read baseline searches) without
    asking the planner; the planner writes the queries of the later cycles. Off (and in
    the paper's mode) it writes the first. With competing agents only the first agent's
    first search is the question; the others plan theirs."""
    planned: list[str] = []

    def plan(user):
        planned.append(user)
        return planner(user)

    ans = run("kair", llm(plan=plan), retriever, {"question_first": True, "max_steps": 6})
    assert [s.inputs["query"] for s in steps(ans, "search")] == [QUESTION, "Maren Holt grew up"]
    assert steps(ans, "query_choice")[0].outputs == {"rejected": [], "chosen": QUESTION, "rule": "question_first"}
    assert len(planned) == 1 and "Salt Winter was written by Maren Holt" in planned[0]  # only the second cycle's
    assert ans.answer == "Brekke"
    planned.clear()
    off = run("kair", llm(plan=plan), retriever, {"max_steps": 6})
    assert [s.inputs["query"] for s in steps(off, "search")][0] == "Salt Winter author" and len(planned) == 2
    assert KAIRConfig(paper=True).question_first is False
    planned.clear()
    two = run("kair_2", llm(plan=plan), retriever, {"question_first": True, "max_steps": 1})
    rules = [s.outputs.get("rule") for s in steps(two, "query_choice")]
    assert rules == ["question_first", None] and len(planned) == 1  # the second agent planned its search
