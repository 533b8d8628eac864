"""Quality against cost: what a user chooses a strategy by.

Cost is **seconds of the machine a question**: the prompt tokens a model evaluated
(not those a server reused from its cache) at `Rates.prompt_per_s`, plus the tokens it
generated at `Rates.generated_per_s`. The defaults are the rates measured here for the
default model (Qwen2.5-Coder-1.5B Q4_K_M, llama.cpp, 2 CPU cores, 4 questions in
flight: ~60 evaluated and ~13 generated tokens a second); on another machine or model,
measure yours (`benchmarks/llm.py`) and pass them. Wall-clock seconds of a run depend
on what else ran beside each question; these do not.

`auto` records, per question, the router's score for its first pass. With the first
pass's strategy (`vanilla_rag_k5`) and the agent's in the same run, the quality and
cost of every setting of its knob follow without a model call (`knob_curve`: send the
m lowest-scored questions to the agent, m = 0..n), as does the oracle router's point
(`oracle`: send exactly the questions where the agent's answer scores higher).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from marag.eval.stats import mean_ci


@dataclass(frozen=True)
class Rates:
    prompt_per_s: float = 60.0  # evaluated prompt tokens a second
    generated_per_s: float = 13.0  # generated tokens a second

    def seconds(self, cost: Mapping[str, float]) -> float:
        """One answer's machine seconds from its usage (`ResultRecord.cost`)."""
        evaluated = cost.get("prompt_tokens_evaluated")
        if evaluated is None:
            evaluated = cost.get("prompt_tokens", 0.0) - cost.get("prompt_tokens_reused", 0.0)
        return evaluated / self.prompt_per_s + cost.get("completion_tokens", 0.0) / self.generated_per_s

    def label(self) -> str:
        return f"{self.prompt_per_s:g} evaluated prompt + {self.generated_per_s:g} generated tokens/s"


RATES = Rates()


@dataclass(frozen=True)
class Point:
    """One strategy (or one setting of auto's knob) on the quality-cost plane."""

    name: str
    quality: float
    low: float
    high: float
    seconds: float
    n: int
    escalated: float = 0.0  # share of questions sent on (auto, the oracle)


@dataclass(frozen=True)
class Outcome:
    """One question's result on one path: its quality and its machine seconds."""

    quality: float
    seconds: float


def point(name: str, outcomes: list[Outcome], escalated: float = 0.0) -> Point:
    m, lo, hi = mean_ci([o.quality for o in outcomes])
    secs = sum(o.seconds for o in outcomes) / max(1, len(outcomes))
    return Point(name, m, lo, hi, secs, len(outcomes), escalated)


def _combined(first: Mapping[str, Outcome], agent: Mapping[str, Outcome], sent: set[str]) -> list[Outcome]:
    """Each question answered by the first pass, or (sent on) by the agent after it:
    the agent's quality, the seconds of both."""
    return [Outcome(agent[q].quality, first[q].seconds + agent[q].seconds) if q in sent else first[q] for q in sorted(first)]


def knob_curve(first: Mapping[str, Outcome], agent: Mapping[str, Outcome], scores: Mapping[str, float]) -> list[Point]:
    """Auto's points for sending the m lowest-scored questions on, m = 0..n, over the
    questions all three mappings hold (ties in score broken by question id)."""
    qids = sorted(set(first) & set(agent) & set(scores))
    first = {q: first[q] for q in qids}
    order = sorted(qids, key=lambda q: (scores[q], q))
    return [point(f"escalate {m}/{len(qids)}", _combined(first, agent, set(order[:m])), m / max(1, len(qids))) for m in range(len(qids) + 1)]


def oracle(first: Mapping[str, Outcome], agent: Mapping[str, Outcome], name: str = "oracle router") -> Point:
    """The perfect router: a question goes on exactly when the agent's answer scores
    higher than the first pass's (Adaptive-RAG's oracle row)."""
    qids = sorted(set(first) & set(agent))
    sent = {q for q in qids if agent[q].quality > first[q].quality}
    return point(name, _combined({q: first[q] for q in qids}, agent, sent), len(sent) / max(1, len(qids)))


def knee(curve: list[Point]) -> Point:
    """The curve's knee: the point where the quality gained (as a share of the best
    gain any point makes) most exceeds the cost added (as a share of what sending all
    adds), Kneedle's difference curve; fewer sent on among equals. Sending none when no
    point gains quality over it."""
    if not curve:
        raise ValueError("an empty curve has no knee")
    base, full = curve[0], curve[-1]
    gain = max(p.quality for p in curve) - base.quality
    span = full.seconds - base.seconds
    if gain <= 0 or span <= 0:
        return base
    return max(curve, key=lambda p: ((p.quality - base.quality) / gain - (p.seconds - base.seconds) / span, -p.escalated))


# -- a run's points and chart ---------------------------------------------------------


def outcomes(records: list, metric: str, rates: Rates = RATES) -> dict[str, Outcome]:
    """Question id -> outcome for one strategy's records (`ResultRecord`s): a failed
    question scores 0 and costs what it spent; an answer without the metric (not
    scored by it) is left out, as router training leaves it out."""
    return {r.qid: Outcome(r.metrics[metric] if r.error is None else 0.0, rates.seconds(r.cost))
            for r in records if r.error is not None or metric in r.metrics}  # fmt: skip


def auto_curve(groups: Mapping[str, list], metric: str, first: str, agent: str, auto: str = "auto",
               rates: Rates = RATES) -> tuple[list[Point], Point] | None:  # fmt: skip
    """Auto's curve over its knob and the oracle router's point, from the run's own
    records: `auto`'s router scores (its `router_score`), and the answers of the first
    pass's strategy and of the agent to the same questions. None when the run lacks one."""
    if not all(groups.get(name) for name in (auto, first, agent)):
        return None
    scores = {r.qid: r.cost["router_score"] for r in groups[auto] if r.error is None and "router_score" in r.cost}
    f, a = outcomes(groups[first], metric, rates), outcomes(groups[agent], metric, rates)
    if not scores or not set(scores) & set(f) & set(a):
        return None
    return knob_curve(f, a, scores), oracle(f, a)


def chart(points: list[Point], path, metric: str, rates: Rates = RATES, curve: list[Point] | None = None,
          oracle_point: Point | None = None, title: str = "") -> bool:  # fmt: skip
    """Quality (with its 95% interval) against machine seconds a question, one point per
    strategy, auto's knob as a line and the oracle router as a star. False when
    matplotlib is missing (the tables are the report)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.6))
    if curve:
        ax.plot([max(p.seconds, 0.1) for p in curve], [p.quality for p in curve], "-", color="0.6", lw=1.2, zorder=1,
                label="escalate from 0 to 1: the run's first pass and agent, by auto's scores")  # fmt: skip
        # what sending a random share on would give (on average): a router is worth its
        # arithmetic only where its curve rises above this line
        a, b = curve[0], curve[-1]
        shares = [i / 50 for i in range(51)]
        ax.plot([max(a.seconds + t * (b.seconds - a.seconds), 0.1) for t in shares],
                [a.quality + t * (b.quality - a.quality) for t in shares], ":", color="0.45", lw=1, zorder=1,
                label="a random share sent on (no router)")  # fmt: skip
    for p in points:
        x = max(p.seconds, 0.1)  # (an answer replayed from a cache costs nothing: kept on the log axis)
        ax.errorbar([x], [p.quality], yerr=[[p.quality - p.low], [p.high - p.quality]], fmt="o", ms=6, capsize=3, zorder=3)
        note = f"{p.name} ({p.escalated:.0%} sent on)" if p.name.split(":")[-1].startswith("auto") else p.name
        ax.annotate(note, (x, p.quality), textcoords="offset points", xytext=(6, 4), fontsize=8)
    if oracle_point is not None:
        ax.plot([oracle_point.seconds], [oracle_point.quality], "*", ms=13, color="goldenrod", zorder=4,
                label=f"oracle router ({oracle_point.escalated:.0%} sent on)")  # fmt: skip
    ax.set_xscale("log")
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")  # 20, not 2x10^1
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(plain)
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_xlabel(f"machine seconds a question (log scale; {rates.label()})")
    ax.set_ylabel(f"{metric} (95% interval)")
    n = max((p.n for p in points), default=0)
    ax.set_title(title or f"{metric} against cost, n={n}", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    if curve or oracle_point is not None:
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
