"""GINGER (Łajewska et al., UiS-IAI@LiveRAG): long answers with sentence-level source
attribution, by a pipeline of small steps. This module is the paper's pipeline; our
small-model aids act where it calls `self.aids` (`marag.strategies.ginger.aids`: none
with `paper=true`, which keeps only the paper's behaviour, PAPER_SETTINGS).

1. Rewriting (`rewrites` = l, default 3; off with `rewriting=false`): a provisional
   answer without documents, then l rewrites each about a different aspect of it,
   searched as one string, the query with its rewrites appended.
2. Retrieval: every search string on BM25 and on dense, top `first_stage` (500) each,
   fused by reciprocal rank fusion.
3. Reranking, with the original question. Pointwise over the fused list (`pointwise`):
   a cross-encoder, the paper's (the installed one, `marag.index.rerank`, or the given
   `cross_encoder` paths; none installed, paper mode uses embeddings, with a note) over
   the first `cross_encoder_depth` candidates, or the LLM's 0-3 relevance over the first
   `pointwise_llm_depth`; unscored candidates keep their
   fused order below. Then pairwise by LLM preference over the top `k`, DuoT5's scheme
   (`pairwise.duot5`): every pair asked in both orders (A, B) and (B, A), so a judge's
   leaning to one position cancels out, the passages ordered by their wins (ties:
   pointwise order), the depth shrunk to d with d(d-1) calls within `pairwise_max_calls`;
   depth and calls are reported.
4. Nugget detection on the top `m` (10) passages: the model copies each passage with
   <n>...</n> around the relevant spans, a copy that changes the text is rejected and
   asked for again once (`nuggets.tagged_nuggets`). Nuggets keep their passage id.
5. Clustering: nuggets embedded and grouped into facets (`clusterer`: BERTopic, the
   paper's, an optional extra; paper mode without it clusters agglomeratively, with a
   note; `marag.agents.search.facets`). Facets are ranked by pairwise LLM preferences
   between their nuggets (both orders, wins as in step 3, the top d by cosine within
   `pairwise_max_calls`).
6. Summaries: one sentence (~`summary_words` words) per top facet from its nuggets only,
   as many facets as fit the length (`max_words`, and the answer style's characters:
   `answer_max_chars`, else 1,200 for long and 200 for short answers); then a fluency
   rewrite that keeps one sentence per facet (dropped if it changes the count: the
   summaries stand as written), whole sentences kept while they fit (a first one too
   long is cut at a word). An empty answer has no sources.

Our aids, by step: separate searches (1); cosine to the stored chunk vectors as the
pointwise scores, and no pairwise stage or a cheaper bubble pass (3); nuggets by sentence
number and, when no passage gives one, each passage's closest sentence (4);
agglomerative clustering and facets ranked by similarity, no calls (5); a concise answer
from the top facets' sentences for a short answer style (6).

The answer (long style) is the sentences joined; `details["sentences"]` gives each with
the ids of the passages its nuggets came from. Within a question the passages' nugget
detections, the pairwise comparisons that do not depend on each other and the facets'
summaries run concurrently; `marag eval` runs questions concurrently, so the stages of
many questions keep the model busy together.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from marag.agents.ginger import (ConciseAnswerer, DraftInput, FacetInput, FacetPairInput, FacetPairwiseJudge, FacetSummarizer,
                                 FluencyInput, FluencyRewriter, NuggetDetector, NuggetPicker, PairInput, PairwiseJudge,
                                 PointInput, PointwiseJudge, ProvisionalAnswer, RewriteInput, Rewriter)  # fmt: skip
from marag.agents.search.facets import check_clusterer, cluster_facets
from marag.agents.search.fusion import rrf
from marag.errors import MaragError
from marag.index.base import Hit
from marag.index.cross_encoder import SUPPLY_HINT
from marag.index.embed import normalize_rows, similarity_to
from marag.index.rerank import cross_encoder_available, get_reranker
from marag.strategies.base import STRATEGIES, Strategy, register_variant
from marag.strategies.ginger.aids import Aids, EmbeddingScores, Nugget
from marag.strategies.ginger.config import GingerConfig
from marag.strategies.ginger.pairwise import Prefer
from marag.trace import record_read, step

_CHARS_PER_WORD = 6  # a summary sentence of n words takes about 6n characters
Facet = list[Nugget]


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
        self.aids = Aids.of(cfg)
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
        # the pointwise scorer: (question, fused) -> (the candidates it scored, their scores)
        scorers = {"cross_encoder": self._cross_encoder_scores, "llm": self._llm_scores, "embedding": EmbeddingScores(self.index)}
        self.scores = scorers[self.pointwise]

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
        queries = self.aids.search_strings(question, rewrites.rewrites)  # the paper's: one concatenated query
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
            if self.aids.passage_pairs and len(ranked) > 1:
                top = ranked[: cfg.k]
                prefer = self._prefer(PairwiseJudge(), PairInput, question, [cfg.passage(h) for h in top])
                depth, order, calls = await self.aids.passage_pairs(len(top), prefer)
                ranked = [top[i] for i in order] + ranked[depth:]
                record_read(top[:depth])  # the passages the pairwise judge was shown
            report = {"pointwise_scored": scored, "pairwise_depth": depth, "pairwise_comparisons": calls}
            s.outputs = {**report, "pointwise_top": pointwise_top, "top": [h.chunk_id for h in ranked[: cfg.m]]}
        return ranked, report

    async def _pointwise(self, question: str, hits: list[Hit]) -> tuple[list[Hit], int]:
        """`hits` ordered by the pointwise scorer; the first `depth` are scored and the
        rest keep their fused order below them. Returns the order and how many were scored."""
        depth, scores = await self.scores(question, hits)
        order = sorted(range(len(depth)), key=lambda i: (-scores[i], i))
        return [depth[i] for i in order] + hits[len(depth) :], len(depth)

    async def _cross_encoder_scores(self, question: str, hits: list[Hit]) -> tuple[list[Hit], list[float]]:
        """The paper's pointwise scorer, over the first `cross_encoder_depth` candidates."""
        depth = hits[: self.config.cross_encoder_depth]
        return depth, (await asyncio.to_thread(self._cross.score, question, [self.config.passage(h) for h in depth])).tolist()

    async def _llm_scores(self, question: str, hits: list[Hit]) -> tuple[list[Hit], list[float]]:
        """The model's 0-3 relevance of each of the first `pointwise_llm_depth` candidates."""
        depth = hits[: self.config.pointwise_llm_depth]
        record_read(depth)
        rated = await asyncio.gather(*(self._call(PointwiseJudge(), PointInput(question=question, passage=self.config.passage(h))) for h in depth))
        return depth, [float(r.score) for r in rated]

    def _prefer(self, judge, input_type, question: str, items: list) -> Prefer:
        """A pairwise judge over `items` (passages or facets' nuggets): True when the
        model prefers the one shown first (A)."""

        async def prefer(a: int, b: int) -> bool:
            pref = await self._call(judge, input_type(question=question, a=items[a], b=items[b]))
            return pref.better == "A"

        return prefer

    # -- 4. nuggets ---------------------------------------------------------------------------
    async def _nuggets(self, question: str, top: list[Hit]) -> list[Nugget]:
        """The nuggets of each top passage, each with its passage id (the paper's: tagged
        spans, `nuggets.tagged_nuggets`)."""
        record_read(top)
        found = await asyncio.gather(*(self.aids.detect(self._call, question, h) for h in top))
        nuggets = [(text, h.chunk_id) for h, texts in zip(top, found) for text in texts]
        if nuggets or not top:
            return nuggets
        return await asyncio.to_thread(self.aids.no_nuggets, self.index, question, top)

    # -- 5. clustering and ranking -----------------------------------------------------------
    def _cluster(self, question: str, nuggets: list[Nugget]) -> list[Facet]:
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

    async def _rank_facets(self, question: str, facets: list[Facet]) -> tuple[list[Facet], int]:
        """The paper's pairwise cluster ranking: every pair of the top facets (by
        similarity, as many as `pairwise_max_calls` allows) asked in both orders, facets
        ordered by their wins; the rest follow by similarity."""
        if self.aids.facet_pairs is None or len(facets) < 2:
            return facets, 0
        with step("facet_ranker", facets=len(facets)) as s:
            prefer = self._prefer(FacetPairwiseJudge(), FacetPairInput, question, [[t for t, _ in f] for f in facets])
            depth, order, calls = await self.aids.facet_pairs(len(facets), prefer)
            ranked = [facets[i] for i in order] + facets[depth:]
            s.outputs = {"depth": depth, "comparisons": calls, "order": order, "clusters": [[t for t, _ in f] for f in ranked]}
        return ranked, calls

    # -- 6. summaries, fluency, the answer -------------------------------------------------------
    async def _write(self, question: str, facets: list[Facet]) -> tuple[str, list[dict[str, Any]]]:
        cfg = self.config
        style = cfg.style()
        concise = self.aids.concise if style.name == "short" else None
        n = max(1, cfg.max_words // cfg.summary_words)
        if concise is None:  # the facets whose sentences can fit the answer's characters too
            n = max(1, min(n, style.max_chars // (cfg.summary_words * _CHARS_PER_WORD)))
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
        if concise is not None:  # the facets' sentences are the evidence for one concise answer
            return await concise(self._call, question, sentences, style), sentences
        fluent = await self._call(FluencyRewriter(len(sentences)), FluencyInput(question=question, sentences=[s["text"] for s in sentences]))
        if len(fluent.sentences) == len(sentences):
            sentences = [{**s, "text": t.strip() or s["text"]} for s, t in zip(sentences, fluent.sentences)]
        sentences = limit_length(sentences, cfg.max_words, style.max_chars)
        return " ".join(s["text"] for s in sentences), sentences

    async def _call(self, agent, inp):
        return await agent(self.llm, inp, self.config.temperature, self.config.seed)


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
