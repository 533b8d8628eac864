"""The roles of knowledge-aware iterative retrieval (KAIR): query planning, knowledge
update, contextual filtering and an optional moderator, around a known/required state.
One module per role; prompts are ours."""

from marag.agents.kair.context_filter import ContextFilter, FilterInput, Kept
from marag.agents.kair.knowledge_update import KnowledgeUpdater, NewFact, Update, UpdateInput
from marag.agents.kair.moderator import Moderator, ModeratorInput, Verdict
from marag.agents.kair.query_planner import Candidate, Candidates, PlanInput, QueryPlanner
from marag.agents.kair.state import Fact, KnowledgeState

__all__ = [
    "Candidate",
    "Candidates",
    "ContextFilter",
    "Fact",
    "FilterInput",
    "Kept",
    "KnowledgeState",
    "KnowledgeUpdater",
    "Moderator",
    "ModeratorInput",
    "NewFact",
    "PlanInput",
    "QueryPlanner",
    "Update",
    "UpdateInput",
    "Verdict",
]
