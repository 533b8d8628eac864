"""Agent-level metrics of routing strategies (RopMura), as the paper defines them: did
the router invite an agent that could answer (answerable), and what share of the
invited agents could (useful). An agent "could answer" when its collection holds one of
the question's gold documents.

They read the strategy's report (`EvalExample.details["invited_collections"]`) and the
collections that hold the question's gold documents (`gold_collections`, filled in by
the runner from the index). Neither depends on the router's grades, so both apply to
every variant, the raw-knowledge ablation included.
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
    requires = frozenset({"invited_agents", "gold_collections"})
    description = "share of invited agents whose collection holds a gold document (RopMura's useful rate)"

    async def score(self, ex: EvalExample, judge: LLM | None = None, seed: int | None = None) -> MetricResult:
        invited = list(dict.fromkeys(ex.details.get("invited_collections") or []))
        useful = [c for c in invited if c in set(ex.gold_collections)]
        return MetricResult(value=len(useful) / len(invited) if invited else 0.0, details={"useful": useful, "invited": invited})
