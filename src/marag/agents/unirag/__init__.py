"""The roles of Agent-UniRAG (Pham et al. 2025): one ReAct agent whose planning module
chooses search or final answer each step, an evidence reflector that condenses what a
search returned, and a final-answer step that writes from the working memory only.
One module per role; prompts are ours."""

from marag.agents.unirag._shared import NO_INFORMATION, Evidence, MemoryStep, render_memory
from marag.agents.unirag.answer import FinalAnswer, FinalInput, SourcesAnswer
from marag.agents.unirag.planner import PlanInput, Planner, PlanStep
from marag.agents.unirag.queries import Queries, QueriesInput, QueryPlanner
from marag.agents.unirag.reflector import Finding, Reflection, ReflectInput, Reflector

__all__ = [
    "NO_INFORMATION",
    "Evidence",
    "FinalAnswer",
    "FinalInput",
    "Finding",
    "MemoryStep",
    "PlanInput",
    "PlanStep",
    "Planner",
    "Queries",
    "QueriesInput",
    "QueryPlanner",
    "Reflection",
    "ReflectInput",
    "Reflector",
    "SourcesAnswer",
    "render_memory",
]
