"""KAIR (Song, "Knowledge-Aware Iterative Retrieval for Multi-Agent Systems", 2025),
registered as `kair`, `kair_2`, `kair_3`, `kair_collab` and `kair_paper`.

Read `strategy` first: the paper's loop (known/required state, gap-driven queries,
refined context, then a generator), with its steps 3 and 4 in `knowledge` and `context`.
`aids` holds our small-model aids, one named function each, composed from the config
(`aids.Aids.of`; none with `paper=true`); `config` holds the settings."""

from marag.strategies.kair.aids import Aids
from marag.strategies.kair.aids.knowledge import answers, leap_supported, supported
from marag.strategies.kair.aids.search import grounded
from marag.strategies.kair.config import PAPER_SETTINGS, KAIRConfig
from marag.strategies.kair.context import packed
from marag.strategies.kair.knowledge import is_gap
from marag.strategies.kair.strategy import KAIR

__all__ = ["KAIR", "PAPER_SETTINGS", "Aids", "KAIRConfig", "answers", "grounded", "is_gap", "leap_supported", "packed", "supported"]
