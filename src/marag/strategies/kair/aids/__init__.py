"""KAIR's small-model aids: our additions to the paper's loop, each a named function with
a docstring saying what it does, the failure it was measured to fix and where that was
measured: `search` (planning and retrieval), `knowledge` (the knowledge update),
`reading` (C and the generator's read). `answer_recheck` and `answer_type_check` are
every strategy's (`marag.strategies.base.AnsweringConfig`).

The loop (`marag.strategies.kair.strategy`) calls an `Aids` at each place an aid may act;
`Aids.of(config)` fills each place with the aid its setting turns on, else with the
paper's behaviour there (`PAPER`). `paper=true` turns every setting off, so it composes
none of them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from marag.agents.documents import doc_from_hit
from marag.agents.layout import clip
from marag.agents.search.memory import SearchMemory, overlap
from marag.strategies.aids import compose
from marag.strategies.kair.aids import knowledge, reading, search
from marag.strategies.kair.config import KAIRConfig


async def _nothing_linked(cfg: KAIRConfig, *_: Any) -> list:
    return []


async def _all_of_c(cfg: KAIRConfig, retriever, context: list, question: str, asked: str) -> tuple[list, list[str]]:
    return context, []


# place -> what the paper does there (each takes the config first, as the aids do)
PAPER: dict[str, Callable[..., Any] | None] = {
    "memory": lambda cfg, fn: SearchMemory(fn, unseen_only=False),  # each query's top k, read or not
    "first_query": lambda cfg, question, st, i: None,  # the planner writes every query
    "members": lambda cfg: 1,  # the planner is not told of other agents
    "relevance": lambda cfg, st: overlap,  # a query's relevance: its overlap with its gap
    "last_resort": lambda cfg, gaps: [],  # no query when every candidate repeats one
    "linked": _nothing_linked,  # a search's passages only
    "update_view": lambda cfg, hits, query, st, question: [doc_from_hit(h, cfg.doc_chars) for h in hits],
    "title_fact": lambda cfg, *_: None,  # a passage's title is no fact
    "unsupported": lambda cfg, *_: False,  # the update's facts taken as they come
    "leap": lambda cfg, *_: False,
    "answered": lambda cfg, gaps, facts: set(),  # only the gaps the update names close
    "keep_context": None,  # C refined by the filter role
    "filter_view": lambda cfg, hit, new: hit.model_copy(update={"text": clip(hit.text, cfg.doc_chars if new else None)}),
    "claims": lambda cfg, question, known, final: [],  # the generator reads all of K ...
    "known": lambda cfg, known: [],  # ... when it reads K at all: the paper's reads C only
    "to_read": _all_of_c,
    "excerpts_about": lambda cfg, asked: "",  # a clipped passage shows its opening
}

# setting -> (the place it fills, its aid); of two rows for one place, the later one wins
# when both are on (`named_passages` refines `answer_passages`)
AIDS: dict[str, tuple[str, Callable[..., Any]]] = {
    "memory": ("memory", search.unseen_only),
    "question_first": ("first_query", search.question_first),
    "agent_angles": ("members", search.agent_angles),
    "query_relevance": ("relevance", search.grounded_relevance),
    "gap_as_query": ("last_resort", search.gap_as_query),
    "linked_docs": ("linked", search.linked_docs),
    "update_chars": ("update_view", knowledge.update_excerpts),
    "title_facts": ("title_fact", knowledge.title_facts),
    "support_check": ("unsupported", knowledge.support_check),
    "leap_check": ("leap", knowledge.leap_check),
    "close_answered": ("answered", knowledge.close_answered),
    "context": ("keep_context", reading.keep_cited),
    "filter_chars": ("filter_view", reading.filter_openings),
    "drop_claims": ("claims", reading.drop_claims),
    "known_first": ("known", reading.known_first),
    "answer_passages": ("to_read", reading.answer_passages),
    "named_passages": ("to_read", reading.named_passages),
    "answer_excerpts": ("excerpts_about", reading.answer_excerpts),
}


@dataclass(frozen=True)
class Aids:
    """Each place of the loop where an aid may act, bound to the config: the aid when its
    setting is on, else the paper's behaviour (`keep_context` None: the filter role)."""

    memory: Callable[..., SearchMemory]
    first_query: Callable[..., str | None]
    members: Callable[[], int]
    relevance: Callable[..., search.Relevance]
    last_resort: Callable[..., list[tuple[str, int]]]
    linked: Callable[..., Awaitable[list]]
    update_view: Callable[..., list]
    title_fact: Callable[..., Any]
    unsupported: Callable[..., bool]
    leap: Callable[..., bool]
    answered: Callable[..., set[str]]
    keep_context: Callable[..., bool] | None
    filter_view: Callable[..., Any]
    claims: Callable[..., list[str]]
    known: Callable[..., list]
    to_read: Callable[..., Awaitable[tuple[list, list[str]]]]
    excerpts_about: Callable[[str], str]

    @classmethod
    def of(cls, cfg: KAIRConfig) -> Aids:
        on = set(cfg.additions())
        return compose(cls, cfg, PAPER, ((setting, place, aid) for setting, (place, aid) in AIDS.items()), on.__contains__)
