"""GINGER: rewrite composition (separate or concatenated), RRF, point/pairwise reranking
(both orders, bounded), the cross-encoder reranker, verified nugget tags, clustering and
ranking of facets (similarity or pairwise), answer styles and length limits, passage ids
that survive the fluency rewrite, and the paper switch; scripted models over a real
BM25 + MiniLM index of the sample."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from marag.agents.ginger import concatenated_query, picked, search_strings, spans
from marag.agents.search import facets as facets_module
from marag.agents.search.facets import (
    BERTOPIC_INSTALL,
    agglomerative,
    cluster_facets,
    singletons_for_outliers,
)
from marag.agents.search.fusion import rrf
from marag.errors import MaragError
from marag.index.cross_encoder import CROSS_ENCODER_ENV, OnnxCrossEncoder
from marag.index.pipeline import index_corpus
from marag.index.rerank import cross_encoder_available, get_reranker
from marag.index.store import IndexConfig
from marag.llm import ScriptedLLM
from marag.strategies import make_strategy
from marag.strategies.ginger import (
    GingerConfig,
    all_pairs,
    all_pairs_depth,
    bubble_both_orders,
    limit_length,
)

Q = "How did Ada Lovelace and Grace Hopper shape programming?"
HOPPER = "computing/grace-hopper.md#0"
LOVELACE = "computing/ada-lovelace.md#0"


@pytest.fixture(scope="module")
def index(tmp_path_factory, repo):
    return index_corpus(repo / "samples" / "corpus", tmp_path_factory.mktemp("g") / "idx", IndexConfig(), progress=False)


@pytest.fixture(autouse=True)
def no_installed_cross_encoder(monkeypatch):
    monkeypatch.delenv(CROSS_ENCODER_ENV, raising=False)


def test_rewrites_are_combined_with_the_question():
    assert search_strings("q?", ["aspect one", "  aspect   two ", "Q?", ""]) == ["q?", "aspect one q?", "aspect two q?"]
    assert concatenated_query("q?", ["aspect one", "  aspect   two ", "Q?", "", "aspect one"]) == "q? aspect one aspect two"


def test_rrf_on_hand_made_rankings():
    fused = rrf([["a", "b", "c"], ["b", "a", "d"]], k=60)
    assert [d for d, _ in fused] == ["a", "b", "c", "d"]  # a and b tie: first seen wins; so do c and d
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62) and fused[2][1] == pytest.approx(1 / 63)
    assert [d for d, _ in rrf([["x", "y"], ["y"]], k=0)] == ["y", "x"]  # 1/2 + 1/1 beats 1/1


def test_tag_verification():
    text = "Ada Lovelace wrote a program for the Analytical Engine in 1843."
    assert spans(text, "Ada Lovelace wrote <n>a program for the Analytical Engine</n> in <n>1843</n>.") == [
        "a program for the Analytical Engine", "1843",
    ]  # fmt: skip
    assert spans(text, "Ada Lovelace wrote <n>a poem</n> in 1843.") is None  # the tagged span's words changed
    assert spans(text, "Ada wrote <n>a program for the Analytical Engine</n> in 1843.") is None
    assert spans(text, text) == []
    assert spans(text, "Ada Lovelace wrote <n>a program for the Analytical Engine in 1843.") is None  # unclosed tag


def test_clusters_and_length_limits():
    v = np.array([[1, 0, 0], [0.99, 0.1, 0], [0, 1, 0], [0, 0.98, 0.2]], dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    assert agglomerative(v, ["a"] * 4, 0.3).tolist() == [0, 0, 1, 1]  # numbered in order of first appearance
    s = [{"text": "one two three", "passages": ["a"]}, {"text": "four five", "passages": ["b"]}, {"text": "six", "passages": ["c"]}]
    assert [x["text"] for x in limit_length(s, 5)] == ["one two three", "four five"]
    assert limit_length(s, 2) == [{"text": "one two", "passages": ["a"]}]
    # characters: "one two three four five" is 23 characters; "... six" would be 27
    assert [x["text"] for x in limit_length(s, 100, 23)] == ["one two three", "four five"]
    assert [x["text"] for x in limit_length(s, 100, 22)] == ["one two three"]
    assert limit_length(s, 100, 9) == [{"text": "one two", "passages": ["a"]}]  # cut at a word


def tagger(user: str) -> dict:
    """Tags what each sample passage says about programming; copies the passage exactly."""
    passage = re.search(r"^Passage: (.*)$", user, re.M).group(1)
    for span in ("Analytical Engine", "compiler", "COBOL"):
        if span in passage:
            passage = passage.replace(span, f"<n>{span}</n>", 1)
    return {"tagged": passage}


def picker(user: str) -> dict:
    """Names the sentences about programming, as the sentence protocol asks."""
    lines = re.findall(r"^(\d+)\. (.*)$", user.split("Passage sentences:", 1)[1], re.M)
    return {"sentences": [int(n) for n, text in lines if any(w in text for w in ("Analytical Engine", "compiler", "COBOL"))]}


def prefers_hopper(user: str) -> dict:
    """A consistent judge: the passage (or group) that mentions Grace Hopper, in either position."""
    a, b = shown(user)
    return {"better": "B" if "Hopper" in b and "Hopper" not in a else "A"}


def shown(user: str) -> tuple[str, str]:
    """The two items a pairwise prompt shows (A, B), without the question."""
    after_a = re.split(r"^(?:Passage|Group) A:", user, maxsplit=1, flags=re.M)[1]
    a, b = re.split(r"^(?:Passage|Group) B:", after_a, maxsplit=1, flags=re.M)
    return a, b


def scripted(**over):
    replies = {
        "Draft": lambda u: {"answer": "Lovelace wrote the first program; Hopper built compilers."},
        "Rewrites": lambda u: {"rewrites": ["Ada Lovelace first program", "Grace Hopper compiler", "COBOL history"]},
        "Preference": prefers_hopper,
        "Tagged": tagger,
        "Picked": picker,
        "FacetSentence": lambda u: {"sentence": "Summary of: " + "; ".join(re.findall(r"^- (.*)$", u, re.M))},
        "Fluent": lambda u: {"sentences": [f"Fluent sentence {i}." for i in range(1, len(re.findall(r"^\d+\. ", u, re.M)) + 1)]},
        "AnswerOutput": lambda u: {"answer": "Grace Hopper"},
    }
    replies.update(over)
    return ScriptedLLM(fn=lambda messages, output: replies[output.__name__](messages[-1]["content"]))


def run(name, llm, index, settings):
    return asyncio.run(make_strategy(name, llm, index.retriever(), settings).run(Q))


def steps_of(ans, agent):
    return [s for s in ans.trace.steps if s.agent == agent]


def test_a_full_run_keeps_attribution_through_the_fluency_step(index):
    ans = run("ginger", scripted(), index, {"k": 6, "m": 4, "pairwise": True})
    steps = {s.agent: s for s in ans.trace.steps}
    assert steps["rewriter.search_strings"].outputs["search_strings"][1] == f"Ada Lovelace first program {Q}"
    assert steps["rerank"].outputs["pairwise_comparisons"] == 10  # 2 (k - 1): each neighbouring pair in both orders
    # the nugget detector read exactly the reranked top m
    assert sorted(s.inputs["chunk_id"] for s in steps_of(ans, "nugget_check")) == sorted(steps["rerank"].outputs["top"])
    sentences = ans.details["sentences"]
    assert sentences and all(s["text"].startswith("Fluent sentence") for s in sentences)
    clusters = steps["clusterer"].outputs["clusters"]
    # each final sentence keeps the passages of the nuggets of its facet
    nugget_source = {t: s.inputs["chunk_id"] for s in steps_of(ans, "nugget_check") for t in s.outputs["spans"]}
    for sent, facet in zip(sentences, clusters):
        assert sent["passages"] == list(dict.fromkeys(nugget_source[t] for t in facet))
    assert {LOVELACE, HOPPER} <= {c for s in sentences for c in s["passages"]}
    assert ans.answer == " ".join(s["text"] for s in sentences) and len(ans.answer.split()) <= 150
    assert {s.chunk_id for s in ans.sources} == {c for s in sentences for c in s["passages"]}


def test_an_altered_copy_is_rejected_then_retried(index):
    calls = {"n": 0}

    def sloppy(user: str) -> dict:
        calls["n"] += 1
        if "copy it exactly this time" not in user:
            return {"tagged": "Something else <n>entirely</n>."}
        return tagger(user)

    ans = run("ginger_no_rewrite", scripted(Tagged=sloppy), index, {"m": 2, "pairwise": False, "nuggets": "tags"})
    checks = steps_of(ans, "nugget_check")
    assert sorted(c.status for c in checks) == ["ok", "ok", "refused", "refused"]  # each passage: rejected, then accepted
    assert calls["n"] == 4
    assert not steps_of(ans, "rewriter")  # the variant skips rewriting


def test_a_fluency_rewrite_that_changes_the_count_is_ignored(index):
    ans = run("ginger", scripted(Fluent=lambda u: {"sentences": ["Only one."]}), index, {"k": 4, "m": 4, "cluster_threshold": 0.05})
    sentences = ans.details["sentences"]
    assert len(sentences) >= 2 and all(s["text"].startswith("Summary of:") for s in sentences)


# -- answer styles and lengths ------------------------------------------------------------------

LONG_FLUENT = lambda u: {"sentences": [f"Fluent sentence {i} " + "with many more words " * 8 + "." for i in range(1, len(re.findall(r"^\d+\. ", u, re.M)) + 1)]}


def test_a_short_answer_style_gives_a_concise_answer_from_the_facets(index):
    seen = []

    def concise(user: str) -> dict:
        seen.append(re.findall(r"^\d+\. (.*)$", user, re.M))
        return {"answer": "The first algorithm and the first compiler"}

    ans = run("ginger", scripted(Fluent=LONG_FLUENT, AnswerOutput=concise), index, {"k": 4, "m": 4, "cluster_threshold": 0.05, "answer_style": "short"})
    assert ans.answer == "The first algorithm and the first compiler"
    # the concise step read the facets' grounded sentences, and the sources are their passages
    assert len(seen) == 1 and seen[0] == [s["text"] for s in ans.details["sentences"]] and len(seen[0]) >= 2
    assert {s.chunk_id for s in ans.sources} == {c for s in ans.details["sentences"] for c in s["passages"]}
    assert not steps_of(ans, "fluency")  # its sentences would not be shown


def test_a_short_answer_in_paper_mode_is_the_top_facet_sentence_within_the_style_limit(index):
    fluent = lambda u: {"sentences": ["Fluent sentence " + "with many more words " * 13 + "."]}  # noqa: E731 292 characters
    ans = run("ginger_paper", scripted(Fluent=fluent), index, {"m": 4, "answer_style": "short"})
    assert ans.answer == ("Fluent sentence " + "with many more words " * 13)[:201].rsplit(" ", 1)[0]  # cut at a word
    assert len(ans.answer) <= 200 and len(ans.details["sentences"]) == 1
    assert len(steps_of(ans, "summarizer")) == 1 and not steps_of(ans, "concise_answer")  # one facet fits 200 characters


def test_a_long_answer_keeps_within_answer_max_chars(index):
    settings = {"k": 4, "m": 4, "cluster_threshold": 0.05, "answer_max_chars": 250}
    ans = run("ginger", scripted(Fluent=LONG_FLUENT), index, settings)
    assert ans.answer and len(ans.answer) <= 250
    assert ans.answer == " ".join(s["text"] for s in ans.details["sentences"])
    assert all(s["text"].endswith(".") for s in ans.details["sentences"])  # whole sentences
    wide = run("ginger", scripted(Fluent=LONG_FLUENT), index, {**settings, "answer_max_chars": 2000})
    assert len(wide.answer) > 250  # the limit, not the facets, cut the first answer


def test_an_empty_answer_has_no_sources(index):
    ans = run("ginger", scripted(Picked=lambda u: {"sentences": []}), index, {"k": 4, "m": 3, "nugget_fallback": False})
    assert ans.answer == "" and ans.sources == []


def test_no_verified_nugget_falls_back_to_each_passages_closest_sentence(index):
    untagged = lambda u: {"tagged": re.search(r"^Passage: (.*)$", u, re.M).group(1)}
    ans = run("ginger", scripted(Tagged=untagged), index, {"k": 4, "m": 3, "nuggets": "tags"})
    fallback = steps_of(ans, "nugget_fallback")
    assert len(fallback) == 1 and len(fallback[0].outputs["nuggets"]) == 3
    assert ans.answer.strip() and ans.details["sentences"]
    sources = {s.chunk_id for s in ans.sources}
    assert sources and sources <= {c for s in ans.details["sentences"] for c in s["passages"]}
    off = run("ginger", scripted(Tagged=untagged), index, {"k": 4, "m": 3, "nugget_fallback": False, "nuggets": "tags"})
    assert off.answer == "" and not steps_of(off, "nugget_fallback")


def test_nuggets_are_the_sentences_the_model_names_by_number(index):
    """The default protocol: numbered sentences, the model names the helpful ones; numbers
    out of range or repeated are dropped, nothing is copied, one call a passage."""
    model = scripted(Picked=lambda u: {"sentences": [2, 9, 1, 2]})
    ans = run("ginger", model, index, {"k": 4, "m": 3})
    checks = steps_of(ans, "nugget_check")
    assert len(checks) == 3 and all(c.status == "ok" for c in checks)
    prompts = [x.messages[-1]["content"] for x in model.calls if x.output_model.__name__ == "Picked"]
    expected = []
    for prompt in prompts:
        lines = dict(re.findall(r"^(\d+)\. (.*)$", prompt.split("Passage sentences:", 1)[1], re.M))
        expected.append([lines[n] for n in ("1", "2") if n in lines])  # passage order, each once
    assert len(prompts) == 3 and sorted(c.outputs["spans"] for c in checks) == sorted(expected)
    assert not any(x.output_model.__name__ == "Tagged" for x in model.calls)
    assert not steps_of(ans, "nugget_fallback") and ans.answer


def test_picked_sentences():
    s = ["One.", "Two  words.", "Three."]
    assert picked(s, [3, 1, 3, 0, 7]) == ["One.", "Three."]
    assert picked(s, []) == [] and picked([], [1]) == []


# -- pairwise reranking ------------------------------------------------------------------------


def test_pairwise_asks_both_orders_so_a_position_bias_cancels(index):
    asked = []

    def always_b(user: str) -> dict:
        asked.append(tuple(re.findall(r"^Passage [AB]: (.{40})", user, re.M)))
        return {"better": "B"}

    pointwise = steps_of(run("ginger", scripted(), index, {"k": 6, "m": 6, "pairwise": False}), "rerank")[0].outputs["top"]
    ans = run("ginger", scripted(Preference=always_b), index, {"k": 6, "m": 6, "pairwise": True})
    rerank = steps_of(ans, "rerank")[0].outputs
    assert rerank["top"] == pointwise  # a judge that always says "B" moves nothing
    assert len(asked) == rerank["pairwise_comparisons"] == 10
    assert all((b, a) in asked for a, b in asked)  # every pair in both orders
    # a consistent judge does move a passage: Grace Hopper's page rises to the top
    moved = steps_of(run("ginger", scripted(), index, {"k": 6, "m": 6, "pairwise": True}), "rerank")[0].outputs
    assert moved["top"][0] == HOPPER and HOPPER in pointwise[1:6]


def test_all_pairs_and_bubble_orders():
    strength = [3, 1, 4, 0, 2]  # hidden quality of 5 items shown in positions 0..4

    async def consistent(a, b):
        return strength[a] > strength[b]

    async def first_always(a, b):
        return True

    order, calls = asyncio.run(all_pairs(5, consistent))
    assert order == [2, 0, 4, 1, 3] and calls == 20  # by wins: DuoT5's aggregation
    assert asyncio.run(all_pairs(5, first_always)) == ([0, 1, 2, 3, 4], 20)  # every item wins n-1: order stays
    order, calls = asyncio.run(bubble_both_orders(5, consistent))
    assert order == [2, 0, 1, 4, 3] and calls == 8  # one pass bottom-up: the best rises to the top
    assert asyncio.run(bubble_both_orders(5, first_always)) == ([0, 1, 2, 3, 4], 8)
    assert [all_pairs_depth(40, c) for c in (1, 2, 6, 30, 41, 1560, 10**6)] == [1, 2, 3, 6, 6, 40, 40]


def test_the_papers_all_pairs_scheme_is_bounded_and_reported(index):
    asked = []

    def judge(user: str) -> dict:
        asked.append(user)
        return prefers_hopper(user)

    ans = run("ginger", scripted(Preference=judge), index, {"k": 8, "m": 8, "pairwise": True, "pairwise_scheme": "all_pairs", "pairwise_max_calls": 30})
    rerank = steps_of(ans, "rerank")[0].outputs
    assert rerank["pairwise_depth"] == 6 and rerank["pairwise_comparisons"] == 30 == len(asked)  # 6 * 5 <= 30 < 7 * 6
    assert ans.usage["pairwise_comparisons"] == 30
    assert rerank["top"][0] == HOPPER and rerank["top"][6:] == rerank["pointwise_top"][6:8]  # below the depth: pointwise order


# -- the cross-encoder reranker ------------------------------------------------------------------


def tiny_cross_encoder(tmp_path, repo, word: str = "hopper"):
    """A stand-in ONNX cross-encoder: relevance = how often `word` occurs in the passage
    (token type 1), so its ranking is known in advance and unlike the embeddings'."""
    onnx = pytest.importorskip("onnx", reason="onnx builds the tiny test model (pip install onnx; in marag[dev])")
    from onnx import TensorProto, helper
    from tokenizers import Tokenizer

    tokenizer = repo / "src" / "marag" / "resources" / "minilm" / "tokenizer.json"
    token = Tokenizer.from_file(str(tokenizer)).token_to_id(word)
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["b", "s"]) for n in ("input_ids", "attention_mask", "token_type_ids")]
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", 1])
    nodes = [
        helper.make_node("Equal", ["input_ids", "word"], ["hit"]),
        helper.make_node("Cast", ["hit"], ["hitf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["token_type_ids"], ["passage"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["hitf", "passage"], ["counted"]),
        helper.make_node("ReduceSum", ["counted", "axes"], ["logits"], keepdims=1),
    ]
    consts = [helper.make_tensor("word", TensorProto.INT64, [], [token]), helper.make_tensor("axes", TensorProto.INT64, [1], [1])]
    model = helper.make_model(helper.make_graph(nodes, "ce", inputs, [out], consts), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    d = tmp_path / "ce"
    d.mkdir()
    onnx.save(model, str(d / "model.onnx"))
    (d / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    return d


def test_the_cross_encoder_reranker_ranks_by_its_model(tmp_path, repo, index, monkeypatch):
    d = tiny_cross_encoder(tmp_path, repo)
    ce = get_reranker("cross_encoder", model=str(d / "model.onnx"), tokenizer=str(d / "tokenizer.json"))
    assert ce.score("q", ["Grace Hopper met Hopper", "no such name", "Hopper"]).tolist() == [2.0, 0.0, 1.0]
    hits = index.retriever("dense").search("Which river carries the most water?", 12)
    assert hits[0].chunk_id != HOPPER
    reranked = ce.rerank("Which river carries the most water?", hits)
    assert reranked[0].chunk_id == HOPPER and [h.chunk_id for h in reranked[1:]] == [h.chunk_id for h in hits if h.chunk_id != HOPPER]
    # installed once, found by name with no options
    assert not cross_encoder_available()
    with pytest.raises(MaragError, match="no cross-encoder is installed"):
        get_reranker("cross_encoder")
    monkeypatch.setenv(CROSS_ENCODER_ENV, str(d))
    assert cross_encoder_available() and get_reranker("cross_encoder").rerank("q", hits)[0].chunk_id == HOPPER
    assert get_reranker("embedding").rerank("Which river carries the most water?", hits)[0].chunk_id == hits[0].chunk_id
    with pytest.raises(MaragError, match="choose one of: cross_encoder, embedding"):
        get_reranker("colbert")


def test_paper_mode_reranks_with_the_installed_cross_encoder(tmp_path, repo, index, monkeypatch):
    d = tiny_cross_encoder(tmp_path, repo)
    first_always = lambda u: {"better": "A"}
    settings = {"m": 4}
    without = run("ginger_paper", scripted(Preference=first_always), index, settings)
    assert any("no cross-encoder" in n for n in without.details["notes"])
    monkeypatch.setenv(CROSS_ENCODER_ENV, str(d))
    with_ce = run("ginger_paper", scripted(Preference=first_always), index, settings)
    assert not any("cross-encoder" in n for n in with_ce.details["notes"])
    a, b = (steps_of(x, "rerank")[0] for x in (without, with_ce))
    assert (a.inputs["pointwise"], b.inputs["pointwise"]) == ("embedding", "cross_encoder")
    assert b.outputs["pointwise_top"][0] == HOPPER and a.outputs["pointwise_top"] != b.outputs["pointwise_top"]
    assert b.outputs["top"][:4] == b.outputs["pointwise_top"][:4]  # the change is the cross-encoder's


def test_the_cross_encoder_scores_only_its_depth(tmp_path, repo, index, monkeypatch):
    d = tiny_cross_encoder(tmp_path, repo)
    scored: list[int] = []
    score = OnnxCrossEncoder.score

    def counting(self, query, passages, batch_size=16):
        scored.append(len(passages))
        return score(self, query, passages, batch_size)

    monkeypatch.setattr(OnnxCrossEncoder, "score", counting)
    spec = {"model": str(d / "model.onnx"), "tokenizer": str(d / "tokenizer.json")}
    ans = run("ginger", scripted(), index, {"pointwise": "cross_encoder", "cross_encoder": spec, "cross_encoder_depth": 5, "pairwise": False, "m": 3})
    fused = steps_of(ans, "retrieve")[0].outputs["fused"]
    assert fused > 5 and sum(scored) == 5 and ans.usage["pointwise_scored"] == 5
    rerank = steps_of(ans, "rerank")[0].outputs
    assert rerank["pointwise_top"][0] == HOPPER  # within the depth the model orders


def test_pointwise_cross_encoder_without_a_model_is_refused_before_any_question(index):
    with pytest.raises(MaragError, match="none is installed"):
        make_strategy("ginger", scripted(), index.retriever(), {"pointwise": "cross_encoder"})


# -- facets ------------------------------------------------------------------------------------


def test_an_unknown_clusterer_is_refused_before_any_question(index):
    with pytest.raises(MaragError, match="unknown facet_clusterers 'topics'"):
        make_strategy("ginger", scripted(), index.retriever(), {"clusterer": "topics"})


def test_facets_ranked_pairwise_in_both_orders(index):
    groups = []

    def judge(user: str) -> dict:
        groups.append(tuple(re.findall(r"^Group [AB]:\n- (.*)$", user, re.M)))
        a, b = shown(user)
        return {"better": "B" if "COBOL" in b and "COBOL" not in a else "A"}

    settings = {"k": 4, "m": 4, "cluster_threshold": 0.05, "cluster_ranking": "pairwise", "pairwise": False}
    ans = run("ginger", scripted(Preference=judge), index, settings)
    by_similarity = steps_of(ans, "clusterer")[0].outputs["clusters"]
    ranked = steps_of(ans, "facet_ranker")[0].outputs
    n = len(by_similarity)
    assert n >= 3 and not any("COBOL" in t for t in by_similarity[0])  # similarity did not put COBOL first
    assert ranked["comparisons"] == n * (n - 1) == len(groups) and all((b, a) in groups for a, b in groups)
    assert any("COBOL" in t for t in ranked["clusters"][0])
    assert any("COBOL" in t for t in steps_of(ans, "summarizer")[0].inputs["nuggets"])  # the first sentence is about it
    assert ans.usage["facet_comparisons"] == n * (n - 1)


def test_bertopic_groups_planted_facets():
    pytest.importorskip("bertopic", reason="BERTopic is an optional extra: " + BERTOPIC_INSTALL)
    rng = np.random.default_rng(0)
    centers = np.eye(8, dtype=np.float32)[:3]  # three planted facets, 5 nuggets each
    v = np.concatenate([c + 0.05 * rng.standard_normal((5, 8)).astype(np.float32) for c in centers])
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    texts = [f"facet {i // 5} nugget {i} about topic{i // 5} words" for i in range(15)]
    labels = cluster_facets("bertopic", v, texts, 0.5, seed=0)
    groups = [set(labels[i * 5 : (i + 1) * 5].tolist()) for i in range(3)]
    assert all(len(g) == 1 for g in groups) and len(set.union(*groups)) == 3  # each facet whole, facets apart
    assert labels.tolist() == sorted(labels.tolist())  # numbered in order of first appearance
    few = cluster_facets("bertopic", v[:3], texts[:3], 0.5)  # too few for UMAP: agglomerative
    assert few.tolist() == [0, 0, 0]


def test_outliers_become_facets_of_their_own():
    assert singletons_for_outliers(np.array([3, -1, 3, 0, -1])).tolist() == [0, 1, 0, 2, 3]


# -- the paper switch ------------------------------------------------------------------------------

OURS = ["answer_recheck", "answer_type_check", "separate_searches", "pointwise", "pairwise", "pairwise_scheme", "cluster_ranking", "clusterer", "nuggets", "nugget_fallback", "concise_answer", "passage_chars"]


def test_paper_mode_turns_every_addition_off(index):
    assert GingerConfig().additions() == OURS
    on = {"separate_searches": True, "pointwise": "embedding", "pairwise": False, "pairwise_scheme": "bubble", "cluster_ranking": "cosine",
          "clusterer": "agglomerative", "nuggets": "sentences", "nugget_fallback": True, "concise_answer": True, "passage_chars": 600,
          "answer_recheck": True, "answer_type_check": True}  # fmt: skip
    assert set(on) == set(OURS)
    cfg = GingerConfig(paper=True, **on)  # paper wins
    assert cfg.additions() == []
    assert (cfg.k, cfg.pairwise_scheme, cfg.cluster_ranking, cfg.clusterer, cfg.pointwise) == (40, "all_pairs", "pairwise", "bertopic", "cross_encoder")
    assert make_strategy("ginger_paper", scripted(), index.retriever()).config.additions() == []
    # k is the paper's depth (40) in paper mode unless one is given, as UniRAG's k is
    assert GingerConfig().k != 40 and GingerConfig(paper=True, k=12).k == 12


def test_paper_mode_searches_one_concatenated_query(index):
    ans = run("ginger_paper", scripted(), index, {"m": 4})
    queries = steps_of(ans, "retrieve")[0].inputs["queries"]
    assert queries == [f"{Q} Ada Lovelace first program Grace Hopper compiler COBOL history"]
    ours = run("ginger", scripted(), index, {"k": 4, "m": 4})
    assert len(steps_of(ours, "retrieve")[0].inputs["queries"]) == 4  # ours: the question and each rewrite + question


def test_paper_mode_uses_bertopic_when_installed_and_says_when_it_is_not(index, monkeypatch):
    pytest.importorskip("bertopic", reason="BERTopic is an optional extra: " + BERTOPIC_INSTALL)
    strat = make_strategy("ginger_paper", scripted(), index.retriever())
    assert strat.clusterer == "bertopic" and not any(n.startswith("clusterer") for n in strat.notes)
    monkeypatch.setattr(facets_module.bertopic, "requires", ("bertopic", "a_module_that_is_not_installed"))
    with pytest.raises(MaragError, match="not installed"):  # asked for by name: refused
        make_strategy("ginger", scripted(), index.retriever(), {"clusterer": "bertopic"})
    ans = run("ginger_paper", scripted(), index, {"m": 4})
    assert steps_of(ans, "clusterer")[0].inputs["clusterer"] == "agglomerative"
    assert any(n.startswith("clusterer: BERTopic is not installed") for n in ans.details["notes"])


def test_paper_mode_has_no_fallback_and_reads_whole_passages(index):
    untagged = lambda u: {"tagged": re.search(r"^Passage: (.*)$", u, re.M).group(1)}
    ans = run("ginger_paper", scripted(Tagged=untagged), index, {"m": 3})
    assert ans.answer == "" and ans.sources == [] and not steps_of(ans, "nugget_fallback")
    # Whole passages reach the nugget detector (the default clips them at 600 characters).
    seen: list[str] = []

    def recording(user: str) -> dict:
        seen.append(re.search(r"^Passage: (.*)$", user, re.M).group(1))
        return tagger(user)

    for name, longest in (("ginger_paper", lambda n: n > 600), ("ginger", lambda n: n <= 600)):
        seen.clear()
        ans = run(name, scripted(Tagged=recording), index, {"k": 4, "m": 4, "nuggets": "tags"})
        assert ans.answer and longest(max(map(len, seen)))
