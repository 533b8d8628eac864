"""What every strategy shares: a config (budgets are data), a run that opens a trace,
and the `Answer` it returns."""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from marag.agents.answerer import ANSWER_STYLES, AnswerStyle
from marag.errors import MaragWarning
from marag.index.base import Hit, Retriever
from marag.llm.base import LLM
from marag.llm.budget import Budget, activate_budget
from marag.registry import Registry
from marag.trace import TokenLogprob, Trace, activate

STRATEGIES: Registry[type["Strategy"]] = Registry("strategies")
T = TypeVar("T")


class RoleNameWarning(MaragWarning, FutureWarning):
    """A bare role name (`planner`) where a qualified one (`mrag.planner`) is meant:
    still accepted, to be written the new way."""


@dataclass(frozen=True)
class FirstPass:
    """What one retrieval and one read produced: the passages read, in rank order, and
    the answer, with the reader's raw reply and its tokens' log-probabilities when the
    backend gave them. `auto` routes on it, and an agent it sends the question on to
    starts from it (`Strategy.solve_from`) instead of searching and reading it again."""

    question: str
    hits: tuple[Hit, ...]
    answer: str
    reply: str = ""  # the reader's raw reply (JSON), which the tokens spell
    logprobs: tuple[TokenLogprob, ...] | None = None


class Source(BaseModel):
    doc_id: str
    chunk_id: str
    title: str = ""
    score: float = 0.0
    text: str = ""

    @classmethod
    def from_hit(cls, hit: Hit) -> "Source":
        return cls(doc_id=hit.doc_id, chunk_id=hit.chunk_id, title=hit.title, score=hit.score, text=hit.text)


class Answer(BaseModel):
    question: str
    answer: str
    sources: list[Source] = Field(default_factory=list)  # what the answer is grounded on (mRAG's S, KAIR's C, ...)
    # every document a model was shown ({chunk_id, doc_id, title}, in reading order):
    # retrieval metrics and failure attribution read this, so they mean the same for
    # every strategy (a strategy that records no reads is taken to have read its sources)
    read: list[dict[str, str]] = Field(default_factory=list)
    strategy: str
    config: dict[str, Any] = Field(default_factory=dict)
    usage: dict[str, float] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)  # the strategy's own report (its "budget" step), lists included
    seconds: float = 0.0
    trace: Trace = Field(exclude=True)

    def summary(self) -> dict[str, Any]:
        """A JSON-friendly record without the (large) trace."""
        return {**self.model_dump(mode="json"), "trace_id": self.trace.id}


# Marks a config field that names a model, a file, a URL, a directory or an environment
# variable (an LLM spec has all of these: base_url, api_key_env, model_path, lora,
# cache_dir). Whoever sets such a field chooses what the process reads, writes and
# connects to, and which of its secrets it sends where (api_key_env may name any
# variable; it goes to base_url as a Bearer token). The command line and config files
# may set them; `marag serve` refuses them in requests (`operator_only_fields`). Mark
# every such field: `Field(..., json_schema_extra=OPERATOR_ONLY)`.
OPERATOR_ONLY: dict[str, Any] = {"operator_only": True}


def operator_only_fields(config: type[BaseModel]) -> frozenset[str]:
    """The fields of `config` marked `OPERATOR_ONLY`."""
    return frozenset(name for name, field in config.model_fields.items()
                     if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("operator_only"))  # fmt: skip


class StrategyConfig(BaseModel):
    """Every strategy's config. The hard per-question budget is common to all (see
    `marag.llm.budget`): whichever of calls, tokens and seconds runs out first stops the
    work, and the strategy answers from what it has. The defaults leave ordinary runs
    alone (mRAG made 15-30 calls a question with SmolLM2-135M, about 12 with the default
    1.5B model on hard HotpotQA questions) and stop runaway ones."""

    model_config = ConfigDict(extra="forbid")

    max_llm_calls: int | None = Field(default=80, ge=1)
    max_tokens: int | None = Field(default=60_000, ge=100)  # prompt + completion, per question
    deadline_s: float | None = Field(default=900.0, gt=0)  # wall clock; depends on the machine's load

    def budget(self) -> Budget:
        return Budget(self.max_llm_calls, self.max_tokens, self.deadline_s)


class AnsweringConfig(StrategyConfig):
    """Settings of strategies that write an answer: its style (short span or paragraph;
    evaluation sets each declare theirs) and an optional tighter or looser length cap."""

    answer_style: Literal["short", "long"] = "short"
    answer_max_chars: int | None = Field(default=None, ge=20, le=8000)
    # ours, on by default, off in paper modes: a short answer that only repeats a name
    # the question gives is sent back once, told so (marag.agents.answerer.echoes_question).
    # Such answers are rarely right (the 1.5B: 0 of 22; the 0.5B: 2 of 14, "Pizza Hut"
    # for a question that offers it, no longer flagged; NQ: 4 of 600 gold answers).
    # Sent back, the 0.5B was right 0 times of 15 (issue 24, when this was off by
    # default); the 1.5B, told the name cannot be the answer, 1 time of 5.
    answer_recheck: bool = True
    # ours, on by default, off in paper modes: a short answer not of the kind the question
    # asks for (a name for "When ...?", "How many ...?" or a yes/no question) is sent back
    # once, told what is asked (marag.agents.answer_types). Offline over the default
    # model's runs, 12 such answers of 107 to questions of these kinds, none right.
    # A short answer written as a sentence is sent back the same way (9 of 9 came back
    # short, replayed with the default model; docs/strategies/index.md).
    answer_type_check: bool = True

    def style(self) -> AnswerStyle:
        style = ANSWER_STYLES[self.answer_style].with_max_chars(self.answer_max_chars)
        return replace(style, recheck=self.answer_recheck, type_check=self.answer_type_check)


# Our additions to every answering step, off in every paper mode: each strategy's
# PAPER_SETTINGS includes these.
ANSWER_PAPER_SETTINGS: dict[str, Any] = {"answer_recheck": False, "answer_type_check": False}


class PaperSwitch(BaseModel):
    """For a config with a `paper: bool` field: `paper=true` sets `paper_settings` (every
    addition of ours off, over whatever else was given) and `paper_defaults` (the paper's
    values of settings where our default differs, e.g. more documents per search; a value
    the caller gives still wins), and `additions()` names the additions that are on, for
    reports that must say which variant a number is from."""

    paper_settings: ClassVar[dict[str, Any]] = {}
    paper_defaults: ClassVar[dict[str, Any]] = {}
    # an addition that only acts under another setting's value, {addition: (setting,
    # value)}: it is not named as on when that setting has another value
    acts_only_with: ClassVar[dict[str, tuple[str, Any]]] = {}

    @model_validator(mode="before")
    @classmethod
    def _paper_mode(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("paper"):
            return {**cls.paper_defaults, **data, **cls.paper_settings}
        return data

    def additions(self) -> list[str]:
        def acts(k: str) -> bool:
            needs = self.acts_only_with.get(k)
            return needs is None or getattr(self, needs[0]) == needs[1]

        return [k for k, paper in self.paper_settings.items() if getattr(self, k) != paper and acts(k)]


class Strategy:
    """Subclasses set `name`, `Config`, `description`, `needs_retriever`, and implement
    `solve(question) -> (answer text, supporting hits)`."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    needs_retriever: ClassVar[bool] = True
    Config: ClassVar[type[StrategyConfig]] = StrategyConfig
    # config values this strategy uses unless the caller sets them (a variant's identity,
    # e.g. an ablation); see `register_variant`
    defaults: ClassVar[dict[str, Any]] = {}
    paper: ClassVar[str] = ""  # where the method comes from, for listings
    # LLM calls a question typically takes (low, high), as measured here with default
    # settings: `marag strategies` shows it and `marag eval` estimates a run's calls by it
    calls: ClassVar[tuple[int, int]] = (1, 1)
    variant_of: ClassVar[str | None] = None  # set by `register_variant`
    # Its roles, declared: the agent classes it runs (one role each, named `agent.name`);
    # an agent class may hold agents of its own (`agents`, e.g. mRAG's searcher). A role's
    # identity is `<family>.<agent name>` (`mrag.planner`, `unirag.planner`): see `roles`.
    agents: ClassVar[tuple[type, ...]] = ()
    # the agents self-training trains by default (`marag train`); none: not trainable
    trains: ClassVar[tuple[type, ...]] = ()
    # strategies whose agents this one runs under their own role names (`auto` runs its
    # default agent's: `unirag.planner`); their roles are among `roles()`
    delegates: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def family(cls) -> str:
        """The registered name of the strategy a variant is of (`mrag` for `mrag_paper`):
        the first part of its roles' names, the same for every variant."""
        for k in cls.__mro__:
            if "name" in k.__dict__ and not k.__dict__.get("variant_of"):
                return k.__dict__["name"]
        return cls.name

    @classmethod
    def role_agents(cls, agents: Iterable[type] | None = None, nested: bool = True) -> dict[str, type]:
        """Qualified role name -> agent class, for the declared `agents` (or those given),
        and with `nested` the agents they hold, in declaration order. Two classes of one
        name (a variant of a role) are one role."""
        out: dict[str, type] = {}
        for agent in cls.agents if agents is None else agents:
            out.setdefault(f"{cls.family()}.{agent.name}", agent)
            if nested:
                out.update({k: v for k, v in cls.role_agents(getattr(agent, "agents", ()), nested).items() if k not in out})
        return out

    @classmethod
    def roles(cls, nested: bool = True) -> tuple[str, ...]:
        """Its roles' qualified names (`mrag.planner`, ...), from the agents it declares:
        the names its trace steps have, qualified by `family()`, and the names LoRA roles,
        training and role settings use, then its `delegates`' roles. `nested=False`:
        only the agents it calls itself."""
        delegated = (r for name in cls.delegates for r in STRATEGIES.get(name).roles(nested))
        return tuple(dict.fromkeys([*cls.role_agents(nested=nested), *delegated]))

    @classmethod
    def trainable_roles(cls) -> tuple[str, ...]:
        """The roles `marag train` trains by default (the agents in `trains` and theirs)."""
        return tuple(cls.role_agents(cls.trains))

    @classmethod
    def role_name(cls, name: str, allowed: Iterable[str] | None = None, setting: str = "role") -> str:
        """`name` as one of its qualified roles (`allowed`, default all): a bare agent name
        (`planner`, as written before roles were qualified) still works, with a
        `RoleNameWarning` naming the new one; an unknown name is a ValueError listing them."""
        allowed = tuple(cls.roles() if allowed is None else allowed)
        if name in allowed:
            return name
        qualified = f"{cls.family()}.{name}"
        if qualified in allowed:
            warnings.warn(f"{setting} {name!r}: bare role names are deprecated, write {qualified!r}", RoleNameWarning, stacklevel=3)
            return qualified
        raise ValueError(f"unknown role {name!r}: choose among {', '.join(allowed)}")

    @classmethod
    def role_setting(cls, values: dict[str, T], role: str, default: T) -> T:
        """A per-role setting (`role_temperatures`, ...) for the role whose bare agent name
        is `role`: its qualified key, else its bare (deprecated) key, else `default`."""
        return values.get(f"{cls.family()}.{role}", values.get(role, default))

    def __init__(self, llm: LLM, retriever: Retriever | None = None, config: StrategyConfig | dict | None = None):
        if self.needs_retriever and retriever is None:
            from marag.errors import MaragError

            raise MaragError(
                f"strategy {self.name!r} needs a retriever", hint="pass --index IDX (build one with `marag index`)"
            )
        self.llm = llm
        self.retriever = retriever
        if not isinstance(config, self.Config):
            config = self.validate_config(config)
        self.config = config

    @classmethod
    def validate_config(cls, settings: dict | None) -> StrategyConfig:
        """This strategy's config from `settings` over its defaults; a bad value or an
        unknown key is a one-line `MaragError` naming the strategy, the key, the value and
        what is allowed."""
        try:
            return cls.Config.model_validate({**cls.defaults, **(settings or {})})
        except ValidationError as exc:
            raise settings_error(f"strategy {cls.name!r}", exc, cls.Config) from None

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        raise NotImplementedError

    async def solve_from(self, first: FirstPass) -> tuple[str, list[Hit]]:
        """Answer `first.question` continuing from a first pass (`auto` escalating): a
        strategy that can use what was already retrieved and read overrides this (UniRAG
        takes it as its first search). By default it starts over."""
        return await self.solve(first.question)

    async def search(self, query: str, k: int, offset: int = 0) -> list[Hit]:
        """Retrieval off the event loop, so other questions' LLM calls keep going."""
        assert self.retriever is not None
        return await asyncio.to_thread(self.retriever.search, query, k, offset)

    async def run(self, question: str) -> Answer:
        config = self.config.model_dump(mode="json")
        trace = Trace(question=question, strategy=self.name, config=config)
        t0 = time.perf_counter()
        budget = self.config.budget()
        with activate(trace, roles=self.family()), activate_budget(budget):
            text, hits = await self.solve(question)
        trace.answer = text
        trace.budget = {
            "max_llm_calls": budget.max_llm_calls,
            "max_tokens": budget.max_tokens,
            "deadline_s": budget.deadline_s,
            "llm_calls": budget.calls,
            "tokens": budget.tokens,
            "stopped_by": budget.stopped_by,
        }
        # a strategy reports its own counts (cycles, agent calls, ...) in a last "budget" step
        own = next((s.outputs for s in reversed(trace.steps) if s.agent == "budget"), {})
        counts = {k: float(v) for k, v in own.items() if isinstance(v, (int, float))}
        return Answer(
            question=question,
            answer=text,
            sources=[Source.from_hit(h) for h in hits],
            read=trace.read or [{"chunk_id": h.chunk_id, "doc_id": h.doc_id, "title": h.title} for h in hits],
            strategy=self.name,
            config=config,
            usage={**trace.totals(), **counts, "stopped_by_budget": float(budget.stopped_by is not None)},
            details=dict(own),
            seconds=round(time.perf_counter() - t0, 3),
            trace=trace,
        )


def settings_error(owner: str, exc: ValidationError, model: type[BaseModel] | None, options: dict[str, str] | None = None):
    """A one-line error for the first problem in a pydantic validation error (with the
    valid keys of `model` for an unknown key). `options`: the command-line option of
    each field, named in the hint instead of `--set KEY=...`."""
    from marag.errors import MaragError

    err = exc.errors()[0]
    key = ".".join(str(p) for p in err.get("loc", ()))
    if err.get("type") == "extra_forbidden":
        known = ", ".join(sorted(model.model_fields)) if model else "see the documentation"
        return MaragError(f"{owner} has no setting {key!r}", hint=f"valid keys: {known}")
    msg = err.get("msg", "invalid").removeprefix("Value error, ")
    if not key:  # a check across several settings
        named = [o for f, o in (options or {}).items() if f in msg]
        return MaragError(f"{owner}: {msg}", hint=f"change {' or '.join(named)}" if named else "change the settings it names")
    fix = (options or {}).get(key.split(".")[0])
    return MaragError(f"{owner}: {key}={err.get('input')!r} is not allowed: {msg}", hint=f"change {fix}" if fix else f"fix --set {key}=...")


def register_variant(base: type[Strategy], name: str, description: str, *, calls: tuple[int, int] | None = None,
                     **defaults: Any) -> type[Strategy]:  # fmt: skip
    """Register `base` under another name with other config defaults (an ablation or a
    paper-only mode): one evaluation can run both and its tables tell them apart."""
    cls = type(base.__name__ + "_" + name, (base,),
               {"name": name, "description": description, "defaults": {**base.defaults, **defaults}, "variant_of": base.name,
                "calls": calls or base.calls})  # fmt: skip
    STRATEGIES.register(name)(cls)
    return cls


def make_strategy(name: str, llm: LLM, retriever: Retriever | None = None, config: dict | None = None) -> Strategy:
    return STRATEGIES.get(name)(llm, retriever, config)


def warn_bare_roles(names: Iterable[str], setting: str = "role") -> None:
    """A `RoleNameWarning` for each bare role name among `names` (e.g. `--lora-roles
    planner`), naming the qualified roles it stands for (`mrag.planner`,
    `unirag.planner`). Bare names still work where they did: they match that agent name
    in every strategy."""
    known = {r for n in STRATEGIES.names() for r in STRATEGIES.get(n).roles()}
    for name in names:
        if name in known:
            continue
        if matches := sorted({r for r in known if r.split(".", 1)[1] == name}):
            warnings.warn(f"{setting} {name!r}: bare role names are deprecated, write {' or '.join(matches)}", RoleNameWarning, stacklevel=2)


async def run_many(strategy: Strategy, questions: list[str], concurrency: int = 4, progress: bool = False) -> list[Answer]:
    """Answer several questions concurrently (a batching LLM server stays busy);
    results come back in the order of `questions`. `progress`: a bar on stderr."""
    from tqdm.auto import tqdm

    gate = asyncio.Semaphore(max(1, concurrency))
    bar = tqdm(total=len(questions), desc=strategy.name, unit="q", disable=not progress)

    async def one(q: str) -> Answer:
        async with gate:
            answer = await strategy.run(q)
        bar.update(1)
        return answer

    try:
        return list(await asyncio.gather(*(one(q) for q in questions)))
    finally:
        bar.close()
