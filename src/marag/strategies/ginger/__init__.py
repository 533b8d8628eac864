"""GINGER (Łajewska et al., UiS-IAI@LiveRAG 2025), registered as `ginger`,
`ginger_no_rewrite` and `ginger_paper`.

Read `strategy` first: the paper's pipeline (rewriting, hybrid retrieval fused by RRF,
point- then pair-wise reranking, nuggets, facets, grounded summaries, a fluency rewrite
within a length limit), with the paper's pairwise ranking in `pairwise` and its tagged
nugget detection in `nuggets`. `aids` holds our small-model aids, one named function or
class each, composed from the config (`aids.Aids.of`; none with `paper=true`): separate
searches, embedding pointwise scores, no pairwise stage (or a bubble pass), nuggets by
sentence number, the nugget fallback, facets ranked by similarity, and a concise answer
for a short answer style. `config` holds the settings."""

from marag.strategies.ginger.aids import Aids, bubble_both_orders
from marag.strategies.ginger.config import PAPER_SETTINGS, GingerConfig
from marag.strategies.ginger.pairwise import Prefer, all_pairs, all_pairs_depth
from marag.strategies.ginger.strategy import Ginger, limit_length

__all__ = ["PAPER_SETTINGS", "Aids", "Ginger", "GingerConfig", "Prefer", "all_pairs", "all_pairs_depth", "bubble_both_orders", "limit_length"]
