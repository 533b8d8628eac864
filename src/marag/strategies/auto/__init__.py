"""`auto`: each question answered at the price it needs (after Adaptive-RAG, Jeong et
al. 2024, and the accuracy-cost knob of "Fast or Better?", Su et al. 2025).

1. **First pass**: retrieve the question's top `k` passages once and read them once
   (`vanilla_rag_k5`'s read, `baselines.read_once`).
2. **Route**: the first pass's signals (`signals.first_pass_signals`: the reader's token
   log-probabilities, whether the answer is in a passage, its kind against the
   question's, the retrieval scores, the question's shape) go through a router learned
   from marag's own runs (`router.Router`, a JSON file; `marag train router`), which
   gives p(the first answer is right). The knob `escalate` is the share of questions
   sent on (on the router's training questions); the default is the router's knee.
3. **Keep or escalate**: a question whose score is below the knob's threshold goes to
   an agent (`agent`, default `unirag`, the best with the default model on the tuning
   sets), which continues from the first pass (`Strategy.solve_from`: UniRAG takes the
   passages as its first search, not searching or reading them again).

A `route` step records the signals, the score, the knob, its threshold and the
decision; the answer's details say which path answered (`path`, `escalated`,
`router_score`), so reports can redraw the quality-cost curve over the knob without a
model call (`marag.eval.quality_cost`).
"""

from __future__ import annotations

import math
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from marag.agents.answerer import Answerer
from marag.errors import MaragError, MaragWarning
from marag.index.base import Hit
from marag.strategies.auto.router import Router
from marag.strategies.auto.signals import first_pass_signals, reader_reply
from marag.strategies.base import OPERATOR_ONLY, STRATEGIES, AnsweringConfig, FirstPass, Strategy
from marag.strategies.baselines import read_once
from marag.trace import Step, activate, current_trace, step


class RouterModelWarning(MaragWarning, UserWarning):
    """The router was trained on another model's reads: its confidence signals mean
    something else for this one."""


class AutoConfig(AnsweringConfig):
    k: int = Field(default=5, ge=1, le=50)  # passages the first pass reads (vanilla_rag_k5's)
    agent: str = "unirag"  # the strategy a question is sent on to
    # the agent's own settings over its defaults (the answer style comes from here)
    agent_settings: dict[str, Any] = Field(default_factory=dict, json_schema_extra=OPERATOR_ONLY)
    router: str | None = Field(default=None, json_schema_extra=OPERATOR_ONLY)  # a router JSON file; None: marag's
    # the share of questions sent on, as measured on the router's training questions
    # (0: never, 1: always); None: the router's default, the knee of its curve
    escalate: float | None = Field(default=None, ge=0.0, le=1.0)
    start_from_first: bool = True  # the agent continues from the first pass (False: it starts over)
    temperature: float = 0.0

    @field_validator("agent")
    @classmethod
    def _known_agent(cls, v: str) -> str:
        if v not in STRATEGIES or v == "auto" or STRATEGIES.get(v).variant_of == "auto":
            known = ", ".join(n for n in STRATEGIES.names() if n != "auto" and STRATEGIES.get(n).variant_of != "auto")
            raise ValueError(f"unknown agent {v!r}: choose one of {known}")
        return v

    @model_validator(mode="after")
    def _agent_settings(self) -> "AutoConfig":
        try:
            STRATEGIES.get(self.agent).validate_config(self.agent_config())
        except MaragError as exc:
            raise ValueError(f"agent_settings: {exc.message}") from None
        return self

    def agent_config(self) -> dict[str, Any]:
        """The agent's settings: the answer style and budgets auto runs with, then
        `agent_settings`."""
        cls = STRATEGIES.get(self.agent)
        shared = ("answer_style", "answer_max_chars", "answer_recheck", "answer_type_check")
        inherited = {k: getattr(self, k) for k in shared if k in cls.Config.model_fields}
        return {**inherited, **self.agent_settings}


@STRATEGIES.register("auto")
class Auto(Strategy):
    name = "auto"
    paper = "after Jeong et al. 2024 (Adaptive-RAG) and Su et al. 2025 (Fast or Better?)"
    calls = (1, 8)
    description = "Read once; send only the questions a learned router doubts on to an agent (unirag), which continues from that read."
    Config = AutoConfig
    agents = (Answerer,)
    delegates = ("unirag",)  # the default agent's roles, under its own names

    def __init__(self, llm, retriever=None, config=None):
        super().__init__(llm, retriever, config)
        self.router = Router.load(self.config.router)
        self.agent = STRATEGIES.get(self.config.agent)(llm, retriever, self.config.agent_config())
        trained = self.router.spec.model
        if trained and trained != getattr(llm, "model", trained) and getattr(llm, "kind", "") != "scripted":
            warnings.warn(
                f"the router {Path(self.router.source).name} was trained on {trained}'s reads, not {llm.model}'s: "
                "train one for this model with `marag train router RUN_DIR... --out FILE` and --set auto.router=FILE",
                RouterModelWarning,
                stacklevel=2,
            )

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        cfg = self.config
        out, hits = await read_once(self, question, cfg.k, cfg.style(), cfg.temperature)
        first = _first_pass(question, hits, out.answer)
        signals = first_pass_signals(first)
        score = self.router.score(signals)
        share = cfg.escalate if cfg.escalate is not None else self.router.spec.escalate_default
        threshold = self.router.threshold(share)
        escalated = score < threshold
        with step("route") as s:
            s.outputs = {
                "decision": cfg.agent if escalated else "first_pass",
                "score": round(score, 4),
                "escalate": share,
                "threshold": threshold if math.isfinite(threshold) else ("-inf" if threshold < 0 else "inf"),
                "first_answer": out.answer,
                "signals": {k: (round(v, 4) if math.isfinite(v) else None) for k, v in signals.items()},
                "why": dict(list(self.router.contributions(signals).items())[:5]),
                "router": Path(self.router.source).name,
            }
        if not escalated:
            self._report({}, "first_pass", score, out.answer)
            return out.answer, hits
        agent = self.agent
        trace = current_trace()
        mark = len(trace.steps) if trace is not None else 0
        # the agent's steps are its own roles (`unirag.planner`): LoRA adapters and
        # training exports key on them as in a run of the agent alone
        with activate(trace, roles=agent.family()) if trace is not None else nullcontext():
            text, agent_hits = await (agent.solve_from(first) if cfg.start_from_first else agent.solve(question))
        own = _last_budget(trace.steps[mark:]) if trace is not None else {}
        self._report(own, cfg.agent, score, out.answer)
        return text, agent_hits

    def _report(self, agent_counts: dict[str, Any], path: str, score: float, first_answer: str) -> None:
        """The last `budget` step (the answer's details): the agent's own counts, if it
        ran, and which path answered."""
        with step("budget") as s:
            s.outputs = {**agent_counts, "path": path, "escalated": float(path != "first_pass"),
                         "router_score": round(score, 4), "first_answer": first_answer}  # fmt: skip


def first_pass_strategy(k: int) -> str | None:
    """The registered one-shot read with auto's first pass's `k` (`vanilla_rag_k5` for
    5): the strategy whose answers, beside auto's and its agent's in one run, redraw
    auto's curve. None when no such variant is registered."""
    for name in STRATEGIES.names():
        cls = STRATEGIES.get(name)
        if cls.family() == "vanilla_rag" and cls.Config.model_validate(cls.defaults).k == k:  # type: ignore[attr-defined]
            return name
    return None


def _first_pass(question: str, hits: list[Hit], answer: str) -> FirstPass:
    """The first pass with the reader's reply and token log-probabilities, from the
    trace step its answerer call was recorded in (`signals.reader_reply`: the same
    reading a recorded trace gets)."""
    trace = current_trace()
    found = reader_reply(trace.steps) if trace is not None else None
    call = found[1] if found else None
    logprobs = tuple(call.logprobs) if call is not None and call.logprobs else None
    return FirstPass(question=question, hits=tuple(hits), answer=answer, reply=call.response if call else "", logprobs=logprobs)


def _last_budget(steps: list[Step]) -> dict[str, Any]:
    return next((dict(s.outputs) for s in reversed(steps) if s.agent == "budget"), {})

