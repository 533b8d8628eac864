"""Agent-level metrics of routing strategies (RopMura): did the router invite an agent
that could answer, and how many of the invited agents helped.

They read the strategy's report (`EvalExample.details`: the invited collections and the
useful ones, those graded reliable) and the collections that hold the question's gold
documents (filled in by the runner from the index).
"""

from __future__ import annotations

from marag.eval.metrics.base import METRICS, EvalExample, Metric, MetricResult
from marag.llm.base import LLM


@METRICS.register("agent_answerable")
class AgentAnswerable(Metric):
    name = "agent_answerable"
    kind = "retrieval"
    requires = frozenset({"invited_agents", "gold_collections"})
    description = "1 if an invited agent owns a collection holding a gold document (RopMura's answerable rate)"

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        invited = set(ex.details.get("invited_collections") or [])
        hit = sorted(invited & set(ex.gold_collections))
        return MetricResult(value=float(bool(hit)), details={"gold_collections": sorted(set(ex.gold_collections)), "invited": sorted(invited)})


@METRICS.register("agent_useful")
class AgentUseful(Metric):
    name = "agent_useful"
    kind = "retrieval"
    requires = frozenset({"invited_agents"})
    description = "share of invited agents whose answer the router graded reliable (RopMura's useful rate)"

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        invited = ex.details.get("invited_collections") or []
        useful = ex.details.get("useful_collections") or []
        return MetricResult(value=len(useful) / len(invited) if invited else 0.0)
