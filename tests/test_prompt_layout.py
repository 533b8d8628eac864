"""laid_out's options (agents/layout.py) and the judge prompts built with it (issue 42)."""

from marag.agents.answerer import Answerer, AnswerInput
from marag.agents.layout import laid_out
from marag.eval.judges import (
    CorrectnessInput,
    CorrectnessJudge,
    NuggetInput,
    NuggetJudge,
    SupportInput,
    SupportJudge,
)


def user(messages):
    assert [m.role for m in messages] == ["system", "user"]
    return messages[1].content


def test_defaults_lay_out_the_question_documents_state_and_request_a_blank_line_apart():
    assert user(laid_out("S", "q", ["a", " ", "b  "], "Go.", documents="[1] d")) == "Question: q\n\nDocuments:\n\n[1] d\n\na\nb\n\nGo."
    assert user(laid_out("S", "q", ask="")) == "Question: q\n\n"


def test_no_question_and_a_one_line_gap():
    assert user(laid_out("S", None, ["a"], "Go.")) == "a\n\nGo."
    assert user(laid_out("S", "q", ["a"], "Go.", gap="\n")) == "Question: q\na\nGo."


def test_judge_prompts_keep_empty_values_verbatim():
    grade = user(CorrectnessJudge().messages(CorrectnessInput(question="q", references=[], prediction="")))
    assert grade == "Question: q\nReference answers:\n\nAnswer to grade: "
    nugget = user(NuggetJudge().messages(NuggetInput(question="q", answer="a", nuggets=["x", "y"])))
    assert nugget == "Question: q\nAnswer: a\nNuggets:\n1. x\n2. y\nGive 2 labels."
    support = user(SupportJudge().messages(SupportInput(documents=["d"], aspects=["x"])))
    assert support == "Documents:\n[1] d\n\nStatements:\n1. x\nGive 1 score(s)."
    assert user(Answerer().messages(AnswerInput(question="q"))) == "Question: q\nAnswer as JSON."
