"""GINGER's small-model aids: our additions to the paper's pipeline, each one function or
class with its setting, what it does, the failure it was added for and where that was
measured (docs/strategies/ginger.md, "Aids", lists them).

The pipeline (`marag.strategies.ginger.strategy`) calls an `Aids` at each place an aid
may act; `Aids.of(config)` fills each place with the aid its setting turns on, else with
the paper's behaviour there (`PAPER`). `paper=true` turns every setting off, so it
composes none of them. Two aids stand where a component is chosen rather than at a
place of the pipeline: `pointwise=embedding` (`EmbeddingScores`) and
`clusterer=agglomerative` (`marag.agents.search.facets`); paper mode asks for the
paper's cross-encoder and BERTopic and falls back to them, with a note, when those are
not installed. `passage_chars=600` (the paper: whole passages, clipped at 3,000 in its
mode) and `k=20` (the paper's 40) are numbers, not parts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from marag.agents.documents import sentences as sentences_of
from marag.agents.ginger import ConciseAnswerer, ConciseInput, NuggetPicker, PickInput, concatenated_query, picked, search_strings
from marag.index.base import Hit
from marag.index.embed import similarity_to
from marag.strategies.aids import compose
from marag.strategies.ginger.config import PAPER_SETTINGS, GingerConfig
from marag.strategies.ginger.nuggets import tagged_nuggets
from marag.strategies.ginger.pairwise import Prefer, duot5
from marag.trace import step

Nugget = tuple[str, str]  # (text, the id of the passage it came from)
Scheme = Callable[[int, Prefer], Awaitable[tuple[int, list[int], int]]]  # (n, prefer) -> (depth, order, comparisons)


# -- 1-3. search strings and reranking ---------------------------------------------------
def separate_searches(cfg: GingerConfig, question: str, rewrites: list[str]) -> list[str]:
    """`separate_searches`: the question and each "rewrite + question" searched apart and
    fused by RRF, where the paper searches one string, the question with its rewrites
    appended. Not measured alone."""
    return search_strings(question, rewrites)


class EmbeddingScores:
    """`pointwise=embedding`: the pointwise scores are the cosine between the question and
    the index's stored chunk vectors (nothing embedded again), where the paper's are a
    cross-encoder's: none ships with marag. Not measured against a cross-encoder."""

    def __init__(self, index: Any):
        self.index = index
        self._vectors: np.ndarray | None = None

    async def __call__(self, question: str, hits: list[Hit]) -> tuple[list[Hit], list[float]]:
        """Every one of `hits`, scored."""
        dense = self.index.retriever("dense")
        if self._vectors is None:  # the index's own chunk vectors, read once
            self._vectors = await asyncio.to_thread(dense.chunk_vectors)
        rows = self._vectors[[self.index.position(h.chunk_id) for h in hits]]
        return hits, similarity_to(dense.embedder, question, rows).tolist()


async def bubble_both_orders(n: int, prefer: Prefer) -> tuple[list[int], int]:
    """One pass from the bottom up over n items: each neighbouring pair asked in both
    orders, swapped only when both prefer the lower one (a split verdict is the judge's
    position bias: the order stays). 2(n-1) comparisons. Returns (order, comparisons)."""
    order, calls = list(range(n)), 0
    for i in range(n - 1, 0, -1):
        upper, lower = order[i - 1], order[i]
        upper_first, lower_first = await asyncio.gather(prefer(upper, lower), prefer(lower, upper))
        calls += 2
        if not upper_first and lower_first:
            order[i - 1], order[i] = lower, upper
    return order, calls


async def bubble(cfg: GingerConfig, n: int, prefer: Prefer) -> tuple[int, list[int], int]:
    """`pairwise_scheme=bubble` (with `pairwise`): `bubble_both_orders` over the top
    `pairwise_max_calls / 2 + 1` passages instead of the paper's all pairs, so a strong
    passage can rise from rank k to the top at 2(k-1) calls, not k(k-1). Not measured
    alone. Returns (depth, order, comparisons)."""
    depth = min(n, cfg.pairwise_max_calls // 2 + 1)
    order, calls = await bubble_both_orders(depth, prefer)
    return depth, order, calls


# -- 4. nuggets ---------------------------------------------------------------------------
async def sentence_nuggets(cfg: GingerConfig, call, question: str, hit: Hit) -> list[str]:
    """`nuggets=sentences`: the passage shown as numbered sentences and the model naming
    the helpful ones, one short reply a passage, where the paper's model copies the
    passage with the spans tagged: with the 1.5B default, 1 of 79 tagged copies passed the
    check (benchmarks/RESULTS.md, "GINGER's roles on the 1.5B")."""
    sentences = sentences_of(cfg.passage(hit))
    out = await call(NuggetPicker(), PickInput(question=question, sentences=sentences))
    with step("nugget_check", chunk_id=hit.chunk_id) as s:
        got = picked(sentences, out.sentences)
        s.outputs = {"spans": got, "accepted": True}
    return got


def closest_sentences(cfg: GingerConfig, index: Any, question: str, top: list[Hit]) -> list[Nugget]:
    """`nugget_fallback`: when no passage gave a nugget, each passage's sentence closest to
    the question stands in, so the answer is still grounded in, and attributed to, the
    passages rather than empty. Without it every answer was empty: no verified span on 5
    of 5 DataMorgana questions (benchmarks/RESULTS.md, "GINGER on DataMorgana")."""
    with step("nugget_fallback", passages=len(top)) as s:
        embedder = index.retriever("dense").embedder
        chosen = []
        for h in top:
            sentences = sentences_of(cfg.passage(h), min_words=4) or [cfg.passage(h)]
            scores = similarity_to(embedder, question, embedder.embed(sentences))
            chosen.append((sentences[int(np.argmax(scores))].strip(), h.chunk_id))  # ties: the earlier sentence
        s.outputs = {"nuggets": [t for t, _ in chosen]}
    return chosen


# -- 6. the answer -------------------------------------------------------------------------
async def concise_answer(cfg: GingerConfig, call, question: str, sentences: list[dict[str, Any]], style: Any) -> str:
    """`concise_answer` (a short answer style: HotpotQA, MuSiQue, NQ): the top facets'
    sentences are the evidence for one concise answer within the style's characters,
    where the paper's length rule keeps the top facet's sentence cut to fit (a sentence
    where a span is asked for). Not measured alone."""
    out = await call(ConciseAnswerer(style), ConciseInput(question=question, sentences=[s["text"] for s in sentences]))
    return out.answer.strip()


# -- the composition ------------------------------------------------------------------------
# place -> what the paper does there (each takes the config first, as the aids do)
PAPER: dict[str, Callable[..., Any] | None] = {
    "search_strings": lambda cfg, question, rewrites: [concatenated_query(question, rewrites)],  # one query
    "passage_pairs": lambda cfg, n, prefer: duot5(n, cfg.pairwise_max_calls, prefer),  # DuoT5's all pairs
    "detect": tagged_nuggets,  # a tagged copy of each passage
    "no_nuggets": lambda cfg, index, question, top: [],  # no nugget, no answer
    "facet_pairs": lambda cfg, n, prefer: duot5(n, cfg.pairwise_max_calls, prefer),  # facets ranked by pairwise preference
    "concise": None,  # the length rule alone, for every answer style
}

# (setting, the place it fills, its aid), each on when its setting differs from the
# paper's; None: the paper's stage is left out. Of two rows for one place the later wins
# when both are on (`pairwise=false` leaves the bubble scheme nothing to order)
AIDS: tuple[tuple[str, str, Callable[..., Any] | None], ...] = (
    ("separate_searches", "search_strings", separate_searches),
    ("pairwise_scheme", "passage_pairs", bubble),
    # `pairwise=false`: with the 1.5B default, 133 of 148 pairs asked in both orders were
    # a tie (the judge follows the position), at 63-75% of GINGER's evaluated tokens; with
    # it off the same 10 passages reached nugget detection on all 8 tuning questions
    # (benchmarks/RESULTS.md, "GINGER's roles on the 1.5B")
    ("pairwise", "passage_pairs", None),
    ("nuggets", "detect", sentence_nuggets),
    ("nugget_fallback", "no_nuggets", closest_sentences),
    # `cluster_ranking=cosine`: facets stay in the order of their nuggets' mean similarity
    # to the question (no calls); not measured against the paper's pairwise ranking
    ("cluster_ranking", "facet_pairs", None),
    ("concise_answer", "concise", concise_answer),
)


@dataclass(frozen=True)
class Aids:
    """Each place of the pipeline where an aid may act, bound to the config: the aid when
    its setting is on, else the paper's behaviour (`passage_pairs`, `facet_pairs` None:
    that pairwise stage is left out; `concise` None: the length rule alone)."""

    search_strings: Callable[[str, list[str]], list[str]]
    passage_pairs: Scheme | None
    detect: Callable[..., Awaitable[list[str]]]
    no_nuggets: Callable[..., list[Nugget]]
    facet_pairs: Scheme | None
    concise: Callable[..., Awaitable[str]] | None

    @classmethod
    def of(cls, cfg: GingerConfig) -> Aids:
        """The aids `cfg` turns on, the paper's behaviour elsewhere."""
        return compose(cls, cfg, PAPER, AIDS, lambda setting: getattr(cfg, setting) != PAPER_SETTINGS[setting])
