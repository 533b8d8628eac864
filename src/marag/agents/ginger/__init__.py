"""The roles of GINGER (Łajewska et al., UiS-IAI@LiveRAG): query rewriting, pointwise and
pairwise reranking judges, nugget detection with verified tags, per-facet summaries and
a fluency rewrite. Prompts are ours."""

from marag.agents.ginger.nuggets import NuggetDetector, TagInput, Tagged, spans
from marag.agents.ginger.rerank import PairInput, PairwiseJudge, PointInput, PointwiseJudge, Preference, Relevance
from marag.agents.ginger.rewriter import Draft, DraftInput, ProvisionalAnswer, Rewriter, RewriteInput, Rewrites, search_strings
from marag.agents.ginger.writer import FacetInput, FacetSentence, FacetSummarizer, Fluent, FluencyInput, FluencyRewriter

__all__ = [
    "Draft",
    "DraftInput",
    "FacetInput",
    "FacetSentence",
    "FacetSummarizer",
    "Fluent",
    "FluencyInput",
    "FluencyRewriter",
    "NuggetDetector",
    "PairInput",
    "PairwiseJudge",
    "PointInput",
    "PointwiseJudge",
    "Preference",
    "Relevance",
    "RewriteInput",
    "Rewriter",
    "Rewrites",
    "ProvisionalAnswer",
    "TagInput",
    "Tagged",
    "search_strings",
    "spans",
]
