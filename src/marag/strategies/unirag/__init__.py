"""Agent-UniRAG (Pham et al. 2025), registered as `unirag`, its ablations
`unirag_no_reflector`, `unirag_no_planning`, `unirag_1search`, and `unirag_paper`.

Read `strategy` first: the paper's ReAct loop (thought, search, evidence reflector,
working memory, final answer), with one question's state in `state`. `aids` holds our
small-model aids, one named function each, composed from the config (`aids.Aids.of`;
none with `paper=true`): the search memory and the refusal of repeated or unrelated
queries, query cleaning, the question searched first, no answer before a search, the
focused reflector and its shorter later documents, the evidence floor, named and linked
documents, and the final answer from the sources. `config` holds the settings, each
aid's with where it was measured. `paper=true` also selects the paper's retrieval, the
top 12 of re-ranked candidates (`PAPER_DEFAULTS`; ours: the top 4 as retrieved)."""

from marag.strategies.unirag.aids import Aids
from marag.strategies.unirag.config import DEFAULT_FLOOR, PAPER_DEFAULTS, PAPER_SETTINGS, UniRAGConfig
from marag.strategies.unirag.state import Run
from marag.strategies.unirag.strategy import UniRAG

__all__ = ["DEFAULT_FLOOR", "PAPER_DEFAULTS", "PAPER_SETTINGS", "Aids", "Run", "UniRAG", "UniRAGConfig"]
