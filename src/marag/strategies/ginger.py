"""GINGER (Łajewska et al., UiS-IAI@LiveRAG): long answers with sentence-level source
attribution, by a pipeline of small steps. `paper=true` keeps only the paper's
behaviour (PAPER_SETTINGS); every deviation of ours is a named field it turns off.

1. Rewriting (`rewrites` = l, default 3; off with `rewriting=false`): a provisional
   answer without documents, then l rewrites each about a different aspect of it. The
   paper searches one string, the query with its rewrites appended; ours
   (`separate_searches`) searches the query and each "rewrite + query" separately.
2. Retrieval: every search string on BM25 and on dense, top `first_stage` (500) each,
   fused by reciprocal rank fusion.
3. Reranking, with the original question. Pointwise over the fused list (`pointwise`):
   a cross-encoder, the paper's (the installed one, `marag.index.rerank`, or the given
   `cross_encoder` paths) over the first `cross_encoder_depth` candidates; or cosine
   between the question and the index's stored chunk vectors (ours, the default: no
   cross-encoder ships with marag); or the LLM's 0-3 relevance over the first
   `pointwise_llm_depth`. Unscored candidates keep their fused order below. Then, with
   `pairwise` (the paper's; off by default: with the 1.5B model the judge follows the
   position, 133 of 148 pairs a tie), by LLM preference over the top `k`, each pair
   asked in both orders (A, B) and (B, A) so a judge's leaning to one position cancels
   out (`pairwise_scheme`):
   `all_pairs`, the paper's DuoT5 scheme, compares every pair and orders the passages
   by their wins (ties: pointwise order); `bubble` (ours, cheaper) makes one pass from
   the bottom up and swaps neighbours only when both orders prefer the lower one, so a
   strong passage can rise from rank k to the top. `pairwise_max_calls` bounds each
   pairwise stage (all pairs: the depth shrinks to d with d(d-1) calls; bubble: to
   calls/2 + 1); depth and calls are reported.
4. Nugget detection on the top `m` (10) passages (`nuggets`): the paper's `tags`, the
   model copies each passage with <n>...</n> around the relevant spans, a copy that
   changes the text is rejected and asked for again once; or ours, `sentences` (the
   default), each passage shown as numbered sentences and the model naming the helpful
   ones (with the 1.5B default, 1 of 79 tagged copies passed the check). Nuggets keep
   their passage id. When no passage gives a nugget (`nugget_fallback`, ours), each
   passage's sentence closest to the question stands in, so the answer is not empty.
5. Clustering: nuggets embedded and grouped into facets (`clusterer`: BERTopic, the
   paper's, an optional extra; or average-linkage agglomerative on cosine distance cut at
   `cluster_threshold`, ours and the default, SciPy only; `marag.agents.search.facets`). Facets
   are ranked (`cluster_ranking`) by the paper's pairwise LLM preferences between their
   nuggets (both orders, wins as in step 3, the top d by cosine within
   `pairwise_max_calls`), or by the mean similarity of their nuggets to the question
   (ours, the default: no calls).
6. Summaries: one sentence (~`summary_words` words) per top facet from its nuggets only,
   as many facets as fit the length (`max_words`, and the answer style's characters:
   `answer_max_chars`, else 1,200 for long and 200 for short answers); then a fluency
   rewrite that keeps one sentence per facet (rejected if it changes the count), whole
   sentences kept while they fit (a first one too long is cut at a word).
   A short answer style (HotpotQA, MuSiQue, NQ): ours (`concise_answer`) writes the
   sentences of the top facets and then a concise answer from them alone, within the
   style's characters; the paper's length rule alone keeps the top facet's sentence,
   cut to fit.

Our additions (each off with `paper=true`): `pairwise=false`, `nuggets=sentences`,
`separate_searches`, `pointwise=embedding`, `k=20` (the paper's 40),
`pairwise_scheme=bubble`, `cluster_ranking=cosine`,
`clusterer=agglomerative`, `nugget_fallback`, `concise_answer`, and passages clipped to
`passage_chars` (600) in every prompt (the paper passes whole passages; in paper mode
they are clipped only at 3,000 characters, the longest setting). Paper mode uses the
cross-encoder and BERTopic when installed and otherwise falls back to embeddings and
agglomerative clustering, and says so in `details["notes"]`. Passages that fail the tag
check are asked for once more, a fluency rewrite that changes the number of sentences is
dropped for the summaries as written: those are the fallbacks the method needs, not
additions. An empty answer has no sources.

The answer (long style) is the sentences joined; `details["sentences"]` gives each with
the ids of the passages its nuggets came from. Within a question the passages' nugget
detections, the pairwise comparisons that do not depend on each other and the facets'
summaries run concurrently; `marag eval` runs questions concurrently, so the stages of
many questions keep the model busy together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from marag.agents.documents import doc_from_hit
from marag.agents.documents import sentences as sentences_of
from marag.agents.ginger import (
    ConciseAnswerer,
    ConciseInput,
    DraftInput,
    FacetInput,
    FacetPairInput,
    FacetPairwiseJudge,
    FacetSummarizer,
    FluencyInput,
    FluencyRewriter,
    NuggetDetector,
    NuggetPicker,
    PairInput,
    PairwiseJudge,
    PickInput,
    PointInput,
    PointwiseJudge,
    ProvisionalAnswer,
    RewriteInput,
    Rewriter,
    TagInput,
    concatenated_query,
    picked,
    search_strings,
    spans,
)
from marag.agents.search.facets import check_clusterer, cluster_facets
from marag.agents.search.fusion import rrf
from marag.errors import MaragError
from marag.index.base import Hit
from marag.index.cross_encoder import SUPPLY_HINT
from marag.index.embed import normalize_rows, similarity_to
from marag.index.rerank import cross_encoder_available, get_reranker
from marag.strategies.base import (
    ANSWER_PAPER_SETTINGS,
    OPERATOR_ONLY,
    STRATEGIES,
    AnsweringConfig,
    PaperSwitch,
    Strategy,
    register_variant,
)
from marag.trace import record_read, step

# What `paper=true` sets: every addition of ours off (see the module docstring).
PAPER_SETTINGS: dict[str, Any] = {
    **ANSWER_PAPER_SETTINGS,
    "separate_searches": False,
    "pointwise": "cross_encoder",  # the installed one; none installed: embeddings, with a note
    "pairwise": True,
    "pairwise_scheme": "all_pairs",
    "cluster_ranking": "pairwise",
    "clusterer": "bertopic",  # not installed: agglomerative, with a note
    "nuggets": "tags",
    "nugget_fallback": False,
    "concise_answer": False,
    "passage_chars": 3000,
}
_CHARS_PER_WORD = 6  # a summary sentence of n words takes about 6n characters


class GingerConfig(PaperSwitch, AnsweringConfig):
    paper_settings: ClassVar[dict[str, Any]] = PAPER_SETTINGS
    paper_defaults: ClassVar[dict[str, Any]] = {"k": 40}  # the paper's depth, unless a k is given
    answer_style: Literal["short", "long"] = "long"
    max_llm_calls: int | None = Field(default=120, ge=1)  # the pipeline's calls are bounded by the fields below
    rewriting: bool = True
    rewrites: int = Field(default=3, ge=1, le=6)
    separate_searches: bool = True  # ours: query and each rewrite+query searched apart, fused (paper: one concatenated query)
    first_stage: int = Field(default=500, ge=10, le=5000)
    pointwise: Literal["embedding", "llm", "cross_encoder"] = "embedding"
    pointwise_llm_depth: int = Field(default=30, ge=1, le=200)
    cross_encoder_depth: int = Field(default=100, ge=1, le=5000)  # fused candidates the cross-encoder scores
    cross_encoder: dict[str, str] | None = Field(default=None, json_schema_extra=OPERATOR_ONLY)  # {"model": path.onnx, "tokenizer": tokenizer.json}; else the installed one
    k: int = Field(default=20, ge=1, le=100)  # pairwise reranking depth (paper: 40)
    # ours, off by default: with the 1.5B default model, 133 of 148 pairs asked in both orders
    # on 12 DataMorgana questions got the same letter twice (a tie: the judge follows the
    # position), so the pairwise stage left the pointwise order as it was, at 63-75% of
    # GINGER's evaluated tokens
    pairwise: bool = False
    pairwise_scheme: Literal["bubble", "all_pairs"] = "bubble"
    pairwise_max_calls: int = Field(default=40, ge=2, le=10_000)  # per pairwise stage (passages, facets)
    m: int = Field(default=10, ge=1, le=40)  # passages for nugget detection
    nuggets: Literal["sentences", "tags"] = "sentences"  # ours: numbered sentences picked (paper: a tagged copy)
    passage_chars: int = Field(default=600, ge=100, le=3000)
    clusterer: str = "agglomerative"  # a name in marag.agents.search.facets.FACET_CLUSTERERS ("bertopic": optional extra)
    cluster_ranking: Literal["cosine", "pairwise"] = "cosine"
    nugget_fallback: bool = True  # ours: no verified span anywhere -> each passage's closest sentence
    cluster_threshold: float = Field(default=0.5, gt=0.0, le=2.0)  # average-linkage cosine distance cut
    summary_words: int = Field(default=35, ge=5, le=100)
    max_words: int = Field(default=150, ge=10, le=1000)
    concise_answer: bool = True  # ours: short answer style -> a concise answer from the top facets' sentences
    temperature: float = 0.0
    seed: int | None = None
    paper: bool = False  # only the paper's behaviour: PAPER_SETTINGS


@STRATEGIES.register("ginger")
class Ginger(Strategy):
    name = "ginger"
    paper = "Łajewska et al., UiS-IAI@LiveRAG 2025 (GINGER)"
    calls = (15, 20)  # pairwise off: draft, rewrites, one pick a passage (m=10), ~4 summaries, fluency
    description = "Rewrite, hybrid retrieval + RRF, point/pairwise rerank, nuggets, facets, grounded summaries (Łajewska et al.)."
    Config = GingerConfig
    agents = (Rewriter, ProvisionalAnswer, PointwiseJudge, PairwiseJudge, NuggetDetector, NuggetPicker, FacetPairwiseJudge, FacetSummarizer, FluencyRewriter, ConciseAnswerer)

    def __init__(self, llm, retriever=None, config=None):
        super().__init__(llm, retriever, config)
        cfg = self.config
        self.index = getattr(retriever, "index", None)
        if self.index is None or not (self.index.has("bm25") and self.index.has("dense")):
            raise MaragError("ginger needs an index with both BM25 and dense parts", hint="build it with --retrievers bm25,dense")
        self.notes: list[str] = []  # what paper mode could not have here, and what stood in
        self.clusterer = cfg.clusterer
        try:
            check_clusterer(cfg.clusterer)
        except MaragError as e:
            if not (cfg.paper and cfg.clusterer == "bertopic"):
                raise
            self.clusterer = "agglomerative"
            self.notes.append(f"clusterer: BERTopic is not installed ({e.message}); agglomerative clustering instead")
        self.pointwise = cfg.pointwise
        self._cross = None
        self._vectors: np.ndarray | None = None
        if cfg.pointwise == "cross_encoder":
            if cfg.cross_encoder is not None:
                if "model" not in cfg.cross_encoder or "tokenizer" not in cfg.cross_encoder:
                    raise MaragError("cross_encoder needs both model and tokenizer paths", hint=SUPPLY_HINT)
                self._cross = get_reranker("cross_encoder", model=cfg.cross_encoder["model"], tokenizer=cfg.cross_encoder["tokenizer"])
            elif cross_encoder_available():
                self._cross = get_reranker("cross_encoder")
            elif cfg.paper:
                self.pointwise = "embedding"
                self.notes.append("pointwise: no cross-encoder is installed (none ships with marag); embedding similarity instead")
            else:
                raise MaragError("pointwise=cross_encoder needs a cross-encoder, and none is installed", hint=SUPPLY_HINT)

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        cfg = self.config
        queries = await self._rewrite(question)
        fused = await self._retrieve(queries)
        ranked, rerank_report = await self._rerank(question, fused)
        top = ranked[: cfg.m]
        nuggets = await self._nuggets(question, top)
        facets = await asyncio.to_thread(self._cluster, question, nuggets)
        facets, facet_comparisons = await self._rank_facets(question, facets)
        answer, sentences = await self._write(question, facets)
        used = {cid for s in sentences for cid in s["passages"]} if answer else set()
        with step("budget") as s:
            s.outputs = {"search_strings": len(queries), "fused": len(fused), **rerank_report, "nuggets": len(nuggets),
                         "facets": len(facets), "facet_comparisons": facet_comparisons, "sentences": sentences,
                         "words": len(answer.split()), "notes": list(self.notes)}  # fmt: skip
        return answer, [h for h in top if h.chunk_id in used]

    # -- 1. rewriting ------------------------------------------------------------------------
    async def _rewrite(self, question: str) -> list[str]:
        cfg = self.config
        if not cfg.rewriting:
            return [question]
        draft = await self._call(ProvisionalAnswer(), DraftInput(question=question))
        rewrites = await self._call(Rewriter(cfg.rewrites), RewriteInput(question=question, draft=draft.answer, n=cfg.rewrites))
        if cfg.separate_searches:
            queries = search_strings(question, rewrites.rewrites)
        else:
            queries = [concatenated_query(question, rewrites.rewrites)]
        with step("rewriter.search_strings") as s:
            s.outputs = {"search_strings": queries}
        return queries

    # -- 2. retrieval ------------------------------------------------------------------------
    async def _retrieve(self, queries: list[str]) -> list[Hit]:
        n = self.config.first_stage
        with step("retrieve", queries=queries) as s:
            lists = []
            for kind in ("bm25", "dense"):
                r = self.index.retriever(kind)
                lists += await asyncio.to_thread(r.search_batch, queries, n)
            by_id = {h.chunk_id: h for hits in lists for h in hits}
            fused = [by_id[cid].model_copy(update={"score": score}) for cid, score in rrf([[h.chunk_id for h in hits] for hits in lists])]
            s.outputs = {"fused": len(fused), "top": [h.chunk_id for h in fused[:10]]}
        return fused

    # -- 3. reranking ------------------------------------------------------------------------
    async def _rerank(self, question: str, fused: list[Hit]) -> tuple[list[Hit], dict[str, Any]]:
        cfg = self.config
        with step("rerank", pointwise=self.pointwise, pairwise_scheme=cfg.pairwise_scheme if cfg.pairwise else None) as s:
            ranked, scored = await self._pointwise(question, fused)
            pointwise_top = [h.chunk_id for h in ranked[: cfg.k]]
            depth = calls = 0
            if cfg.pairwise and len(ranked) > 1:
                top = ranked[: cfg.k]
                texts = [self._text(h) for h in top]

                async def prefer(a: int, b: int) -> bool:  # True: the passage shown first (A) is better
                    pref = await self._call(PairwiseJudge(), PairInput(question=question, a=texts[a], b=texts[b]))
                    return pref.better == "A"

                if cfg.pairwise_scheme == "all_pairs":
                    depth = all_pairs_depth(len(top), cfg.pairwise_max_calls)
                    order, calls = await all_pairs(depth, prefer)
                else:
                    depth = min(len(top), cfg.pairwise_max_calls // 2 + 1)
                    order, calls = await bubble_both_orders(depth, prefer)
                ranked = [top[i] for i in order] + ranked[depth:]
                record_read(top[:depth])  # the passages the pairwise judge was shown
            report = {"pointwise_scored": scored, "pairwise_depth": depth, "pairwise_comparisons": calls}
            s.outputs = {**report, "pointwise_top": pointwise_top, "top": [h.chunk_id for h in ranked[: cfg.m]]}
        return ranked, report

    async def _pointwise(self, question: str, hits: list[Hit]) -> tuple[list[Hit], int]:
        """`hits` ordered by the pointwise scorer; the first `depth` are scored and the
        rest keep their fused order below them. Returns the order and how many were scored."""
        cfg = self.config
        if self.pointwise == "cross_encoder":
            depth = hits[: cfg.cross_encoder_depth]
            scores = (await asyncio.to_thread(self._cross.score, question, [self._text(h) for h in depth])).tolist()
        elif self.pointwise == "llm":
            depth = hits[: cfg.pointwise_llm_depth]
            record_read(depth)
            rated = await asyncio.gather(*(self._call(PointwiseJudge(), PointInput(question=question, passage=self._text(h))) for h in depth))
            scores = [float(r.score) for r in rated]
        else:
            depth = hits
            dense = self.index.retriever("dense")
            if self._vectors is None:  # the index's own chunk vectors: nothing is embedded again
                self._vectors = await asyncio.to_thread(dense.chunk_vectors)
            rows = self._vectors[[self.index.position(h.chunk_id) for h in hits]]
            scores = similarity_to(dense.embedder, question, rows).tolist()
        order = sorted(range(len(depth)), key=lambda i: (-scores[i], i))
        return [depth[i] for i in order] + hits[len(depth) :], len(depth)

    # -- 4. nuggets ---------------------------------------------------------------------------
    async def _nuggets(self, question: str, top: list[Hit]) -> list[tuple[str, str]]:
        record_read(top)
        found = await asyncio.gather(*(self._detect(question, h) for h in top))
        nuggets = [(text, h.chunk_id) for h, texts in zip(top, found) for text in texts]
        if nuggets or not top or not self.config.nugget_fallback:
            return nuggets
        return await asyncio.to_thread(self._closest_sentences, question, top)

    def _closest_sentences(self, question: str, top: list[Hit]) -> list[tuple[str, str]]:
        """No passage gave a verified span (a small model rarely copies a passage exactly
        and tags it): each passage's sentence closest to the question stands in, so the
        answer is still grounded in, and attributed to, the passages rather than empty."""
        with step("nugget_fallback", passages=len(top)) as s:
            embedder = self.index.retriever("dense").embedder
            picked = []
            for h in top:
                sentences = sentences_of(self._text(h), min_words=4) or [self._text(h)]
                scores = similarity_to(embedder, question, embedder.embed(sentences))
                picked.append((sentences[int(np.argmax(scores))].strip(), h.chunk_id))  # ties: the earlier sentence
            s.outputs = {"nuggets": [t for t, _ in picked]}
        return picked

    async def _detect(self, question: str, hit: Hit) -> list[str]:
        passage = self._text(hit)
        if self.config.nuggets == "sentences":
            sentences = sentences_of(passage)
            out = await self._call(NuggetPicker(), PickInput(question=question, sentences=sentences))
            with step("nugget_check", chunk_id=hit.chunk_id) as s:
                got = picked(sentences, out.sentences)
                s.outputs = {"spans": got, "accepted": True}
            return got
        detector = NuggetDetector(len(passage))
        for retry in (False, True):
            out = await self._call(detector, TagInput(question=question, passage=passage, retry=retry))
            got = spans(passage, out.tagged)
            with step("nugget_check", chunk_id=hit.chunk_id, retry=retry) as s:
                s.status = "ok" if got is not None else "refused"
                s.outputs = {"spans": got or [], "accepted": got is not None}
            if got is not None:
                return got
        return []

    # -- 5. clustering and ranking -----------------------------------------------------------
    def _cluster(self, question: str, nuggets: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
        """Facets, ordered by the mean similarity of their nuggets to the question."""
        with step("clusterer", nuggets=len(nuggets), clusterer=self.clusterer) as s:
            if not nuggets:
                s.outputs = {"clusters": []}
                return []
            embedder = self.index.retriever("dense").embedder
            vecs = normalize_rows(embedder.embed([t for t, _ in nuggets]))
            labels = cluster_facets(self.clusterer, vecs, [t for t, _ in nuggets], self.config.cluster_threshold, self.config.seed or 0)
            sims = similarity_to(embedder, question, vecs)
            groups: dict[int, list[int]] = {}
            for i, lab in enumerate(labels.tolist()):
                groups.setdefault(lab, []).append(i)
            ranked = sorted(groups.values(), key=lambda g: (-float(np.mean(sims[g])), g[0]))
            clusters = [[nuggets[i] for i in g] for g in ranked]
            s.outputs = {"clusters": [[t for t, _ in c] for c in clusters], "relevance": [round(float(np.mean(sims[g])), 4) for g in ranked]}
        return clusters

    async def _rank_facets(self, question: str, facets: list[list[tuple[str, str]]]) -> tuple[list[list[tuple[str, str]]], int]:
        """The paper's pairwise cluster ranking (`cluster_ranking=pairwise`): every pair of
        the top facets (by similarity, as many as `pairwise_max_calls` allows) asked in
        both orders, facets ordered by their wins; the rest follow by similarity."""
        cfg = self.config
        if cfg.cluster_ranking != "pairwise" or len(facets) < 2:
            return facets, 0
        with step("facet_ranker", facets=len(facets)) as s:
            depth = all_pairs_depth(len(facets), cfg.pairwise_max_calls)
            texts = [[t for t, _ in f] for f in facets[:depth]]

            async def prefer(a: int, b: int) -> bool:
                pref = await self._call(FacetPairwiseJudge(), FacetPairInput(question=question, a=texts[a], b=texts[b]))
                return pref.better == "A"

            order, calls = await all_pairs(depth, prefer)
            ranked = [facets[i] for i in order] + facets[depth:]
            s.outputs = {"depth": depth, "comparisons": calls, "order": order, "clusters": [[t for t, _ in f] for f in ranked]}
        return ranked, calls

    # -- 6. summaries, fluency, the answer -------------------------------------------------------
    async def _write(self, question: str, facets: list[list[tuple[str, str]]]) -> tuple[str, list[dict[str, Any]]]:
        cfg = self.config
        style = cfg.style()
        concise = style.name == "short" and cfg.concise_answer
        if concise:  # the facets' sentences are the evidence for one concise answer
            n = max(1, cfg.max_words // cfg.summary_words)
        else:  # the facets whose sentences can fit the answer's words and characters
            n = max(1, min(cfg.max_words // cfg.summary_words, style.max_chars // (cfg.summary_words * _CHARS_PER_WORD)))
        chosen = facets[:n]
        written = await asyncio.gather(
            *(self._call(FacetSummarizer(), FacetInput(question=question, nuggets=[t for t, _ in f], words=cfg.summary_words)) for f in chosen)
        )
        sentences = [
            {"text": w.sentence.strip(), "passages": list(dict.fromkeys(cid for _, cid in f))}
            for w, f in zip(written, chosen)
            if w.sentence.strip()
        ]
        if not sentences:
            return "", []
        if concise:
            out = await self._call(ConciseAnswerer(style), ConciseInput(question=question, sentences=[s["text"] for s in sentences]))
            return out.answer.strip(), sentences
        fluent = await self._call(FluencyRewriter(len(sentences)), FluencyInput(question=question, sentences=[s["text"] for s in sentences]))
        if len(fluent.sentences) == len(sentences):
            sentences = [{**s, "text": t.strip() or s["text"]} for s, t in zip(sentences, fluent.sentences)]
        sentences = limit_length(sentences, cfg.max_words, style.max_chars)
        return " ".join(s["text"] for s in sentences), sentences

    def _text(self, hit: Hit) -> str:
        return doc_from_hit(hit, self.config.passage_chars).text

    async def _call(self, agent, inp):
        return await agent(self.llm, inp, self.config.temperature, self.config.seed)


Prefer = Callable[[int, int], Awaitable[bool]]  # (a, b) -> True when the item shown first, a, is preferred


def all_pairs_depth(n: int, max_calls: int) -> int:
    """How many of `n` items all-pairs comparison can cover: the largest d <= n with
    d(d-1) ordered comparisons within `max_calls`."""
    d = min(n, int((1 + (1 + 4 * max_calls) ** 0.5) / 2))
    while d > 1 and d * (d - 1) > max_calls:
        d -= 1
    return max(d, 1)


async def all_pairs(n: int, prefer: Prefer) -> tuple[list[int], int]:
    """DuoT5's aggregation with votes: every ordered pair (a, b) of the n items asked
    once, so each pair in both orders; an item scores a win each time it is preferred;
    items ordered by wins, ties by their position. A judge that always picks the same
    position gives every item n-1 wins: the order stays. Returns (order, comparisons)."""
    pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    verdicts = await asyncio.gather(*(prefer(a, b) for a, b in pairs))
    wins = [0] * n
    for (a, b), first in zip(pairs, verdicts):
        wins[a if first else b] += 1
    return sorted(range(n), key=lambda i: (-wins[i], i)), len(pairs)


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


def _cut(text: str, max_words: int, max_chars: int | None) -> str:
    words = text.split()[:max_words]
    out = " ".join(words)
    if max_chars is not None and len(out) > max_chars:
        out = out[: max_chars + 1].rsplit(" ", 1)[0] if " " in out[: max_chars + 1] else out[:max_chars]
    return out.rstrip()


def limit_length(sentences: list[dict[str, Any]], max_words: int, max_chars: int | None = None) -> list[dict[str, Any]]:
    """Whole sentences while they fit in `max_words` and, joined by spaces, in
    `max_chars`; a first sentence longer than either is cut at a word to fit."""
    out, words, chars = [], 0, -1
    for s in sentences:
        n, c = len(s["text"].split()), len(s["text"]) + 1
        if words + n > max_words or (max_chars is not None and chars + c > max_chars):
            if not out:
                out.append({**s, "text": _cut(s["text"], max_words, max_chars)})
            break
        out.append(s)
        words, chars = words + n, chars + c
    return out


register_variant(Ginger, "ginger_no_rewrite", "GINGER without query rewriting.", rewriting=False)
register_variant(
    Ginger,
    "ginger_paper",
    "GINGER with only the paper's behaviour (one concatenated query, cross-encoder and DuoT5-style pairwise reranking of the top 40, BERTopic, pairwise facet ranking, whole passages).",
    calls=(60, 100),  # 40 passage comparisons, up to 2 tagged copies of each of m passages, up to 40 facet comparisons
    paper=True,
)
