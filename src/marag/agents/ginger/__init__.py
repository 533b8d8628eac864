"""The roles of GINGER (Łajewska et al., UiS-IAI@LiveRAG): query rewriting, pointwise and
pairwise reranking judges (passages and facets), nugget detection with verified tags,
per-facet summaries, a fluency rewrite, and (ours) a concise answer for short answer
styles. Prompts are ours."""

from marag.agents.ginger.nuggets import NuggetDetector, NuggetPicker, Picked, PickInput, Tagged, TagInput, picked, spans
from marag.agents.ginger.rerank import (
    FacetPairInput,
    FacetPairwiseJudge,
    PairInput,
    PairwiseJudge,
    PointInput,
    PointwiseJudge,
    Preference,
    Relevance,
)
from marag.agents.ginger.rewriter import (
    Draft,
    DraftInput,
    ProvisionalAnswer,
    RewriteInput,
    Rewriter,
    Rewrites,
    concatenated_query,
    search_strings,
)
from marag.agents.ginger.writer import (
    ConciseAnswerer,
    ConciseInput,
    FacetInput,
    FacetSentence,
    FacetSummarizer,
    FluencyInput,
    FluencyRewriter,
    Fluent,
)

__all__ = [
    "ConciseAnswerer",
    "ConciseInput",
    "Draft",
    "DraftInput",
    "FacetInput",
    "FacetPairInput",
    "FacetPairwiseJudge",
    "FacetSentence",
    "FacetSummarizer",
    "FluencyInput",
    "FluencyRewriter",
    "Fluent",
    "NuggetDetector",
    "NuggetPicker",
    "PickInput",
    "Picked",
    "PairInput",
    "PairwiseJudge",
    "PointInput",
    "PointwiseJudge",
    "Preference",
    "ProvisionalAnswer",
    "Relevance",
    "RewriteInput",
    "Rewriter",
    "Rewrites",
    "TagInput",
    "Tagged",
    "concatenated_query",
    "picked",
    "search_strings",
    "spans",
]
