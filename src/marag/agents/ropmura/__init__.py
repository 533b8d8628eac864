"""The roles of RopMura (Wu et al., "Talk to Right Specialists"): knowledge agents that
answer from their own collections, a router that grades their responses and answers,
and a planner (splitter, selector, judger, defender) for multi-hop questions. One
module per role group; prompts are ours."""

from marag.agents.ropmura._shared import DONT_KNOW, Record, Response
from marag.agents.ropmura.knowledge_agent import KnowledgeAgent, KnowledgeInput, KnowledgeReply
from marag.agents.ropmura.planner import (
    DefendInput,
    Defender,
    JudgeInput,
    Judger,
    Judgment,
    Selection,
    SelectInput,
    Selector,
    SplitInput,
    Splitter,
    SubQuestions,
)
from marag.agents.ropmura.router import Grader, Grades, GradeInput, RouterAnswer, RouterInput

__all__ = [
    "DONT_KNOW",
    "DefendInput",
    "Defender",
    "GradeInput",
    "Grader",
    "Grades",
    "JudgeInput",
    "Judger",
    "Judgment",
    "KnowledgeAgent",
    "KnowledgeInput",
    "KnowledgeReply",
    "Record",
    "Response",
    "RouterAnswer",
    "RouterInput",
    "SelectInput",
    "Selection",
    "Selector",
    "SplitInput",
    "Splitter",
    "SubQuestions",
]
