"""What one mRAG question's run holds while the coordinator works: the agents' reports,
the response, the supporting set S with each document's judgment, the team's notes and
the counters the budget step reports; and what follows from them alone: the fixed
sequence's next agent, the reports the coordinator reads, the usage."""

from __future__ import annotations

from dataclasses import dataclass, field

from marag.agents.search.memory import SearchMemory
from marag.index.base import Hit
from marag.strategies.mrag.search_io import Judged
from marag.trace import current_trace, normalize_query

# the fixed sequence: the coordinator's fallback and the agent its hint names (the paper's
# Algorithm 1 names the planner first), the guards' turn, and `routing="sequence"`
SEQUENCE = ("planner", "searcher", "answerer", "finisher")


@dataclass
class State:
    question: str
    history: list[str] = field(default_factory=list)  # "agent(input): report", oldest first
    ran: list[str] = field(default_factory=list)  # agents that actually ran, in order
    response: str | None = None
    docs: dict[str, Hit] = field(default_factory=dict)  # S: chunk id -> hit, discovery order
    why: dict[str, Judged] = field(default_factory=dict)  # S: chunk id -> the searcher's judgment
    notes: list[str] = field(default_factory=list)  # summaries, analyses, validator feedback
    calls: int = 0
    coordinator_calls: int = 0
    searcher_steps: int = 0
    query_reuses: int = 0
    refusals: int = 0
    guards: int = 0
    finished: bool = False
    plan: str = ""
    noops: int = 0  # agent runs in a row that changed nothing
    steers: int = 0  # turns the no-progress guard steered
    answered_with: int = -1  # |S| when the answerer last ran
    memory: SearchMemory | None = None
    read_order: tuple[int, list[tuple[Hit, Judged | None]]] | None = None  # (|S|, S ranked for the question) with `rank_docs`

    def signature(self) -> tuple:
        """What an agent run can change: S, the response, the plan, the notes."""
        return (len(self.docs), self.response, self.plan, frozenset(self.notes))

    def facts(self, last: int | None = None) -> list[str]:
        """What each document in S gives, in discovery order: "title: fact" (the title
        alone when the judge named no fact, e.g. a document kept by the rank floor)."""
        lines = []
        for cid, h in self.docs.items():
            j = self.why.get(cid)
            lines.append(f"{h.title or cid}: {j.fact}" if j and j.fact and not j.by_rank else h.title or cid)
        return lines[-last:] if last else lines

    def ranked_docs(self) -> list[tuple[Hit, Judged | None]]:
        """S in retrieval order: by the query a document was found for (the order the
        queries were first issued), then its rank under that query, then discovery. The
        first query's top documents come first, which are what a retrieve-then-read
        baseline reads; a small model's relevance judge is close to chance, so its verdict
        decides what enters S, not what comes first."""
        issued = {q: i for i, q in enumerate(self.memory.queries)} if self.memory else {}

        def key(item: tuple[int, str]) -> tuple[int, int, int]:
            order, cid = item
            j = self.why.get(cid)
            if j is None:
                return (len(issued), 0, order)
            return (issued.get(normalize_query(j.query), len(issued)), j.rank, order)

        ordered = sorted(enumerate(self.docs), key=key)
        return [(self.docs[cid], self.why.get(cid)) for _, cid in ordered]

    def next_in_sequence(self, plan: bool) -> str:
        """The fixed sequence's next agent: the one after the furthest step already done;
        it opens with the planner only with `plan`."""
        done = ("planner" in self.ran, "searcher" in self.ran, self.response is not None)
        last = max((i for i, d in enumerate(done) if d), default=-1)
        return SEQUENCE[max(last + 1, 0 if plan else 1)]

    def reports(self, window: int | None, budget: int | None) -> list[str]:
        """The reports the coordinator reads: the last `window` (None: all), and in any
        mode only as many of the most recent as fit in `budget` characters (the paper's
        mode keeps all of them until the model's context would overflow)."""
        recent = self.history[-window:] if window else list(self.history)
        if budget is None:
            return recent
        kept, used = [], 0
        for report in reversed(recent):
            used += len(report) + 4
            if used > budget and kept:
                break
            kept.append(report)
        return kept[::-1]

    def usage(self, max_agent_calls: int, answered_late: bool) -> dict[str, int | bool]:
        """What the run spent, for the final "budget" step (merged into `Answer.usage`)."""
        trace = current_trace()
        return {
            "agent_calls": self.calls,
            "max_agent_calls": max_agent_calls,
            "coordinator_calls": self.coordinator_calls,
            "searcher_steps": self.searcher_steps,
            "query_reuses": self.query_reuses,
            "refusals": self.refusals,
            "guards": self.guards,
            "progress_steers": self.steers,
            "fallbacks": sum(x.status == "fallback" for x in trace.steps) if trace else 0,
            "finished": self.finished,
            "answered_after_budget": answered_late,
            "documents": len(self.docs),
        }
