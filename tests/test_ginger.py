"""GINGER: rewrite composition, RRF, point/pairwise reranking (bounded), verified nugget
tags, clustering and ranking of nuggets, the word limit, and passage ids that survive
the fluency rewrite; scripted models over a real BM25 + MiniLM index of the sample."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from marag.agents.ginger import search_strings, spans
from marag.errors import MaragError
from marag.index.facets import BERTOPIC_INSTALL, agglomerative, cluster_facets, singletons_for_outliers
from marag.index.fusion import rrf
from marag.index.pipeline import index_corpus
from marag.index.store import IndexConfig
from marag.llm import ScriptedLLM
from marag.strategies import make_strategy
from marag.strategies.ginger import limit_words

Q = "How did Ada Lovelace and Grace Hopper shape programming?"


@pytest.fixture(scope="module")
def index(tmp_path_factory, repo):
    return index_corpus(repo / "samples" / "corpus", tmp_path_factory.mktemp("g") / "idx", IndexConfig(), progress=False)


def test_rewrites_are_combined_with_the_question():
    assert search_strings("q?", ["aspect one", "  aspect   two ", "Q?", ""]) == ["q?", "aspect one q?", "aspect two q?"]


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


def test_clusters_and_word_limit():
    v = np.array([[1, 0, 0], [0.99, 0.1, 0], [0, 1, 0], [0, 0.98, 0.2]], dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    labels = agglomerative(v, ["a"] * 4, 0.3).tolist()
    assert labels == [0, 0, 1, 1]  # numbered in order of first appearance
    assert labels[0] == labels[1] and labels[2] == labels[3] and labels[0] != labels[2]
    s = [{"text": "one two three", "passages": ["a"]}, {"text": "four five", "passages": ["b"]}, {"text": "six", "passages": ["c"]}]
    assert [x["text"] for x in limit_words(s, 5)] == ["one two three", "four five"]
    assert limit_words(s, 2) == [{"text": "one two", "passages": ["a"]}]


def tagger(user: str) -> dict:
    """Tags what each sample passage says about programming; copies the passage exactly."""
    passage = re.search(r"^Passage: (.*)$", user, re.M).group(1)
    for span in ("Analytical Engine", "compiler", "COBOL"):
        if span in passage:
            passage = passage.replace(span, f"<n>{span}</n>", 1)
    return {"tagged": passage}


def scripted(**over):
    replies = {
        "Draft": lambda u: {"answer": "Lovelace wrote the first program; Hopper built compilers."},
        "Rewrites": lambda u: {"rewrites": ["Ada Lovelace first program", "Grace Hopper compiler", "COBOL history"]},
        "Preference": lambda u: {"better": "B" if "Grace Hopper" in u.split("Passage B:", 1)[1] else "A"},
        "Tagged": tagger,
        "FacetSentence": lambda u: {"sentence": "Summary of: " + "; ".join(re.findall(r"^- (.*)$", u, re.M))},
        "Fluent": lambda u: {"sentences": [f"Fluent sentence {i}." for i in range(1, len(re.findall(r"^\d+\. ", u, re.M)) + 1)]},
    }
    replies.update(over)
    return ScriptedLLM(fn=lambda messages, output: replies[output.__name__](messages[-1]["content"]))


def test_a_full_run_keeps_attribution_through_the_fluency_step(index):
    llm = scripted()
    ans = asyncio.run(make_strategy("ginger", llm, index.retriever(), {"k": 6, "m": 4}).run(Q))
    steps = {s.agent: s for s in ans.trace.steps}
    assert steps["rewriter.search_strings"].outputs["search_strings"][1] == f"Ada Lovelace first program {Q}"
    assert steps["rerank"].outputs["pairwise_comparisons"] == 5  # k - 1, bounded
    sentences = ans.details["sentences"]
    assert sentences and all(s["text"].startswith("Fluent sentence") for s in sentences)
    clusters = steps["clusterer"].outputs["clusters"]
    # each final sentence keeps the passages of the nuggets of its facet
    nugget_source = {t: c for s in ans.trace.steps if s.agent == "nugget_check" for t in s.outputs["spans"] for c in [s.inputs["chunk_id"]]}
    for sent, facet in zip(sentences, clusters):
        assert sent["passages"] == list(dict.fromkeys(nugget_source[t] for t in facet))
    assert {"computing/ada-lovelace.md#0", "computing/grace-hopper.md#0"} <= {c for s in sentences for c in s["passages"]}
    assert ans.answer == " ".join(s["text"] for s in sentences) and len(ans.answer.split()) <= 150
    assert {s.chunk_id for s in ans.sources} == {c for s in sentences for c in s["passages"]}
    for role in ("rewriter", "retrieve", "rerank", "nugget_detector", "clusterer", "summarizer", "fluency"):
        assert role in [s.agent for s in ans.trace.steps]


def test_an_altered_copy_is_rejected_then_retried(index):
    calls = {"n": 0}

    def sloppy(user: str) -> dict:
        calls["n"] += 1
        if "copy it exactly this time" not in user:
            return {"tagged": "Something else <n>entirely</n>."}
        return tagger(user)

    ans = asyncio.run(make_strategy("ginger_no_rewrite", scripted(Tagged=sloppy), index.retriever(), {"m": 2, "pairwise": False}).run(Q))
    checks = [s for s in ans.trace.steps if s.agent == "nugget_check"]
    assert sorted(c.status for c in checks) == ["ok", "ok", "refused", "refused"]  # each passage: rejected, then accepted
    assert calls["n"] == 4
    assert not [s for s in ans.trace.steps if s.agent == "rewriter"]  # the variant skips rewriting


def test_a_fluency_rewrite_that_changes_the_count_is_ignored(index):
    llm = scripted(Fluent=lambda u: {"sentences": ["Only one."]})
    ans = asyncio.run(make_strategy("ginger", llm, index.retriever(), {"k": 4, "m": 4, "cluster_threshold": 0.05}).run(Q))
    sentences = ans.details["sentences"]
    assert len(sentences) >= 2 and all(s["text"].startswith("Summary of:") for s in sentences)


def test_a_user_supplied_onnx_cross_encoder_ranks_passages(tmp_path, repo, index):
    onnx = pytest.importorskip("onnx", reason="onnx builds the tiny test model (pip install onnx; in marag[dev])")
    from onnx import TensorProto, helper

    # a stand-in cross-encoder: relevance = number of passage tokens (token type 1)
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["b", "s"]) for n in ("input_ids", "attention_mask", "token_type_ids")]
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", 1])
    nodes = [
        helper.make_node("Cast", ["token_type_ids"], ["t"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["t", "axes"], ["logits"], keepdims=1),
    ]
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    model = helper.make_model(helper.make_graph(nodes, "ce", inputs, [out], [axes]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "ce.onnx"
    onnx.save(model, str(path))
    tokenizer = repo / "src" / "marag" / "resources" / "minilm" / "tokenizer.json"

    from marag.index.cross_encoder import OnnxCrossEncoder

    ce = OnnxCrossEncoder(path, tokenizer)
    scores = ce.score("a question", ["short", "a much longer passage with many more words in it", "mid length passage"])
    assert scores.argsort().tolist() == [0, 2, 1]
    spec = {"model": str(path), "tokenizer": str(tokenizer)}
    ans = asyncio.run(make_strategy("ginger", scripted(), index.retriever(), {"pointwise": "cross_encoder", "cross_encoder": spec, "pairwise": False, "m": 3}).run(Q))
    assert next(s for s in ans.trace.steps if s.agent == "rerank").inputs["pointwise"] == "cross_encoder"


def test_an_unknown_clusterer_is_refused_before_any_question(index):
    with pytest.raises(MaragError, match="unknown facet_clusterers 'topics'"):
        make_strategy("ginger", scripted(), index.retriever(), {"clusterer": "topics"})


def test_bertopic_groups_planted_facets():
    pytest.importorskip("bertopic", reason="BERTopic is an optional extra: " + BERTOPIC_INSTALL)
    rng = np.random.default_rng(0)
    centers = np.eye(8, dtype=np.float32)[:3]  # three planted facets, 5 nuggets each
    v = np.concatenate([c + 0.05 * rng.standard_normal((5, 8)).astype(np.float32) for c in centers])
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    texts = [f"facet {i // 5} nugget {i} about topic{i // 5} words" for i in range(15)]
    labels = cluster_facets("bertopic", v, texts, 0.5, seed=0)
    assert len(labels) == 15
    groups = [set(labels[i * 5 : (i + 1) * 5].tolist()) for i in range(3)]
    assert all(len(g) == 1 for g in groups) and len(set.union(*groups)) == 3  # each facet whole, facets apart
    assert labels.tolist() == sorted(labels.tolist())  # numbered in order of first appearance
    few = cluster_facets("bertopic", v[:3], texts[:3], 0.5)  # too few for UMAP: agglomerative
    assert few.tolist() == [0, 0, 0]


def test_outliers_become_facets_of_their_own():
    assert singletons_for_outliers(np.array([3, -1, 3, 0, -1])).tolist() == [0, 1, 0, 2, 3]


def test_no_verified_nugget_falls_back_to_each_passages_closest_sentence(index):
    untagged = lambda u: {"tagged": re.search(r"^Passage: (.*)$", u, re.M).group(1)}  # exact copy, nothing tagged
    ans = asyncio.run(make_strategy("ginger", scripted(Tagged=untagged), index.retriever(), {"k": 4, "m": 3}).run(Q))
    fallback = [s for s in ans.trace.steps if s.agent == "nugget_fallback"]
    assert len(fallback) == 1 and len(fallback[0].outputs["nuggets"]) == 3
    assert ans.answer.strip() and ans.details["sentences"]
    sources = {s.chunk_id for s in ans.sources}
    assert sources and sources <= {c for s in ans.details["sentences"] for c in s["passages"]}
    off = asyncio.run(make_strategy("ginger", scripted(Tagged=untagged), index.retriever(), {"k": 4, "m": 3, "nugget_fallback": False}).run(Q))
    assert off.answer == "" and not [s for s in off.trace.steps if s.agent == "nugget_fallback"]


def test_paper_mode_has_no_fallback_and_reads_whole_passages(index):
    untagged = lambda u: {"tagged": re.search(r"^Passage: (.*)$", u, re.M).group(1)}
    strat = make_strategy("ginger_paper", scripted(Tagged=untagged), index.retriever(), {"k": 4, "m": 3})
    assert strat.config.paper and not strat.config.nugget_fallback and strat.config.passage_chars == 3000
    ans = asyncio.run(strat.run(Q))
    assert ans.answer == "" and not [s for s in ans.trace.steps if s.agent == "nugget_fallback"]
    # Whole passages reach the nugget detector (the default clips them at 600 characters).
    seen: list[str] = []

    def recording(user: str) -> dict:
        seen.append(re.search(r"^Passage: (.*)$", user, re.M).group(1))
        return tagger(user)

    for name, longest in (("ginger_paper", lambda n: n > 600), ("ginger", lambda n: n <= 600)):
        seen.clear()
        ans = asyncio.run(make_strategy(name, scripted(Tagged=recording), index.retriever(), {"k": 4, "m": 4}).run(Q))
        assert ans.answer and longest(max(map(len, seen)))
