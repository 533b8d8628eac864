"""`marag train router`: fit `auto`'s router on runs already made (Adaptive-RAG's
labels, collected from which path answered right).

Every answer of the first pass's strategy (`vanilla_rag_k5`) in the given run
directories is one example: its signals, read back from its trace
(`strategies.auto.signals.from_trace`), and its label, whether that answer was right
(its `f1` at least 0.5 by default). A logistic regression (scikit-learn) on the
standardized signals that separate on their own (single-signal AUROC at least
`min_auroc`, either direction), at the regularization strength that separates best out
of fold (L2 or L1), is the router; its AUROC is cross-validated (5 folds),
and the same out-of-fold scores give the knob's scale (their quantiles) and, where the
runs also hold the agent's answers to the same questions, the quality-cost curve whose
knee is the default share sent on. The result is a `RouterFile`: JSON, no pickle.

The AUROC it reports is a selection score, a little optimistic: the signals were chosen
on all the examples and the regularization is the best of eight tried on the same
folds. A router's AUROC on other runs is what `--check` (`check`) measures. The knob's
scale (the quantiles) is the out-of-fold scores', the nearest thing here to scores of
questions the router never saw.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from marag.errors import MaragError
from marag.eval.quality_cost import RATES, Outcome, Point, Rates, chart, knee, knob_curve, oracle
from marag.eval.report import Run
from marag.strategies.auto.router import ROUTER_FORMAT, Router, RouterFile
from marag.strategies.auto.signals import SIGNALS, first_pass_signals, from_trace


def key_of(run: str, qid: str) -> str:
    """One question of one run (question ids repeat across runs of a set)."""
    return f"{run}@{qid}"


@dataclass
class Example:
    """One first-pass answer: its signals, whether it was right, and what the first
    pass and (where the run has it) the agent scored and cost on its question."""

    run: str
    qid: str
    signals: dict[str, float]
    right: bool
    first: Outcome
    agent: Outcome | None = None

    @property
    def key(self) -> str:
        return key_of(self.run, self.qid)


@dataclass
class Fitted:
    router: RouterFile
    signal_auroc: dict[str, float]  # each signal alone (oriented: at least .5)
    curve: list[Point] = field(default_factory=list)
    oracle: Point | None = None
    knee: Point | None = None


def examples(run_dirs: Iterable[Path], first: str = "vanilla_rag_k5", agent: str | None = "unirag", metric: str = "f1",
             right_at: float = 0.5, rates: Rates = RATES) -> tuple[list[Example], list[dict]]:  # fmt: skip
    """The first pass's answered questions in the runs, each question once (with the
    agent's outcome where any of the runs has one), and a summary of each run for the
    router file."""
    out: list[Example] = []
    runs: list[dict] = []
    loaded = [Run(Path(path)) for path in run_dirs]
    # The agent's answer to a question may sit in another run of the same set (a first
    # pass run once, the agent tried in a later run): the last run given that has one wins.
    agents = {(run.config.get("dataset", ""), r.qid): r for run in loaded for r in run.results
              if r.strategy == agent and r.error is None and metric in r.metrics}  # fmt: skip
    seen_questions: set[tuple[str, str]] = set()
    for run in loaded:
        dataset = run.config.get("dataset", "")
        records = {r.trace_id: r for r in run.results if r.strategy == first and r.error is None and r.trace_id}
        n, model = 0, ""
        for trace in run.traces():
            rec = records.get(trace.id)
            seen = from_trace(trace) if rec is not None and metric in rec.metrics else None
            # a question answered by the first pass in two runs counts once (the first run
            # given): twice would put the same question on both sides of a fold
            if rec is None or seen is None or (dataset, rec.qid) in seen_questions:
                continue
            seen_questions.add((dataset, rec.qid))
            # the reader as its calls name it (the model file), which `auto` compares with its own
            model = model or next((c.model for c in trace.llm_calls()), "")
            quality = rec.metrics[metric]
            a = agents.get((dataset, rec.qid))
            out.append(Example(run.name, rec.qid, first_pass_signals(seen), quality >= right_at,
                               Outcome(quality, rates.seconds(rec.cost)),
                               Outcome(a.metrics[metric], rates.seconds(a.cost)) if a else None))  # fmt: skip
            n += 1
        runs.append({"run": run.name, "dataset": dataset, "questions": n,
                     "skip": run.config.get("skip", 0), "model": model})  # fmt: skip
    return out, runs


def _sklearn():
    try:
        from sklearn.linear_model import LogisticRegression
        from sklearn.metrics import roc_auc_score
        from sklearn.model_selection import StratifiedKFold, cross_val_predict
    except ImportError:
        raise MaragError("training a router needs scikit-learn", hint="pip install 'marag[router]' (or scikit-learn)") from None
    return LogisticRegression, roc_auc_score, StratifiedKFold, cross_val_predict


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve of `scores` for `labels` (nan when one class is absent)."""
    _, roc_auc_score, _, _ = _sklearn()
    if len(set(labels)) < 2:
        return math.nan
    return float(roc_auc_score(np.asarray(labels, dtype=int), np.asarray(scores, dtype=float)))


def _matrix(exs: list[Example], names: Sequence[str]) -> np.ndarray:
    return np.asarray([[ex.signals.get(n, math.nan) for n in names] for ex in exs], dtype=float)


def signal_aurocs(exs: list[Example]) -> dict[str, float]:
    """Each signal's AUROC alone for "the first pass is right", oriented (a signal that
    is lower when right counts by 1 - AUROC), missing values at the signal's mean; nan
    for a signal never measured."""
    labels = [ex.right for ex in exs]
    out = {}
    for j, name in enumerate(SIGNALS):
        col = _matrix(exs, [name])[:, 0]
        if not np.isfinite(col).any():
            out[name] = math.nan
            continue
        col = np.where(np.isfinite(col), col, np.nanmean(col))
        a = auroc(col, labels)
        out[name] = max(a, 1 - a) if math.isfinite(a) else math.nan
    return out


def fit(exs: list[Example], runs: list[dict], *, features: Sequence[str] | None = None, min_auroc: float = 0.55,
        cs: Sequence[float] = (0.03, 0.1, 0.3, 1.0),
        folds: int = 5, escalate: float | None = None, label: str = "f1 >= 0.5", first: str = "vanilla_rag_k5",
        agent: str | None = "unirag", seed: int = 0) -> Fitted:  # fmt: skip
    """The router for these examples (see the module docstring). `features`: use these
    signals (default: those that separate alone); `escalate`: the default share sent on
    (default: the knee of the curve the agent's outcomes give)."""
    LogisticRegression, _, StratifiedKFold, cross_val_predict = _sklearn()
    labels = np.asarray([ex.right for ex in exs], dtype=int)
    if len(exs) < 20 or min(labels.sum(), len(labels) - labels.sum()) < 5:
        raise MaragError(f"{len(exs)} examples, {int(labels.sum())} of them right: too few to fit a router",
                         hint="give runs with more first-pass answers (at least 20, 5 right and 5 wrong)")  # fmt: skip
    single = signal_aurocs(exs)
    unknown = sorted(set(features or ()) - set(SIGNALS))
    if unknown:
        raise MaragError(f"unknown signal(s) {', '.join(unknown)}", hint=f"choose among {', '.join(SIGNALS)}")
    names = list(features) if features else [n for n in SIGNALS if math.isfinite(single[n]) and single[n] >= min_auroc]
    x = _matrix(exs, names)
    mean = np.nanmean(x, axis=0)
    keep = [j for j in range(len(names)) if np.isfinite(mean[j])]
    names, x, mean = [names[j] for j in keep], x[:, keep], mean[keep]
    if not names:
        raise MaragError("no signal separates right from wrong answers in these runs", hint="lower --min-auroc or give more runs")
    x = np.where(np.isfinite(x), x, mean)
    scale = x.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    z = (x - mean) / scale
    k = int(min(folds, labels.sum(), len(labels) - labels.sum()))
    folds_ = StratifiedKFold(k, shuffle=True, random_state=seed)
    # the regularization that separates best out of fold, among L2 (all signals, shrunk)
    # and L1 (only those that add something) at the strengths `cs`: a few hundred
    # examples and a dozen correlated signals overfit at the default strength
    def model_for(penalty: str, strength: float):
        return LogisticRegression(l1_ratio=1.0 if penalty == "l1" else 0.0, C=strength, solver="liblinear", max_iter=5000)

    best = None
    for penalty in ("l2", "l1"):
        for strength in cs:
            scores_c = cross_val_predict(model_for(penalty, strength), z, labels, cv=folds_, method="predict_proba")[:, 1]
            a = auroc(scores_c, labels.astype(bool).tolist())
            if best is None or a > best[0] + 1e-9:
                best = (a, penalty, strength, scores_c)
    _, penalty, c, cv_scores = best
    model = model_for(penalty, c)
    model.fit(z, labels)
    train_scores = model.predict_proba(z)[:, 1]
    scores = {ex.key: s for ex, s in zip(exs, cv_scores)}
    fitted = Fitted(router=None, signal_auroc=single)  # type: ignore[arg-type]
    with_agent = [ex for ex in exs if ex.agent is not None]
    if with_agent:
        firsts = {ex.key: ex.first for ex in with_agent}
        agents = {ex.key: ex.agent for ex in with_agent if ex.agent is not None}
        fitted.curve = knob_curve(firsts, agents, scores)
        fitted.oracle = oracle(firsts, agents)
        fitted.knee = knee(fitted.curve)
    if escalate is None:
        if fitted.knee is None:
            raise MaragError("the runs hold no answers of the agent to choose the default share by",
                             hint=f"add runs with {agent} on the same questions, or give --escalate SHARE")  # fmt: skip
        escalate = _share_below(cv_scores, fitted.knee, sorted(scores[ex.key] for ex in with_agent))
    fitted.router = RouterFile(
        format=ROUTER_FORMAT, features=names, mean=mean.tolist(), scale=scale.tolist(), weights=model.coef_[0].tolist(),
        intercept=float(model.intercept_[0]), quantiles=np.quantile(cv_scores, np.linspace(0, 1, 101)).tolist(),
        escalate_default=round(float(escalate), 4), label=label, first=first, agent=agent or "",
        model=next((r["model"] for r in runs if r.get("model")), ""), trained_on=runs,
        auroc={"cross_validated": round(auroc(cv_scores, labels.astype(bool).tolist()), 4),
               "train": round(auroc(train_scores, labels.astype(bool).tolist()), 4),
               "examples": float(len(exs)), "right": float(labels.sum()), "C": float(c), "l1": float(penalty == "l1")},
        created=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )  # fmt: skip
    return fitted


def _share_below(all_scores: np.ndarray, point: Point, agent_scores: list[float]) -> float:
    """The knee as a share of *every* training question: the knee sends the m
    lowest-scored questions that have the agent's answer on, so its threshold lies
    between the m-th and the (m+1)-th of their scores; the share of all training scores
    below it is the knob's value (the questions without the agent's answer, NQ's say,
    count in the knob's scale too)."""
    m = round(point.escalated * len(agent_scores))
    if m <= 0:
        return 0.0
    if m >= len(agent_scores):
        return 1.0
    threshold = (agent_scores[m - 1] + agent_scores[m]) / 2
    return float(np.mean(all_scores < threshold))


def check(router: Router, exs: list[Example]) -> dict[str, float]:
    """How a router separates right from wrong first passes on other runs: its AUROC,
    and the best single signal's."""
    labels = [ex.right for ex in exs]
    single = signal_aurocs(exs)
    best = max((v, k) for k, v in single.items() if math.isfinite(v)) if any(math.isfinite(v) for v in single.values()) else (math.nan, "")
    return {"router": auroc([router.score(ex.signals) for ex in exs], labels), "best_signal": best[0], "best_signal_name": best[1],  # type: ignore[dict-item]
            "examples": float(len(exs)), "right": float(sum(labels))}  # fmt: skip


def draw(fitted: Fitted, path: Path, metric: str = "f1") -> bool:
    """The fit's quality-cost chart: the first pass alone, the agent for every question,
    auto at the knee and the knob's whole curve (out-of-fold scores, so the router never
    scores a question it was fitted on) and the oracle router. False when matplotlib is
    missing."""
    if not fitted.curve or fitted.knee is None:
        raise MaragError("no quality-cost chart without the agent's answers in the runs",
                         hint=f"add runs with {fitted.router.agent or 'the agent'} on the same questions")  # fmt: skip
    r, base, full = fitted.router, fitted.curve[0], fitted.curve[-1]
    points = [replace(base, name=r.first), replace(full, name=r.agent or "agent"), replace(fitted.knee, name="auto at the knee")]
    return chart(points, path, metric, curve=fitted.curve, oracle_point=fitted.oracle,
                 title=f"{metric} against cost on the router's training questions (n={base.n}, out-of-fold)")  # fmt: skip


def report(fitted: Fitted) -> str:
    """The fit as text: each signal's AUROC, the router's, and the knob's curve."""
    r = fitted.router
    lines = [f"{int(r.auroc['examples'])} first-pass answers ({int(r.auroc['right'])} right: {r.label}) from "
             + ", ".join(f"{t['run']} ({t['questions']})" for t in r.trained_on), "",
             "signal            AUROC alone   used   weight"]  # fmt: skip
    weights = dict(zip(r.features, r.weights))
    for name, a in sorted(fitted.signal_auroc.items(), key=lambda kv: -(kv[1] if math.isfinite(kv[1]) else 0)):
        w = weights.get(name)
        lines.append(f"{name:<17} {a:>11.3f}   {'yes' if w is not None else '   '}   {'' if w is None else f'{w:+.3f}'}")
    lines += ["", f"router AUROC: {r.auroc['cross_validated']:.3f} cross-validated ({r.auroc['train']:.3f} on its training answers)"]
    if fitted.curve:
        base, full = fitted.curve[0], fitted.curve[-1]
        lines += ["", f"quality-cost ({len(fitted.curve) - 1} questions with the agent's answer too; out-of-fold scores):",
                  f"  first pass only   {base.quality:.3f} at {base.seconds:.1f} s/q",
                  f"  agent after all   {full.quality:.3f} at {full.seconds:.1f} s/q"]  # fmt: skip
        if fitted.oracle:
            lines.append(f"  oracle router     {fitted.oracle.quality:.3f} at {fitted.oracle.seconds:.1f} s/q ({fitted.oracle.escalated:.0%} sent on)")
        for share in (0.1, 0.2, 0.3, 0.4, 0.5):
            p = min(fitted.curve, key=lambda p: abs(p.escalated - share))
            lines.append(f"  send {p.escalated:>4.0%} on      {p.quality:.3f} at {p.seconds:.1f} s/q")
        if fitted.knee:
            lines.append(f"  knee: {fitted.knee.escalated:.0%} sent on, {fitted.knee.quality:.3f} at {fitted.knee.seconds:.1f} s/q")
    lines.append(f"default escalate: {r.escalate_default:.2f}")
    return "\n".join(lines)


__all__ = ["Example", "Fitted", "auroc", "check", "draw", "examples", "fit", "key_of", "report", "signal_aurocs"]
