"""The roles of RopMura (Wu et al., "Talk to Right Specialists"): knowledge agents that
answer from their own collections, a router that grades their responses and answers in
one call, and a planner (splitter, selector, judger, defender) for multi-hop questions.
One module per role group; prompts are ours."""

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
from marag.agents.ropmura.router import Router, RouterInput, RouterReply

__all__ = [
    "DONT_KNOW",
    "DefendInput",
    "Defender",
    "JudgeInput",
    "Judger",
    "Judgment",
    "KnowledgeAgent",
    "KnowledgeInput",
    "KnowledgeReply",
    "Record",
    "Response",
    "Router",
    "RouterInput",
    "RouterReply",
    "SelectInput",
    "Selection",
    "Selector",
    "SplitInput",
    "Splitter",
    "SubQuestions",
]
