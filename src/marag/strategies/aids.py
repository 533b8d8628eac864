"""How a strategy's small-model aids are composed into its paper's loop (KAIR, UniRAG,
GINGER): each place of the loop holds the paper's behaviour (`paper`: place -> function,
or None where the paper does nothing there) unless a setting that is on puts its aid
there (`aids`: (setting, place, aid) rows; of two rows for one place, the later wins when
both are on). Every function takes the config first; the result binds it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")


def compose(cls: Callable[..., T], cfg: Any, paper: Mapping[str, Callable[..., Any] | None],
            aids: Iterable[tuple[str, str, Callable[..., Any]]], on: Callable[[str], bool]) -> T:  # fmt: skip
    """`cls(place=function bound to cfg, ...)`: the aid of each setting `on` says is on,
    the paper's behaviour elsewhere."""
    chosen = dict(paper)
    chosen.update({place: aid for setting, place, aid in aids if on(setting)})
    return cls(**{place: fn and partial(fn, cfg) for place, fn in chosen.items()})
