"""mRAG (Salemi et al., CIIR@LiveRAG 2025): a coordinator runs a team of agents.

Algorithm 1, as implemented: each turn the coordinator reads the question, the recent
history of agent reports, the current response and the titles of the supporting set S,
and emits `{agent, input, reason}`; that agent runs on that input, its report joins the
history; the answerer and the reviser replace the response; the searcher's relevant
documents join S (deduplicated by chunk id, in discovery order). The run stops when the
finisher is chosen or after `max_agent_calls` agent runs; it returns the response and S.
If no response exists by then, the answerer runs once more on what was collected
(outside the budget; `answered_after_budget` in the usage says so).

Our additions, to keep small models productive (each can be turned off; with
`guards=False, hints=False, keep_top_ranked=0` only the paper's behaviour remains,
including the reviser's refusal to revise before any response exists):
- preconditions (`guards`): the reviser (always), the validator and the finisher need a
  response, the answerer needs a search to have run. An agent picked too early is
  recorded as a refusal step (status "refused", no model call, one agent call spent)
  and the turn goes to the next agent of the fixed sequence planner -> searcher ->
  answerer -> finisher, skipping the planner (the coordinator wanted to move on);
- repetition (`guards`): picking the agent that ran the last `max_same_agent_in_row`
  times again is overridden by the fixed sequence's next agent (a "guard" step);
- echo filter (`guards`): a coordinator input that only names an agent, copies its
  own instructions or has no words is dropped before it reaches the agent; the
  searcher does not run queries that share no content word with the question, the
  coordinator's aspects or the titles found (`rejected_queries` in its outputs);
- hints (`hints`): the coordinator's prompt names the fixed sequence's next agent and
  the searcher's next-move prompt the usual move, each listed first. SmolLM2-135M
  otherwise picks the first option it reads (planner; continue) whatever the state;
- rank floor (`keep_top_ranked`): each query's top hit counts as relevant even when
  the judge says no (recorded as `by_rank`): the 135M judge is close to chance;
- the coordinator's own fallback (unusable output) is the fixed sequence, continued
  after the furthest of its steps already done.
Budgets are config fields (the paper's values as defaults) and a final "budget" step
(also merged into `Answer.usage`) reports what was spent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, field_validator

from marag.agents.base import Agent
from marag.agents.mrag import (
    Coordinator,
    CoordinatorInput,
    MRAGAnswerer,
    MRAGAnswerInput,
    Planner,
    PlannerInput,
    Reasoner,
    ReasonerInput,
    Reviser,
    ReviserInput,
    Searcher,
    SearcherInput,
    SearchLimits,
    Summarizer,
    SummarizerInput,
    Validator,
    ValidatorInput,
    clip,
    doc_from_hit,
    finish,
    useful_input,
)
from marag.index.base import Hit, Retriever
from marag.llm.base import LLM
from marag.llm.factory import LLMConfig, make_llm
from marag.strategies.base import STRATEGIES, Answer, Strategy, StrategyConfig
from marag.trace import current_trace, step

ROLES = ("coordinator", "planner", "searcher", "summarizer", "reasoner", "validator", "answerer", "reviser")
SEQUENCE = ("planner", "searcher", "answerer", "finisher")


class MRAGConfig(StrategyConfig):
    max_agent_calls: int = Field(default=30, ge=1)  # agents the coordinator may run per question
    docs_per_step: int = Field(default=2, ge=1)  # documents per searcher page
    query_reuse_limit: int = Field(default=5, ge=1)  # pages one query may read
    searcher_max_steps: int = Field(default=6, ge=1)  # pages per searcher run
    keep_top_ranked: int = Field(default=1, ge=0)  # a query's top-N hits stay relevant (ours; 0 = judge only)
    max_same_agent_in_row: int = Field(default=3, ge=1)  # repetition guard (ours)
    guards: bool = True  # our preconditions, repetition guard and echo filter (module docstring)
    hints: bool = True  # name the fixed sequence's next agent / the usual search move in prompts
    history_window: int = Field(default=6, ge=1)  # agent reports the coordinator sees
    doc_chars: int = Field(default=600, ge=50)  # a document's text for judge, summarizer, reasoner
    answer_doc_chars: int = Field(default=1200, ge=50)  # ... for answerer, validator, reviser
    prompt_docs: int = Field(default=4, ge=1)  # documents of S shown to an agent
    temperature: float = 0.0
    seed: int | None = None
    role_llms: dict[str, dict[str, Any]] = Field(default_factory=dict)  # role -> LLMConfig fields

    @field_validator("role_llms")
    @classmethod
    def _known_roles(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        if unknown := sorted(set(v) - set(ROLES)):
            raise ValueError(f"unknown role(s) {unknown}: choose among {', '.join(ROLES)}")
        return v


@dataclass
class _State:
    question: str
    history: list[str] = field(default_factory=list)  # "agent(input): report", oldest first
    ran: list[str] = field(default_factory=list)  # agents that actually ran, in order
    response: str | None = None
    docs: dict[str, Hit] = field(default_factory=dict)  # S: chunk id -> hit, discovery order
    notes: list[str] = field(default_factory=list)  # summaries, analyses, validator feedback
    calls: int = 0
    coordinator_calls: int = 0
    searcher_steps: int = 0
    query_reuses: int = 0
    refusals: int = 0
    guards: int = 0
    finished: bool = False


@STRATEGIES.register("mrag")
class MRAG(Strategy):
    name = "mrag"
    description = (
        "Coordinator + planner/searcher/summarizer/reasoner/validator/answerer/reviser/finisher (Salemi et al. 2025)."
    )
    Config = MRAGConfig

    def __init__(
        self,
        llm: LLM,
        retriever: Retriever | None = None,
        config: MRAGConfig | dict | None = None,
        llms: dict[str, LLM] | None = None,
    ):
        super().__init__(llm, retriever, config)
        if unknown := sorted(set(llms or {}) - set(ROLES)):
            raise ValueError(f"unknown role(s) {unknown}: choose among {', '.join(ROLES)}")
        self.llms = {role: make_llm(LLMConfig.model_validate(spec)) for role, spec in self.config.role_llms.items()}
        self.llms.update(llms or {})

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        cfg, st = self.config, _State(question)
        while not st.finished and st.calls < cfg.max_agent_calls:
            st.coordinator_calls += 1
            d = await self._call(
                Coordinator(),
                "coordinator",
                CoordinatorInput(
                    question=question,
                    history=st.history[-cfg.history_window :],
                    response=st.response or "",
                    documents=[h.title or h.chunk_id for h in st.docs.values()],
                    calls_left=cfg.max_agent_calls - st.calls,
                    default_next=self._next_in_sequence(st),
                    hint=cfg.hints,
                ),
            )
            agent, text = self._route(st, d.agent, useful_input(d.input) if cfg.guards else d.input)
            if st.calls < cfg.max_agent_calls:
                await self._run(st, agent, text)
        answered_late = st.response is None
        if answered_late:  # budget spent (or finished without one): answer once from what was collected
            await self._run(st, "answerer", "", count=False)
        trace = current_trace()
        with step("budget") as s:
            s.outputs = {
                "agent_calls": st.calls,
                "max_agent_calls": cfg.max_agent_calls,
                "coordinator_calls": st.coordinator_calls,
                "searcher_steps": st.searcher_steps,
                "query_reuses": st.query_reuses,
                "refusals": st.refusals,
                "guards": st.guards,
                "fallbacks": sum(x.status == "fallback" for x in trace.steps) if trace else 0,
                "finished": st.finished,
                "answered_after_budget": answered_late,
                "documents": len(st.docs),
            }
        return st.response or "", list(st.docs.values())

    async def run(self, question: str) -> Answer:
        answer = await super().run(question)
        budget = next((s.outputs for s in reversed(answer.trace.steps) if s.agent == "budget"), {})
        answer.usage.update({k: float(v) for k, v in budget.items() if isinstance(v, (int, float))})
        return answer

    # -- routing ---------------------------------------------------------------------------
    def _next_in_sequence(self, st: _State, plan: bool = True) -> str:
        """The fixed sequence's next agent: the one after the furthest step already done
        (with `plan=False`, never the planner)."""
        done = ("planner" in st.ran, "searcher" in st.ran, st.response is not None)
        last = max((i for i, d in enumerate(done) if d), default=-1)
        return SEQUENCE[max(last + 1, 0 if plan else 1)]

    def _unmet(self, st: _State, agent: str) -> str | None:
        if agent == "reviser" and st.response is None:
            return "there is no response to revise: the answerer must run first"
        if self.config.guards and agent in ("validator", "finisher") and st.response is None:
            return "there is no response yet: the answerer must run first"
        if self.config.guards and agent == "answerer" and "searcher" not in st.ran:
            return "nothing has been searched yet"
        return None

    def _route(self, st: _State, picked: str, text: str) -> tuple[str, str]:
        """The agent that runs and its input: the coordinator's pick, unless a guard or a
        precondition sends the turn to the fixed sequence (whose agent then gets no input:
        the coordinator's was meant for another agent)."""
        k = self.config.max_same_agent_in_row
        if self.config.guards and st.ran[-k:] == [picked] * k:
            st.guards += 1
            with step("guard", picked=picked, rule=f"{picked} ran {k} times in a row") as s:
                s.outputs = {"agent": self._next_in_sequence(st)}
            return s.outputs["agent"], ""
        if why := self._unmet(st, picked):
            st.calls, st.refusals, routed = st.calls + 1, st.refusals + 1, self._next_in_sequence(st, plan=False)
            with step(picked, request=text) as s:
                s.status, s.outputs = "refused", {"refused": True, "reason": why, "routed_to": routed}
            st.history.append(f"{picked}: refused, {why} (ran {routed} instead)")
            return routed, ""
        return picked, text

    # -- the agents ------------------------------------------------------------------------
    def _llm(self, role: str) -> LLM:
        return self.llms.get(role, self.llm)

    async def _call(self, agent: Agent, role: str, inp: Any) -> Any:
        return await agent(self._llm(role), inp, self.config.temperature, self.config.seed)

    def _docs(self, st: _State, chars: int | None = None) -> list:
        chars = chars or self.config.doc_chars
        return [doc_from_hit(h, chars) for h in list(st.docs.values())[: self.config.prompt_docs]]

    async def _run(self, st: _State, agent: str, text: str, count: bool = True) -> None:
        st.calls += count
        report = await getattr(self, f"_{agent}")(st, text)
        st.ran.append(agent)
        st.history.append(
            f"{agent}({clip(text, 80)}): {clip(report, 240)}" if text else f"{agent}: {clip(report, 240)}"
        )

    async def _planner(self, st: _State, text: str) -> str:
        # the plan goes to the coordinator (history), not into the notes other agents read:
        # it holds no collected information, and small models copy it into their output
        plan = await self._call(
            Planner(), "planner", PlannerInput(question=st.question, request=text, known=st.notes[-2:])
        )
        return "; ".join(plan.steps)

    async def _searcher(self, st: _State, text: str) -> str:
        cfg = self.config
        limits = SearchLimits(
            docs_per_step=cfg.docs_per_step,
            query_reuse_limit=cfg.query_reuse_limit,
            max_steps=cfg.searcher_max_steps,
            doc_chars=cfg.doc_chars,
            hint=cfg.hints,
            keep_top_ranked=cfg.keep_top_ranked,
            on_topic_queries=cfg.guards,
        )
        # what is known: the titles found so far (notes stay out: a small model copies
        # them into its query)
        known = [h.title or h.chunk_id for h in list(st.docs.values())[:6]]
        out, hits = await Searcher()(
            self._llm("searcher"),
            self.search,
            SearcherInput(question=st.question, aspects=text, known=known),
            limits,
            cfg.temperature,
            cfg.seed,
        )
        for h in hits:
            st.docs.setdefault(h.chunk_id, h)
        st.searcher_steps += len(out.steps)
        st.query_reuses += out.query_reuses
        if not out.relevant:
            return f"no relevant documents for {'; '.join(out.queries)}"
        return "found " + "; ".join(f"[{j.title or j.chunk_id}] {j.explanation}" for j in out.relevant)

    async def _summarizer(self, st: _State, text: str) -> str:
        out = await self._call(
            Summarizer(),
            "summarizer",
            SummarizerInput(question=st.question, focus=text, documents=self._docs(st), notes=st.notes[-2:]),
        )
        st.notes.append("Summary: " + out.summary)
        return out.summary

    async def _reasoner(self, st: _State, text: str) -> str:
        out = await self._call(
            Reasoner(),
            "reasoner",
            ReasonerInput(question=st.question, aspect=text, documents=self._docs(st), notes=st.notes[-2:]),
        )
        st.notes.append("Analysis: " + out.analysis)
        return out.analysis

    async def _answerer(self, st: _State, text: str) -> str:
        out = await self._call(
            MRAGAnswerer(),
            "answerer",
            MRAGAnswerInput(
                question=st.question,
                guidance=text,
                notes=st.notes[-3:],
                documents=self._docs(st, self.config.answer_doc_chars),
            ),
        )
        st.response = out.answer
        return out.answer

    async def _validator(self, st: _State, text: str) -> str:
        v = await self._call(
            Validator(),
            "validator",
            ValidatorInput(
                question=st.question, response=st.response or "", documents=self._docs(st, self.config.answer_doc_chars)
            ),
        )
        report = "; ".join(
            f"{k}: {'yes' if x.ok else 'no'} ({x.feedback})"
            for k, x in (("valid", v.valid), ("grounded", v.grounded), ("correct", v.correct))
        )
        if not v.passed():
            st.notes.append("Feedback: " + report)
        return report

    async def _reviser(self, st: _State, text: str) -> str:
        feedback = next((n for n in reversed(st.notes) if n.startswith("Feedback: ")), "")
        out = await self._call(
            Reviser(),
            "reviser",
            ReviserInput(
                question=st.question,
                response=st.response or "",
                suggestion=text or feedback.removeprefix("Feedback: "),
                notes=st.notes[-2:],
                documents=self._docs(st, self.config.answer_doc_chars),
            ),
        )
        st.response = out.answer
        return out.answer

    async def _finisher(self, st: _State, text: str) -> str:
        finish(st.response, len(st.docs))
        st.finished = True
        return "done"
