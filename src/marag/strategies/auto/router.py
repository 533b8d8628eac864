"""A router file: the learned rule that tells `auto` whether its first pass is right.

A router is a logistic regression over the first pass's signals (`signals.SIGNALS`),
fitted by `marag train router` (scikit-learn) on runs already made, and stored as a
small JSON file: the features in order, their training means and scales, the weights
and intercept, what it was trained on and how well it separates. Nothing in the file is
executed or unpickled: applying it is a dot product, here, in numpy.

    p(right) = sigmoid(intercept + sum_i weight_i * (x_i - mean_i) / scale_i)

A signal missing at run time (NaN: e.g. a backend without log-probabilities) takes its
training mean, so it adds nothing either way.

The knob: `auto.escalate` is the share of questions sent on to the agent, as measured
on the router's own training questions. The file keeps the quantiles of its
training scores, so a share becomes a score threshold (`threshold`): 0 sends none,
1 sends every question, and more share never sends fewer questions (monotone in cost).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from marag.errors import MaragError
from marag.strategies.auto.signals import SIGNALS

ROUTER_FORMAT = "marag-router/1"
DEFAULT_ROUTER = Path(__file__).resolve().parents[2] / "resources" / "routers" / "auto-qwen2.5-1.5b.json"
MAX_ROUTER_BYTES = 1_000_000  # a router is a few kilobytes; anything far larger is not one


class RouterFile(BaseModel):
    """The JSON a router is stored as (`format` names this layout)."""

    model_config = ConfigDict(extra="forbid")

    format: str
    kind: str = "logistic"
    features: list[str] = Field(min_length=1)
    mean: list[float]
    scale: list[float]
    weights: list[float]
    intercept: float
    # the training scores' quantiles at 0, 1, ..., 100 percent: the knob's scale
    quantiles: list[float] = Field(min_length=2)
    escalate_default: float = Field(ge=0.0, le=1.0)
    label: str = ""  # what "right" meant when it was trained
    first: str = "vanilla_rag_k5"  # the first pass it judges
    agent: str = ""  # the agent whose results chose the default share, if any
    model: str = ""  # the reader whose log-probabilities it was trained on
    trained_on: list[dict[str, Any]] = Field(default_factory=list)  # runs: name, dataset, questions
    auroc: dict[str, float] = Field(default_factory=dict)  # "cross_validated", "train", per signal ...
    created: str = ""

    @field_validator("format")
    @classmethod
    def _format(cls, v: str) -> str:
        if v != ROUTER_FORMAT:
            raise ValueError(f"format {v!r} is not {ROUTER_FORMAT!r}")
        return v

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if v != "logistic":
            raise ValueError(f"kind {v!r} is not 'logistic', the only kind this version applies")
        return v

    @model_validator(mode="after")
    def _shapes(self) -> "RouterFile":
        n = len(self.features)
        for name in ("mean", "scale", "weights"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} values for {n} features")
        numbers = [*self.mean, *self.scale, *self.weights, self.intercept, *self.quantiles]
        if not all(math.isfinite(x) for x in numbers):
            raise ValueError("a weight, mean, scale or quantile is not a finite number")
        if any(s <= 0 for s in self.scale):
            raise ValueError("every scale must be positive")
        if any(b < a for a, b in zip(self.quantiles, self.quantiles[1:])):
            raise ValueError("quantiles must not decrease")
        if len(set(self.features)) != n:
            raise ValueError("a feature is named twice")
        unknown = sorted(set(self.features) - set(SIGNALS))  # a misspelt signal would always sit at its mean
        if unknown:
            raise ValueError(f"unknown signal(s) {', '.join(unknown)}; this version computes {', '.join(SIGNALS)}")
        return self


class Router:
    """A loaded router: `score(signals)` is p(the first pass is right)."""

    def __init__(self, spec: RouterFile, source: str = ""):
        self.spec, self.source = spec, source
        self._mean = np.asarray(spec.mean)
        self._scale = np.asarray(spec.scale)
        self._weights = np.asarray(spec.weights)

    @classmethod
    def load(cls, path: str | Path | None = None) -> "Router":
        """The router at `path` (None: the one marag ships). A file that is missing,
        too large, not JSON or not a router is a one-line `MaragError` saying so."""
        p = Path(path).expanduser() if path else DEFAULT_ROUTER
        hint = "give a file written by `marag train router RUN_DIR... --out FILE`"
        if not p.is_file():
            raise MaragError(f"router file not found: {p}", hint=hint)
        try:
            with p.open("rb") as f:
                raw = f.read(MAX_ROUTER_BYTES + 1)  # (bounded: a size from stat can lie, a device's is 0)
        except OSError as exc:
            raise MaragError(f"cannot read the router file {p}: {exc.strerror}", hint=hint) from None
        if len(raw) > MAX_ROUTER_BYTES:
            raise MaragError(f"{p} is over {MAX_ROUTER_BYTES:,} bytes, too large for a router file", hint=hint)
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise MaragError(f"{p} is not a JSON router file: {str(exc).splitlines()[0]}", hint=hint) from None
        try:
            return cls(RouterFile.model_validate(data), str(p))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err.get("loc", ())) or "the file"
            raise MaragError(f"{p} is not a valid router: {where}: {err.get('msg', '').removeprefix('Value error, ')}", hint=hint) from None

    @property
    def features(self) -> list[str]:
        return self.spec.features

    def vector(self, signals: dict[str, float]) -> np.ndarray:
        """The signals in the router's order, standardized, missing ones at 0 (the mean)."""
        x = np.asarray([float(signals.get(f, math.nan)) for f in self.features], dtype=float)
        z = (x - self._mean) / self._scale
        return np.where(np.isfinite(z), z, 0.0)

    def score(self, signals: dict[str, float]) -> float:
        """p(the first pass is right), from 0 to 1."""
        logit = float(self.spec.intercept + self._weights @ self.vector(signals))
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, logit))))

    def threshold(self, escalate: float) -> float:
        """The score below which a question is sent on, for a share `escalate` of the
        training questions sent on: 0 -> nothing is below it, 1 -> everything is."""
        if escalate <= 0:
            return -math.inf
        if escalate >= 1:
            return math.inf
        q = np.asarray(self.spec.quantiles)
        return float(np.interp(escalate, np.linspace(0.0, 1.0, len(q)), q))

    def contributions(self, signals: dict[str, float]) -> dict[str, float]:
        """Each signal's part of the logit (weight x standardized value), largest first:
        why the router decided as it did, for the trace."""
        parts = self._weights * self.vector(signals)
        order = sorted(range(len(parts)), key=lambda i: (-abs(parts[i]), self.features[i]))
        return {self.features[i]: round(float(parts[i]), 4) for i in order}
