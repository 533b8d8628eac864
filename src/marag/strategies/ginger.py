"""GINGER (Łajewska et al., UiS-IAI@LiveRAG): long answers with sentence-level source
attribution, by a pipeline of small steps.

1. Rewriting (`rewrites` = l, default 3; off with `rewriting=false`): a provisional
   answer without documents, then l rewrites each about a different aspect of it; each
   search string is a rewrite followed by the original question.
2. Retrieval: every search string on BM25 and on dense, top `first_stage` (500) each,
   fused by reciprocal rank fusion.
3. Reranking, with the original question: pointwise over the fused list (`pointwise`:
   cosine between the question and the index's stored chunk vectors by default, or the
   LLM's 0-3 relevance over the first `pointwise_llm_depth`, or a user-supplied ONNX
   cross-encoder), then pairwise by LLM preference over the top `k` (20): one bubble
   pass from the bottom up, k-1 comparisons, so the cost is bounded and reported.
4. Nugget detection on the top `m` (10) passages: the model copies each passage with
   <n>...</n> around the relevant spans; a copy that changes the text is rejected and
   asked for again once; spans keep their passage id. When no passage gives a verified
   span (`nugget_fallback`, ours; small models rarely copy a passage exactly), each
   passage's sentence closest to the question stands in, so the answer is not empty.
5. Clustering: nuggets embedded and grouped into facets (`clusterer`: average-linkage
   agglomerative on cosine distance cut at `cluster_threshold` by default, or BERTopic,
   the paper's choice, as an optional extra; `marag.index.facets`); facets ranked by
   the mean similarity of their nuggets to the question.
6. Summaries: one sentence (~`summary_words` words) per top cluster from its nuggets
   only, until `max_words` would be exceeded; then a fluency rewrite that keeps one
   sentence per facet (rejected if it changes the count), trimmed to `max_words`.
Our additions (each off with `paper=true`): `nugget_fallback`, and passages clipped to
`passage_chars` (600) in every prompt (the paper passes whole passages; with
`paper=true` they are clipped only at 3,000 characters, the longest setting). Passages
that fail the tag check are asked for once more, a fluency rewrite that changes the
number of sentences is dropped for the summaries as written: those are the fallbacks
the method needs, not additions.

The answer is the sentences joined; `details["sentences"]` gives each with the ids of
the passages its nuggets came from. Within a question the passages' nugget detections
and the facets' summaries run concurrently; `marag eval` runs questions concurrently,
so the stages of many questions keep the model busy together.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from marag.agents.documents import doc_from_hit
from marag.agents.ginger import (
    DraftInput,
    FacetInput,
    FacetSummarizer,
    FluencyInput,
    FluencyRewriter,
    NuggetDetector,
    PairInput,
    PairwiseJudge,
    PointInput,
    PointwiseJudge,
    ProvisionalAnswer,
    RewriteInput,
    Rewriter,
    TagInput,
    search_strings,
    spans,
)
from marag.errors import MaragError
from marag.index.base import Hit
from marag.index.embed import normalize_rows, similarity_to
from marag.index.facets import check_clusterer, cluster_facets
from marag.index.fusion import rrf
from marag.strategies.base import (
    STRATEGIES,
    AnsweringConfig,
    PaperSwitch,
    Strategy,
    register_variant,
)
from marag.trace import step


# What `paper=true` sets: every addition of ours off (see the module docstring).
PAPER_SETTINGS: dict[str, Any] = {"nugget_fallback": False, "passage_chars": 3000}


class GingerConfig(PaperSwitch, AnsweringConfig):
    paper_settings: ClassVar[dict[str, Any]] = PAPER_SETTINGS
    answer_style: Literal["short", "long"] = "long"
    rewriting: bool = True
    rewrites: int = Field(default=3, ge=1, le=6)
    first_stage: int = Field(default=500, ge=10, le=5000)
    pointwise: Literal["embedding", "llm", "cross_encoder"] = "embedding"
    pointwise_llm_depth: int = Field(default=30, ge=1, le=200)
    cross_encoder: dict[str, str] | None = None  # {"model": path.onnx, "tokenizer": tokenizer.json}
    k: int = Field(default=20, ge=1, le=100)  # pairwise reranking depth
    pairwise: bool = True
    m: int = Field(default=10, ge=1, le=40)  # passages for nugget detection
    passage_chars: int = Field(default=600, ge=100, le=3000)
    clusterer: str = "agglomerative"  # a name in marag.index.facets.FACET_CLUSTERERS ("bertopic": optional extra)
    nugget_fallback: bool = True  # ours: no verified span anywhere -> each passage's closest sentence
    cluster_threshold: float = Field(default=0.5, gt=0.0, le=2.0)  # average-linkage cosine distance cut
    summary_words: int = Field(default=35, ge=5, le=100)
    max_words: int = Field(default=150, ge=10, le=1000)
    temperature: float = 0.0
    seed: int | None = None
    paper: bool = False  # only the paper's behaviour: PAPER_SETTINGS



@STRATEGIES.register("ginger")
class Ginger(Strategy):
    name = "ginger"
    description = "Rewrite, hybrid retrieval + RRF, point/pairwise rerank, nuggets, facets, grounded summaries (Łajewska et al.)."
    Config = GingerConfig

    def __init__(self, llm, retriever=None, config=None):
        super().__init__(llm, retriever, config)
        self.index = getattr(retriever, "index", None)
        if self.index is None or not (self.index.has("bm25") and self.index.has("dense")):
            raise MaragError("ginger needs an index with both BM25 and dense parts", hint="build it with --retrievers bm25,dense")
        check_clusterer(self.config.clusterer)
        self._cross = None
        self._vectors: np.ndarray | None = None
        if self.config.pointwise == "cross_encoder":
            from marag.index.cross_encoder import OnnxCrossEncoder

            spec = self.config.cross_encoder or {}
            if "model" not in spec or "tokenizer" not in spec:
                raise MaragError("pointwise=cross_encoder needs cross_encoder={model, tokenizer}", hint="--set 'cross_encoder={\"model\": \"ce.onnx\", \"tokenizer\": \"tokenizer.json\"}'")
            self._cross = OnnxCrossEncoder(spec["model"], spec["tokenizer"])

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        cfg = self.config
        queries = await self._rewrite(question)
        fused = await self._retrieve(queries)
        ranked = await self._rerank(question, fused)
        top = ranked[: cfg.m]
        nuggets = await self._nuggets(question, top)
        facets = await asyncio.to_thread(self._cluster, question, nuggets)
        sentences = await self._write(question, facets)
        used = {cid for s in sentences for cid in s["passages"]}
        answer = " ".join(s["text"] for s in sentences)
        with step("budget") as s:
            s.outputs = {"search_strings": len(queries), "fused": len(fused), "nuggets": len(nuggets), "facets": len(facets),
                         "sentences": sentences, "words": len(answer.split())}  # fmt: skip
        return answer, [h for h in top if h.chunk_id in used] or top

    # -- 1. rewriting ------------------------------------------------------------------------
    async def _rewrite(self, question: str) -> list[str]:
        cfg = self.config
        if not cfg.rewriting:
            return [question]
        draft = await self._call(ProvisionalAnswer(), DraftInput(question=question))
        rewrites = await self._call(Rewriter(cfg.rewrites), RewriteInput(question=question, draft=draft.answer, n=cfg.rewrites))
        queries = search_strings(question, rewrites.rewrites)
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
    async def _rerank(self, question: str, fused: list[Hit]) -> list[Hit]:
        cfg = self.config
        with step("rerank", pointwise=cfg.pointwise) as s:
            scores = await self._pointwise(question, fused)
            order = sorted(range(len(fused)), key=lambda i: (-scores[i], i))
            ranked = [fused[i] for i in order]
            comparisons = 0
            if cfg.pairwise and len(ranked) > 1:
                top = ranked[: cfg.k]
                for i in range(len(top) - 1, 0, -1):  # one pass bottom-up: k-1 comparisons
                    a, b = top[i - 1], top[i]
                    pref = await self._call(PairwiseJudge(), PairInput(question=question, a=self._text(a), b=self._text(b)))
                    comparisons += 1
                    if pref.better == "B":
                        top[i - 1], top[i] = b, a
                ranked = top + ranked[cfg.k :]
            s.outputs = {"pairwise_comparisons": comparisons, "top": [h.chunk_id for h in ranked[: cfg.m]]}
        return ranked

    async def _pointwise(self, question: str, hits: list[Hit]) -> list[float]:
        cfg = self.config
        if cfg.pointwise == "cross_encoder":
            return (await asyncio.to_thread(self._cross.score, question, [self._text(h) for h in hits])).tolist()
        if cfg.pointwise == "llm":
            depth = hits[: cfg.pointwise_llm_depth]
            rated = await asyncio.gather(*(self._call(PointwiseJudge(), PointInput(question=question, passage=self._text(h))) for h in depth))
            # unrated passages keep their fused order below the rated ones
            return [r.score + 10.0 for r in rated] + [-float(i) for i in range(len(hits) - len(depth))]
        dense = self.index.retriever("dense")
        if self._vectors is None:  # the index's own chunk vectors: nothing is embedded again
            self._vectors = await asyncio.to_thread(dense.chunk_vectors)
        rows = self._vectors[[self.index.position(h.chunk_id) for h in hits]]
        return similarity_to(dense.embedder, question, rows).tolist()

    # -- 4. nuggets ---------------------------------------------------------------------------
    async def _nuggets(self, question: str, top: list[Hit]) -> list[tuple[str, str]]:
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
                sentences = [x for x in _SENTENCE.split(self._text(h)) if len(x.split()) >= 4] or [self._text(h)]
                scores = similarity_to(embedder, question, embedder.embed(sentences))
                picked.append((sentences[int(np.argmax(scores))].strip(), h.chunk_id))  # ties: the earlier sentence
            s.outputs = {"nuggets": [t for t, _ in picked]}
        return picked

    async def _detect(self, question: str, hit: Hit) -> list[str]:
        passage = self._text(hit)
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
        with step("clusterer", nuggets=len(nuggets)) as s:
            if not nuggets:
                s.outputs = {"clusters": []}
                return []
            embedder = self.index.retriever("dense").embedder
            vecs = normalize_rows(embedder.embed([t for t, _ in nuggets]))
            labels = cluster_facets(self.config.clusterer, vecs, [t for t, _ in nuggets], self.config.cluster_threshold, self.config.seed or 0)
            sims = similarity_to(embedder, question, vecs)
            groups: dict[int, list[int]] = {}
            for i, lab in enumerate(labels.tolist()):
                groups.setdefault(lab, []).append(i)
            ranked = sorted(groups.values(), key=lambda g: (-float(np.mean(sims[g])), g[0]))
            clusters = [[nuggets[i] for i in g] for g in ranked]
            s.outputs = {"clusters": [[t for t, _ in c] for c in clusters], "relevance": [round(float(np.mean(sims[g])), 4) for g in ranked]}
        return clusters

    # -- 6. summaries and fluency ---------------------------------------------------------------
    async def _write(self, question: str, facets: list[list[tuple[str, str]]]) -> list[dict[str, Any]]:
        cfg = self.config
        n = max(1, cfg.max_words // cfg.summary_words)  # facets whose sentences can fit
        chosen = facets[:n]
        written = await asyncio.gather(
            *(self._call(FacetSummarizer(), FacetInput(question=question, nuggets=[t for t, _ in f], words=cfg.summary_words)) for f in chosen)
        )
        sentences = [
            {"text": w.sentence.strip(), "passages": list(dict.fromkeys(cid for _, cid in f))}
            for w, f in zip(written, chosen)
            if w.sentence.strip()
        ]
        if sentences:
            fluent = await self._call(FluencyRewriter(len(sentences)), FluencyInput(question=question, sentences=[s["text"] for s in sentences]))
            if len(fluent.sentences) == len(sentences):
                sentences = [{**s, "text": t.strip() or s["text"]} for s, t in zip(sentences, fluent.sentences)]
        return limit_words(sentences, cfg.max_words)

    def _text(self, hit: Hit) -> str:
        return doc_from_hit(hit, self.config.passage_chars).text

    async def _call(self, agent, inp):
        return await agent(self.llm, inp, self.config.temperature, self.config.seed)


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def limit_words(sentences: list[dict[str, Any]], max_words: int) -> list[dict[str, Any]]:
    """Whole sentences while they fit in `max_words`; a first sentence longer than the
    limit is cut at it."""
    out, used = [], 0
    for s in sentences:
        words = s["text"].split()
        if used + len(words) > max_words:
            if not out:
                out.append({**s, "text": " ".join(words[:max_words])})
            break
        out.append(s)
        used += len(words)
    return out


register_variant(Ginger, "ginger_no_rewrite", "GINGER without query rewriting.", rewriting=False)
register_variant(Ginger, "ginger_paper", "GINGER with only the paper's behaviour (no nugget fallback, whole passages).", paper=True)
