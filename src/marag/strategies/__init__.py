"""Strategies: one module per method, registered by name."""

from marag.strategies import auto as _auto  # noqa: F401
from marag.strategies import baselines as _baselines  # noqa: F401  (registers built-ins)
from marag.strategies import ginger as _ginger  # noqa: F401
from marag.strategies import ircot as _ircot  # noqa: F401
from marag.strategies import kair as _kair  # noqa: F401
from marag.strategies import mrag as _mrag  # noqa: F401
from marag.strategies import ropmura as _ropmura  # noqa: F401
from marag.strategies import unirag as _unirag  # noqa: F401
from marag.strategies.base import (
    STRATEGIES,
    Answer,
    Source,
    Strategy,
    StrategyConfig,
    make_strategy,
    run_many,
)

__all__ = ["STRATEGIES", "Answer", "Source", "Strategy", "StrategyConfig", "make_strategy", "run_many"]
