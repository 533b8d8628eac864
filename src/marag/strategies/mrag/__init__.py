"""mRAG (Salemi et al., CIIR@LiveRAG 2025): a coordinator runs a team of agents.

Algorithm 1, as implemented (`MRAG.solve`): each turn the coordinator reads the question,
the history of agent reports, the current response and the titles of the supporting set
S, and emits `{agent, input, reason}`; that agent runs on that input, its report joins
the history; the answerer and the reviser replace the response; the searcher's relevant
documents join S (deduplicated by chunk id). The run stops when the finisher is chosen
or after `max_agent_calls` agent runs; it returns the response and S.

Every agent that reads documents sees all of S, most relevant first: in retrieval order
(by the query a document was found for, in the order the queries were issued, then its
rank under it, so the first query's top documents, what a retrieve-then-read baseline
reads, come first; with `rank_docs` as the question ranks it), packed into
`context_chars` characters: when S does not fit whole, the longest documents are
clipped to an equal share, so a second-hop document found late still reaches the
answerer.

Our additions keep small models productive; each is a named setting and, where it is
more than a setting, a named part: the coordinator loop's in `marag.strategies.mrag.aids`
(composed into the loop by `Aids.of`), the searcher's in
`marag.strategies.mrag.search_aids`, each with what it fixes and where that was
measured (docs/strategies/mrag.md, "Aids"). `paper=True` (`mrag_paper`) composes none of
them and leaves only the fallbacks a run cannot do without (listed in the docs).

The question's hard budget (`max_llm_calls`, 40 for mRAG, `max_tokens`, `deadline_s`,
common to every strategy) ends the loop and any searcher run early; the late answer
(`late_answer`) then runs in the budget's grace. The coordinator's own fallback
(unusable output) is the fixed sequence, continued after the furthest of its steps
already done. Budgets are config fields (the paper's values as defaults) and a final
"budget" step (also merged into `Answer.usage`) reports what was spent.
"""

from __future__ import annotations

from typing import Any

from marag.agents.base import Agent
from marag.agents.mrag import (
    Coordinator,
    CoordinatorInput,
    Doc,
    MRAGAnswerer,
    MRAGAnswerInput,
    Planner,
    PlannerInput,
    Reasoner,
    ReasonerInput,
    Reviser,
    ReviserInput,
    Summarizer,
    SummarizerInput,
    Validator,
    ValidatorInput,
    clip,
    doc_from_hit,
    finish,
)
from marag.agents.mrag._shared import pack_texts
from marag.agents.search.memory import SearchMemory
from marag.index.base import Hit, Retriever
from marag.llm.base import LLM
from marag.llm.budget import budget_spent, grace
from marag.llm.factory import LLMConfig, make_llm
from marag.strategies.base import STRATEGIES, Strategy, register_variant
from marag.strategies.mrag.aids import Aids, Pick, steer
from marag.strategies.mrag.config import PAPER_SETTINGS, MRAGConfig
from marag.strategies.mrag.search import Judged, Searcher, SearcherInput, SearchLimits
from marag.strategies.mrag.state import SEQUENCE, State
from marag.trace import step


def nothing_to_revise(st: State, agent: str) -> str | None:
    """The paper's own precondition: the reviser refuses when there is no response."""
    return "there is no response to revise: the answerer must run first" if agent == "reviser" and st.response is None else None


@STRATEGIES.register("mrag")
class MRAG(Strategy):
    name = "mrag"
    paper = "Salemi et al., CIIR@LiveRAG 2025 (mRAG)"
    calls = (8, 14)  # the default 1.5B model, HotpotQA 1-30: median 8, at most 13
    description = (
        "Coordinator + planner/searcher/summarizer/reasoner/validator/answerer/reviser/finisher (Salemi et al. 2025)."
    )
    Config = MRAGConfig
    agents = (Coordinator, Planner, Searcher, Summarizer, Reasoner, Validator, MRAGAnswerer, Reviser)
    trains = (Coordinator, Planner, Searcher, Summarizer, Reasoner, Validator)  # never the answer writers

    def __init__(
        self,
        llm: LLM,
        retriever: Retriever | None = None,
        config: MRAGConfig | dict | None = None,
        llms: dict[str, LLM] | None = None,
    ):
        super().__init__(llm, retriever, config)
        for role in llms or {}:
            self.role_name(role, self.roles(nested=False), "llms")
        self.llms = {role: make_llm(LLMConfig.model_validate(spec)) for role, spec in self.config.role_llms.items()}
        self.llms.update(llms or {})
        self.aids = Aids.of(self.config, self.retriever)  # the paper's mode: none
        # who picks the agent: the coordinator (the paper), or the fixed sequence (`routing`, ours)
        self._choose = {"coordinator": self._coordinate, "sequence": self._in_sequence}[self.config.routing]

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        """Algorithm 1: a turn at a time until the finisher runs, `max_agent_calls` agent
        calls are spent or the question's budget is; the response and S, best first."""
        cfg, st = self.config, State(question)
        st.memory = SearchMemory(self.search, unseen_only=cfg.memory)
        while not st.finished and st.calls < cfg.max_agent_calls and not budget_spent():
            before = st.signature()
            routed = await self._turn(st)  # the coordinator picks an agent and its input
            if routed is not None and st.calls < cfg.max_agent_calls:
                await self._run(st, *routed)  # the agent runs, its report joins the history
            st.noops = st.noops + 1 if st.signature() == before else 0
        answered_late = st.response is None and cfg.late_answer
        if answered_late:  # `late_answer` (ours): budget spent with no response, answer once from S
            with grace():
                await self._run(st, "answerer", "", count=False)
        with step("budget") as s:
            s.outputs = st.usage(cfg.max_agent_calls, answered_late)
        return st.response or "", [h for h, _ in await self.aids.order(st)]

    # -- whose turn it is --------------------------------------------------------------------
    async def _turn(self, st: State) -> Pick | None:
        """The agent that runs and its input: an aid's pick when one takes the turn
        (`Aids.take_turn`, no coordinator call), else the chooser's; None: nobody runs."""
        for aid in self.aids.take_turn:
            if (pick := aid(st)) is not None:
                return pick
        return await self._choose(st)

    async def _coordinate(self, st: State) -> Pick | None:
        cfg = self.config
        st.coordinator_calls += 1
        d = await self._call(
            Coordinator(cfg.coordinator_input_chars),
            "coordinator",
            CoordinatorInput(
                question=st.question,
                history=st.reports(cfg.history_window, cfg.context_chars),
                response=st.response or "",
                documents=st.facts(),
                calls_left=cfg.max_agent_calls - st.calls,
                default_next=st.next_in_sequence(cfg.plan_first),
                hint=cfg.hints,
            ),
        )
        return self._route(st, d.agent, self.aids.agent_input(d.input))

    async def _in_sequence(self, st: State) -> Pick | None:
        """`routing="sequence"` (ours): searcher -> answerer -> finisher, each on the
        question, a "sequence" step for each turn."""
        with step("sequence") as s:
            s.outputs = {"agent": st.next_in_sequence(plan=False)}
        return self._route(st, s.outputs["agent"], "")

    def _route(self, st: State, picked: str, text: str) -> Pick | None:
        """The pick, unless an aid overrides it (`Aids.instead_of`) or it fails a
        precondition: then it is refused, spending an agent call, and the turn goes where
        `Aids.after_refusal` sends it (with no input: the coordinator's was meant for
        another agent), in the paper's mode nowhere: the coordinator chooses again."""
        if instead := self.aids.instead_of(st, picked):
            return instead, ""
        checks = (nothing_to_revise, *self.aids.preconditions)
        if why := next(filter(None, (check(st, picked) for check in checks)), None):
            st.calls, st.refusals = st.calls + 1, st.refusals + 1
            routed = self.aids.after_refusal(st)
            with step(picked, request=text) as s:
                s.status, s.outputs = "refused", {"refused": True, "reason": why, "routed_to": routed}
            st.history.append(f"{picked}: refused, {why}" + (f" (ran {routed} instead)" if routed else ""))
            return (routed, "") if routed else None
        return picked, text

    def _steer(self, st: State) -> Pick:
        """The no-progress guard's pick (`aids.steer`)."""
        return steer(self.config, st)

    # -- the agents ------------------------------------------------------------------------
    async def _run(self, st: State, agent: str, text: str, count: bool = True) -> None:
        st.calls += count
        report = await getattr(self, f"_{agent}")(st, text)
        st.ran.append(agent)
        shown = self.aids.reported_input(text, st.question)
        report = clip(report, self.config.report_chars)
        st.history.append(f"{agent}({clip(shown, self.config.report_chars)}): {report}" if shown else f"{agent}: {report}")

    def _llm(self, role: str) -> LLM:
        return self.role_setting(self.llms, role, self.llm)

    def _temperature(self, role: str) -> float:
        return self.role_setting(self.config.role_temperatures, role, self.config.temperature)

    async def _call(self, agent: Agent, role: str, inp: Any) -> Any:
        return await agent(self._llm(role), inp, self._temperature(role), self.config.seed)

    async def _docs(self, st: State) -> list[Doc]:
        """All of S, most relevant first (`Aids.order`), packed into `context_chars` (see
        `pack_texts`); each document within `answer_chars` (ours), and without the query
        that found it (`unlabelled_docs`, ours)."""
        cfg = self.config
        ranked = await self.aids.order(st)
        texts = [" ".join(h.text.split()) for h, _ in ranked]
        allowance = pack_texts([len(t) for t in texts], cfg.context_chars)
        about = " ".join([st.question, *st.facts()]) if cfg.answer_chars else ""
        return [
            doc_from_hit(h, min(n, cfg.answer_chars or n), found_for=j.query if j and not cfg.unlabelled_docs else "", about=about)
            for (h, j), n in zip(ranked, allowance)
            if n > 0
        ]

    async def _planner(self, st: State, text: str) -> str:
        # the plan goes to the coordinator (history), not into the notes other agents read:
        # it holds no collected information, and small models copy it into their output
        plan = await self._call(
            Planner(), "planner", PlannerInput(question=st.question, request=text, known=st.facts(last=6) + st.notes[-2:])
        )
        st.plan = "; ".join(plan.steps)
        return st.plan

    async def _searcher(self, st: State, text: str) -> str:
        # what is known: the facts the documents in S gave (notes stay out: a small model
        # copies them into its query); it goes into the query writer's prompt, never
        # into the query itself
        out, hits = await Searcher()(
            self._llm("searcher"),
            st.memory,
            SearcherInput(question=st.question, aspects=text, known=st.facts(last=6)),
            self.config.search_limits(),
            self._temperature("searcher"),
            self.config.seed,
        )
        for h, j in zip(hits, out.relevant):  # the relevant documents join S
            if h.chunk_id not in st.docs:
                st.docs[h.chunk_id], st.why[h.chunk_id] = h, j
        st.searcher_steps += len(out.steps)
        st.query_reuses += out.query_reuses
        linked = await self.aids.linked(st, "; ".join(out.queries))
        also = f"; linked: {'; '.join(f'[{h.title or h.chunk_id}]' for h in linked)}" if linked else ""
        if not out.relevant:
            return f"no relevant documents for {'; '.join(out.queries)}{also}"
        found = [f"[{j.title or j.chunk_id}]" for j in out.relevant]
        if not self.config.report_titles:  # the paper's report: what each document gives, in the judge's words
            found = [f"{name} {j.explanation}" for name, j in zip(found, out.relevant)]
        return "found " + "; ".join(found) + also

    async def _summarizer(self, st: State, text: str) -> str:
        out = await self._call(
            Summarizer(),
            "summarizer",
            SummarizerInput(question=st.question, focus=text, documents=await self._docs(st), notes=st.notes[-2:]),
        )
        st.notes.append("Summary: " + out.summary)
        return out.summary

    async def _reasoner(self, st: State, text: str) -> str:
        out = await self._call(
            Reasoner(),
            "reasoner",
            ReasonerInput(question=st.question, aspect=text, documents=await self._docs(st), notes=st.notes[-2:]),
        )
        st.notes.append("Analysis: " + out.analysis)
        return out.analysis

    async def _answerer(self, st: State, text: str) -> str:
        out = await self._call(
            MRAGAnswerer(self.config.style()),
            "answerer",
            MRAGAnswerInput(
                question=st.question,
                guidance=text if self.config.answer_guidance else "",  # `answer_guidance=False` (ours): the question alone
                notes=st.notes[-3:],
                documents=await self._docs(st),
            ),
        )
        st.response, st.answered_with = out.answer, len(st.docs)  # the answer replaces the response
        return out.answer

    async def _validator(self, st: State, text: str) -> str:
        v = await self._call(
            Validator(),
            "validator",
            ValidatorInput(question=st.question, response=st.response or "", documents=await self._docs(st)),
        )
        if not v.checked:  # no verdict: neither a pass nor a reason to revise
            return "no usable verdict (the validator's output was unusable); nothing was checked"
        report = "; ".join(
            f"{k}: {'yes' if x.ok else 'no'} ({x.feedback})"
            for k, x in (("valid", v.valid), ("grounded", v.grounded), ("correct", v.correct))
        )
        if not v.passed():
            st.notes.append("Feedback: " + report)
        return report

    async def _reviser(self, st: State, text: str) -> str:
        feedback = next((n for n in reversed(st.notes) if n.startswith("Feedback: ")), "")
        out = await self._call(
            Reviser(self.config.style()),
            "reviser",
            ReviserInput(
                question=st.question,
                response=st.response or "",
                suggestion=text or feedback.removeprefix("Feedback: "),
                notes=st.notes[-2:],
                documents=await self._docs(st),
            ),
        )
        st.response = out.answer  # the revision replaces the response
        return out.answer

    async def _finisher(self, st: State, text: str) -> str:
        finish(st.response, len(st.docs))
        st.finished = True
        return "done"


MRAGPaper = register_variant(
    MRAG, "mrag_paper", "mRAG with only the paper's behaviour (paper=true: no guards, hints, caps or late answer).",
    calls=(12, 25), paper=True,
)
MRAGSequence = register_variant(
    MRAG, "mrag_sequence", "mRAG without the coordinator: searcher, answerer, finisher in a fixed sequence (routing=sequence; half the tokens).",
    calls=(6, 8), routing="sequence",
)

__all__ = [
    "MRAG", "MRAGConfig", "MRAGPaper", "MRAGSequence", "PAPER_SETTINGS", "SEQUENCE",
    "Judged", "Searcher", "SearcherInput", "SearchLimits", "State",
]  # fmt: skip
