"""The agents of mRAG (Salemi et al., CIIR@LiveRAG 2025): a coordinator that picks,
turn by turn, one of planner, searcher, summarizer, reasoner, validator, answerer,
reviser and finisher. One module per agent (the searcher's holds the roles its loop,
`marag.strategies.mrag.search`, calls); prompts are ours."""

from marag.agents.mrag._shared import Doc, clip, doc_from_hit
from marag.agents.mrag.answerer import MRAGAnswerer, MRAGAnswerInput
from marag.agents.mrag.coordinator import (
    AGENT_GUIDE,
    AGENT_NAMES,
    AgentName,
    Coordinator,
    CoordinatorDecision,
    CoordinatorInput,
    useful_input,
)
from marag.agents.mrag.finisher import finish
from marag.agents.mrag.planner import Plan, Planner, PlannerInput
from marag.agents.mrag.reasoner import Analysis, Reasoner, ReasonerInput
from marag.agents.mrag.reviser import Reviser, ReviserInput
from marag.agents.mrag.searcher import (
    Judge,
    Judgement,
    Move,
    NextMove,
    PageJudge,
    Query,
    QueryWriter,
)
from marag.agents.mrag.summarizer import Summarizer, SummarizerInput, Summary
from marag.agents.mrag.validator import Validation, Validator, ValidatorInput, Verdict

__all__ = [
    "AGENT_GUIDE",
    "AGENT_NAMES",
    "AgentName",
    "Analysis",
    "Coordinator",
    "CoordinatorDecision",
    "CoordinatorInput",
    "Doc",
    "Judge",
    "Judgement",
    "MRAGAnswerInput",
    "MRAGAnswerer",
    "Move",
    "NextMove",
    "PageJudge",
    "Plan",
    "Planner",
    "PlannerInput",
    "Query",
    "QueryWriter",
    "Reasoner",
    "ReasonerInput",
    "Reviser",
    "ReviserInput",
    "Summarizer",
    "SummarizerInput",
    "Summary",
    "Validation",
    "Validator",
    "ValidatorInput",
    "Verdict",
    "clip",
    "doc_from_hit",
    "finish",
    "useful_input",
]
