"""IRCoT: each reasoning sentence is the next query; the chain stops at the answer, or
a reader answers from every paragraph collected. Scripted models over the planted
two-hop corpus."""

from __future__ import annotations

import asyncio

import pytest

from marag.llm import ScriptedLLM
from marag.strategies import make_strategy
from twohop import DOCS, MORE_DOCS, QUESTION, bm25_retriever


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    return bm25_retriever(tmp_path_factory.mktemp("twohop"), DOCS + MORE_DOCS)


def run(llm, retriever, **cfg):
    return asyncio.run(make_strategy("ircot", llm, retriever, {"k": 1, **cfg}).run(QUESTION))


def _think(messages, output):
    user = messages[-1]["content"]
    if output.__name__ == "AnswerOutput":  # the reader: right only with Holt's paragraph
        assert "Reasoning so far" not in user  # a finished chain's claim is not passed on
        return {"answer": "Brekke" if "grew up in Brekke" in user else "?"}
    if "Reasoning so far: (nothing yet)" in user:
        return {"sentence": "Salt Winter was written by Maren Holt.", "answer": ""}
    return {"sentence": "Maren Holt grew up in Brekke.", "answer": "Brekke (chain)" if "grew up in Brekke" in user else ""}


def test_each_sentence_is_the_next_query_until_the_chain_answers_then_the_reader_answers(retriever):
    llm = ScriptedLLM(fn=_think)
    ans = run(llm, retriever)
    queries = [c.query for s in ans.trace.steps for c in s.searches]
    assert queries[0].startswith("Where was the author") and queries[1] == "Salt Winter was written by Maren Holt."
    assert [c.output_model.__name__ for c in llm.calls] == ["Thought"] * 3 + ["AnswerOutput"]
    assert ans.answer == "Brekke" and "holt" in {s.doc_id for s in ans.sources}
    assert ans.details["answered_by_chain"] is False and ans.details["reasoning_steps"] == 2
    # every paragraph collected was shown to the model, and is a source
    assert {r["chunk_id"] for r in ans.read} == {s.chunk_id for s in ans.sources}


def test_chain_answers_keeps_the_chains_answer_without_a_reader(retriever):
    llm = ScriptedLLM(fn=_think)
    ans = run(llm, retriever, chain_answers=True)
    assert [c.output_model.__name__ for c in llm.calls] == ["Thought"] * 3
    assert ans.answer == "Brekke (chain)" and ans.details["answered_by_chain"] is True


def test_a_stuck_chain_goes_to_the_reader_with_every_paragraph(retriever):
    def stuck(messages, output):
        if output.__name__ == "AnswerOutput":
            return {"answer": "Brekke" if "grew up in Brekke" in messages[-1]["content"] else "?"}
        return {"sentence": "Maren Holt grew up on the coast.", "answer": ""}  # the same sentence every time

    llm = ScriptedLLM(fn=stuck)
    ans = run(llm, retriever, max_steps=5)
    thinks = [c for c in llm.calls if c.output_model.__name__ == "Thought"]
    assert len(thinks) == 2  # the second, repeated sentence ends the chain
    assert ans.details["answered_by_chain"] is False and ans.answer == "Brekke"
    reader = next(s for s in ans.trace.steps if s.agent == "reader")
    assert "Maren Holt grew up on the coast." in reader.inputs["chain"]


def test_the_collection_is_capped(retriever):
    topics = iter(["Herring are fish of the North Sea.", "The printing press spread in Europe.", "Stave churches are wooden.", "Olympics", "Salt"])
    llm = ScriptedLLM(fn=lambda m, o: {"answer": "x"} if o.__name__ == "AnswerOutput" else {"sentence": next(topics), "answer": ""})
    ans = run(llm, retriever, k=2, max_paragraphs=3, max_steps=4)
    assert len(ans.sources) == 3 and ans.details["paragraphs"] == 3
