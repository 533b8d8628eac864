from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import ValidationError

from marag.corpus.models import Question
from marag.errors import MaragError
from marag.eval.judges import (
    ASPECT_MAX_CHARS,
    FALLBACK_REASON,
    AspectsOutput,
    CorrectnessOutput,
    lexical_correctness,
    lexical_support,
    split_aspects,
)
from marag.eval.metrics import EvalExample, metric_names, score_example
from marag.eval.metrics.judged import nugget_scores, parse_nuggets
from marag.llm import ScriptedLLM

NUGGETS_FILE = "trec_rag24/hr_scored_nist_nuggets_20241218_rag24.test_qrels_nist.jsonl"


class Recording:
    """Wraps a ScriptedLLM and remembers the temperature and seed of every call."""

    def __init__(self, inner: ScriptedLLM):
        self.inner, self.model, self.seen = inner, inner.model, []

    async def generate(self, messages, output=None, temperature=0.0, max_tokens=512, seed=None):
        self.seen.append((temperature, seed))
        return await self.inner.generate(
            messages, output=output, temperature=temperature, max_tokens=max_tokens, seed=seed
        )


def _ex(prediction="Paris", answers=("Paris",), docs=(), **metadata) -> EvalExample:
    q = Question(id="q1", question="What is the capital of France?", answers=list(answers), metadata=metadata)
    return EvalExample(question=q, prediction=prediction, retrieved_texts=list(docs))


def run(ex, names, judge, **kw):
    return asyncio.run(score_example(ex, names, judge=judge, **kw))


def test_registered_judged_metrics():
    assert set(metric_names("judged")) == {
        "judge_correct", "judge_score", "mrag_correctness", "mrag_faithfulness", "nugget_vstrict", "nugget_all",
    }  # fmt: skip


def test_judged_metric_without_a_judge_is_a_clear_error():
    with pytest.raises(MaragError, match="judge_correct") as info:
        run(_ex(), ["em", "judge_correct"], None)
    assert info.value.hint


# -- judge_correct -------------------------------------------------------------------------


@pytest.mark.parametrize("verdict, value", [(True, 1.0), (False, 0.0)])
def test_judge_correct(verdict, value):
    llm = ScriptedLLM([{"justification": "Both name the same city.", "correct": verdict}])
    res = run(_ex("It is Paris.", ["Paris"], reference_answer="Paris is the capital."), ["judge_correct"], llm)
    assert res["judge_correct"].value == value
    assert res["judge_correct"].details == {"justification": "Both name the same city.", "fallback": False}
    assert (res["judge_correct"].decisions, res["judge_correct"].fallbacks) == (1, 0)
    prompt = llm.calls[0].messages[-1]["content"]
    assert "It is Paris." in prompt and "Paris is the capital." in prompt and "- Paris" in prompt


def test_judge_gets_the_metric_temperature_and_the_seed():
    rec = Recording(ScriptedLLM([{"justification": "ok", "correct": True}]))
    run(_ex(), ["judge_correct"], rec, seed=11, temperature=0.7)
    assert rec.seen == [(0.7, 11)]
    rec = Recording(ScriptedLLM([{"justification": "ok", "correct": True}]))
    run(_ex(), ["judge_correct"], rec)
    assert rec.seen == [(0.0, None)]  # default: greedy, no seed


def test_judge_correct_falls_back_to_lexical_match_after_two_invalid_outputs():
    # first reply invalid, the repair reply invalid too -> the agent's fallback
    llm = ScriptedLLM(["no json here", '{"correct": "perhaps"}'])
    res = run(_ex("I believe it is Paris.", ["Paris"]), ["judge_correct"], llm)["judge_correct"]
    assert len(llm.calls) == 2
    assert res.value == 1.0 and res.details["fallback"] is True and res.fallbacks == 1
    assert res.details["justification"] == FALLBACK_REASON
    llm = ScriptedLLM(["nope", "nope"])
    assert run(_ex("Lyon", ["Paris"]), ["judge_correct"], llm)["judge_correct"].value == 0.0


def test_justification_length_is_bounded():
    with pytest.raises(ValidationError):
        CorrectnessOutput(justification="x" * 201, correct=True)


# -- judge_score ---------------------------------------------------------------------------


def test_judge_score_reports_the_raw_0_to_5_score():
    llm = ScriptedLLM([{"reason": "Same city, less detail.", "score": 4}])
    res = run(_ex(), ["judge_score"], llm)["judge_score"]
    assert res.value == 4.0 and res.details["reason"] == "Same city, less detail."


def test_judge_score_out_of_range_twice_falls_back_to_f1():
    llm = ScriptedLLM([{"reason": "r", "score": 7}, {"reason": "r", "score": -1}])
    ex = _ex("the cat sat on the mat", ["a cat on a mat"])
    res = run(ex, ["judge_score"], llm)["judge_score"]
    # token F1 = 6/7 (see test_metrics_lexical); 5 * 6/7 = 4.29 -> 4
    assert res.value == 4.0 and res.details["fallback"] is True


# -- mRAG correctness (the paper's scale: 2 / 1 / 0 / -1 per aspect of the expected answer) --


REFERENCE = "Paris is the capital of France. It lies on the Seine. It has about two million inhabitants."
ASPECTS = ["Paris is the capital of France", "Paris lies on the Seine", "Paris has about 2 million people"]


def test_mrag_correctness_one_aspect_per_call_on_the_papers_scale():
    # one judgment per aspect: correct+relevant, correct+irrelevant, wrong
    llm = ScriptedLLM([{"aspects": ASPECTS}, {"scores": [2]}, {"scores": [1]}, {"scores": [-1]}])
    res = run(_ex("Paris, on the Loire.", reference_answer=REFERENCE), ["mrag_correctness"], llm)["mrag_correctness"]
    # (2+1)/3 = 1, (1+1)/3 = 2/3, (-1+1)/3 = 0 -> mean = (1 + 2/3 + 0) / 3 = 5/9
    assert res.value == pytest.approx(5 / 9)
    assert res.details["aspects"] == [{"aspect": a, "score": s} for a, s in zip(ASPECTS, [2, 1, -1])]
    assert (res.decisions, res.fallbacks) == (4, 0)
    assert len(llm.calls) == 4
    # the aspects come from the reference answer; every judgment sees the question,
    # the expected answer, the response and exactly one aspect
    assert "Seine" in llm.calls[0].messages[-1]["content"]
    for call, aspect in zip(llm.calls[1:], ASPECTS):
        prompt = call.messages[-1]["content"]
        assert "Paris, on the Loire." in prompt and REFERENCE in prompt and "capital of France?" in prompt
        assert f"1. {aspect}" in prompt and "2. " not in prompt
        assert call.json_schema["properties"]["scores"]["maxItems"] == 1
    system = llm.calls[1].messages[0]["content"]
    assert all(f"{v} = " in system for v in ("2", "1", "0", "-1"))


def test_mrag_correctness_abstention_scores_a_third_and_batching_keeps_the_scale():
    llm = ScriptedLLM([{"aspects": ASPECTS}, {"scores": [0, 0, 0]}])
    ex = _ex("I don't know.", reference_answer=REFERENCE)
    res = asyncio.run(score_example(ex, ["mrag_correctness"], judge=llm, batch=8))["mrag_correctness"]
    assert res.value == pytest.approx(1 / 3) and len(llm.calls) == 2


def test_mrag_correctness_unusable_judgments_get_the_lexical_stand_in_and_are_counted():
    llm = ScriptedLLM(
        [
            {"aspects": ASPECTS},
            {"scores": [2]},
            "bad",
            "bad",  # aspect 2: invalid twice -> stand-in: "Seine" and "lies" are in the response -> 1
            "bad",
            "bad",  # aspect 3: invalid twice -> stand-in: no "million"/"people" -> 0
        ]
    )
    ex = _ex("Paris is the capital and lies on the Seine.", reference_answer=REFERENCE)
    res = run(ex, ["mrag_correctness"], llm)["mrag_correctness"]
    assert [a["score"] for a in res.details["aspects"]] == [2, 1, 0]
    # (1 + 2/3 + 1/3) / 3 = 2/3
    assert res.value == pytest.approx(2 / 3)
    assert (res.decisions, res.fallbacks) == (4, 2) and res.details["stand_in_scores"] == 2


def test_mrag_correctness_uses_sentences_when_the_extractor_fails():
    llm = ScriptedLLM(["bad", "bad", {"scores": [2]}, {"scores": [2]}, {"scores": [2]}])
    res = run(_ex(reference_answer=REFERENCE), ["mrag_correctness"], llm)["mrag_correctness"]
    assert [a["aspect"] for a in res.details["aspects"]] == [
        "Paris is the capital of France.", "It lies on the Seine.", "It has about two million inhabitants.",
    ]  # fmt: skip
    assert res.value == 1.0 and res.details["aspects_from"] == "sentences" and res.fallbacks == 1


def test_lexical_stand_ins():
    assert lexical_correctness("Paris lies on the Seine", "It is on the Seine, in Paris") == 1
    assert lexical_correctness("Paris lies on the Seine", "Lyon") == 0
    docs = ["The Seine flows through Paris."]
    assert lexical_support("The Seine flows through Paris", docs) == 1
    assert lexical_support("The Seine flows through Lyon and Rouen", docs) == 0  # 3 of 6 words
    assert lexical_support("Marseille is a port", docs) == -1


def test_split_aspects_bounds():
    long = "word " * 100
    parts = split_aspects(f"{long}. " * 12)
    assert len(parts) == 8 and all(len(p) <= ASPECT_MAX_CHARS for p in parts)
    assert split_aspects("no sentence break") == ["no sentence break"]
    with pytest.raises(ValidationError):
        AspectsOutput(aspects=["a"] * 9)


# -- mRAG faithfulness (the paper's scale: 1 fully / 0 partially / -1 not supported) ---------


def test_mrag_faithfulness_on_the_papers_scale():
    docs = ["Paris is the capital and largest city of France.", "The Seine flows through Paris."]
    aspects = ["Paris is the capital of France", "Paris is a large city on a river", "Paris is on the Loire"]
    llm = ScriptedLLM([{"aspects": aspects}, {"scores": [1]}, {"scores": [0]}, {"scores": [-1]}])
    res = run(_ex("Paris, the capital, is on the Loire.", docs=docs), ["mrag_faithfulness"], llm)["mrag_faithfulness"]
    # (1+1)/2 = 1, (0+1)/2 = 1/2, (-1+1)/2 = 0 -> 1/2
    assert res.value == pytest.approx(0.5)
    assert res.details["documents_used"] == 2 and len(llm.calls) == 4
    assert "The Seine flows through Paris." in llm.calls[1].messages[-1]["content"]
    system = llm.calls[1].messages[0]["content"]
    assert "-1 = the documents do not support it" in system


def test_an_unsupported_claim_earns_nothing():
    docs = ["The Seine flows through Paris."]
    llm = ScriptedLLM([{"aspects": ["Paris has twelve bridges"]}, {"scores": [-1]}])
    assert run(_ex(docs=docs), ["mrag_faithfulness"], llm)["mrag_faithfulness"].value == 0.0
    # an unusable judgment is not a free half point: the stand-in finds no support
    llm = ScriptedLLM([{"aspects": ["Paris has twelve bridges"]}, "bad", "bad"])
    res = run(_ex(docs=docs), ["mrag_faithfulness"], llm)["mrag_faithfulness"]
    assert res.value == 0.0 and res.fallbacks == 1


def test_mrag_faithfulness_without_documents_is_zero_and_asks_nothing():
    llm = ScriptedLLM([])  # any call would raise ScriptExhausted
    res = run(_ex(docs=[]), ["mrag_faithfulness"], llm)["mrag_faithfulness"]
    assert res.value == 0.0 and "no retrieved documents" in res.details["note"]
    assert llm.calls == []


# -- nuggets (TREC RAG'24) -------------------------------------------------------------------


def _trec_topic(data_dir, qid: str) -> Question:
    with (data_dir / NUGGETS_FILE).open(encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if rec["qid"] == qid:
                return Question(id=qid, question=rec["query"], metadata={"nuggets": rec["nuggets"]})
    raise AssertionError(f"topic {qid} not in {NUGGETS_FILE}")


def test_nugget_vstrict_on_a_trec_rag24_topic(data_dir):
    q = _trec_topic(data_dir, "2024-105741")
    nuggets = parse_nuggets(q.metadata["nuggets"])
    assert len(nuggets) == 16 and [n.vital for n in nuggets[:4]] == [True, True, True, False]
    assert sum(n.vital for n in nuggets) == 3
    S, P, N = "support", "partial_support", "not_support"
    first10 = [S, P, N, S, S, P, N, N, N, S]  # nuggets 1-3 are the vital ones
    last6 = [P, N, N, N, N, S]
    llm = ScriptedLLM([{"labels": first10}, {"labels": last6}])
    ex = EvalExample(question=q, prediction="A WBC count over 15,000 is not dangerous in itself; treat the cause.")
    res = run(ex, ["nugget_vstrict", "nugget_all"], llm)
    # vital: support, partial, not -> V_strict = 1/3; V (partial = 0.5) = 1.5/3 = 0.5
    # all 16: 5 support, 3 partial -> all_strict = 5/16; all = (5 + 3 * 0.5)/16 = 6.5/16
    assert res["nugget_vstrict"].value == pytest.approx(1 / 3)
    assert res["nugget_all"].value == pytest.approx(6.5 / 16)
    d = res["nugget_vstrict"].details
    assert d["v_score"] == pytest.approx(0.5) and d["all_strict"] == pytest.approx(5 / 16)
    assert [x["label"] for x in d["labels"]] == first10 + last6
    # two batched calls (10 + 6 nuggets), shared by both metrics
    assert len(llm.calls) == 2
    prompts = [c.messages[-1]["content"] for c in llm.calls]
    assert "10. " in prompts[0] and "11. " not in prompts[0] and "6. " in prompts[1]
    assert nuggets[10].text in prompts[1]


def test_nugget_labels_stay_aligned_with_interleaved_importance(data_dir):
    q = _trec_topic(data_dir, "2024-29182")  # vital and okay nuggets interleave
    nuggets = parse_nuggets(q.metadata["nuggets"])
    truth = ["support" if n.vital else "not_support" for n in nuggets]
    llm = ScriptedLLM([{"labels": truth[i : i + 10]} for i in range(0, len(truth), 10)])
    res = run(EvalExample(question=q, prediction="some answer"), ["nugget_vstrict"], llm)["nugget_vstrict"]
    assert res.value == 1.0
    assert res.details["all_strict"] == pytest.approx(sum(n.vital for n in nuggets) / len(nuggets))


def test_nugget_batch_with_wrong_length_is_retried_per_nugget():
    nuggets = [
        {"text": "A", "importance": "vital"},
        {"text": "B", "importance": "vital"},
        {"text": "C", "importance": "okay"},
    ]
    ex = EvalExample(question=Question(id="n", question="q", metadata={"nuggets": nuggets}), prediction="answer")
    llm = ScriptedLLM(
        [
            {"labels": ["support", "support"]},  # 2 labels for 3 nuggets: invalid,
            {"labels": ["support", "support", "support", "support"]},  # repair invalid too
            {"labels": ["support"]},
            "bad",
            "bad",  # nugget B: invalid twice -> not_support
            {"labels": ["partial_support"]},
        ]
    )
    res = run(ex, ["nugget_vstrict"], llm)["nugget_vstrict"]
    assert [x["label"] for x in res.details["labels"]] == ["support", "not_support", "partial_support"]
    assert res.value == pytest.approx(1 / 2) and res.details["defaulted"] == 1
    assert len(llm.calls) == 6


def test_a_wrong_label_count_is_repaired_in_the_same_call():
    nuggets = [{"text": "A", "importance": "vital"}, {"text": "B", "importance": "vital"}]
    ex = EvalExample(question=Question(id="n", question="q", metadata={"nuggets": nuggets}), prediction="answer")
    llm = ScriptedLLM([{"labels": ["support"]}, {"labels": ["support", "not_support"]}])
    res = run(ex, ["nugget_vstrict"], llm)["nugget_vstrict"]
    assert res.value == 0.5 and res.details["defaulted"] == 0 and len(llm.calls) == 2


def test_nugget_metrics_applicability_and_empty_answer():
    okay_only = Question(id="o", question="q", metadata={"nuggets": [{"text": "A", "importance": "okay"}]})
    llm = ScriptedLLM([])
    res = run(EvalExample(question=okay_only, prediction=""), ["nugget_vstrict", "nugget_all"], llm)
    assert set(res) == {"nugget_all"}  # V_strict is undefined without vital nuggets
    assert res["nugget_all"].value == 0.0 and llm.calls == []  # empty answer: nothing to ask
    assert run(_ex(), ["nugget_vstrict", "nugget_all"], llm) == {}  # no nuggets at all


def test_nugget_scores_arithmetic_and_parsing():
    ns = parse_nuggets(["plain string", {"text": "b", "importance": "OKAY"}, {"text": " ", "importance": "vital"}])
    assert [(n.text, n.vital) for n in ns] == [("plain string", True), ("b", False)]
    s = nugget_scores(ns, ["partial_support", "support"])
    assert s == {"v_strict": 0.0, "all_strict": 0.5, "v_score": 0.5, "all_score": 0.75}
