"""Means with bootstrap confidence intervals (seeded: the same run gives the same report)."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np


def mean_ci(values: list[float], n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high) of a percentile bootstrap interval; a single value has a zero-width one."""
    if not values:
        return float("nan"), float("nan"), float("nan")
    x = np.asarray(values, dtype=float)
    m = float(x.mean())
    if len(x) < 2:
        return m, m, m
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    alpha = (1 - level) / 2
    return m, float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def paired_diff_ci(
    a: list[float], b: list[float], n_boot: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """(mean of a - b, low, high): a percentile bootstrap over paired questions (each
    resample draws whole questions, keeping a[i] with b[i]), so the interval reflects
    the difference itself rather than two strategies' separate spreads."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} vs {len(b)}")
    return mean_ci([x - y for x, y in zip(a, b)], n_boot=n_boot, level=level, seed=seed)


def questions_needed(a: list[float], b: list[float], level: float = 0.95) -> int | None:
    """About how many paired questions a difference of this mean and spread needs before
    its interval excludes 0 (normal approximation: n = (z * sd / mean)^2), so that a
    report at n=20 can say whether "not significant" means "no difference" or "too few
    questions". None when there is no difference (a mean of 0, up to rounding: no size
    helps) or fewer than 2 questions; 2 when every question differs by the same amount."""
    d = np.asarray([x - y for x, y in zip(a, b, strict=True)], dtype=float)
    if len(d) < 2:
        return None
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if abs(mean) < 1e-9:
        return None
    z = NormalDist().inv_cdf(1 - (1 - level) / 2)
    return max(2, math.ceil((z * sd / abs(mean)) ** 2))
