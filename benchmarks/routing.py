"""Which signals tell a right first pass from a wrong one, and what routing buys.

    python benchmarks/routing.py runs/<id> [runs/<id> ...] [--router FILE] [--agent unirag]

Reads run directories that hold the first pass (`vanilla_rag_k5`, with the reader's
token log-probabilities in its traces) and, where present, `vanilla_rag` (k=2: the
second cheap read), the agent and `auto`. Prints, with the settings beside them:
- each signal's AUROC alone for "the first pass is right" (f1 >= 0.5), per dataset and
  pooled, and the second read's agreement with the first (a signal that costs one more
  model call; kept only if it pays);
- a router's AUROC on these runs (`--router`, default the one marag ships), or one
  fitted here with cross-validation when `--fit` is given;
- the quality-cost curve over the share sent on, the oracle router's point and the knee.
No model is called. Markdown, for RESULTS.md.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path

from marag.agents.search.memory import flattened
from marag.eval.quality_cost import RATES, knee, knob_curve, oracle
from marag.eval.report import Run
from marag.strategies.auto.router import Router
from marag.train.router import auroc, examples, fit, key_of, signal_aurocs


def second_read_agreement(run_dirs: list[Path], first: str) -> dict[str, float]:
    """(run name @ qid) -> 1 when `vanilla_rag` (k=2) gave the first pass's answer."""
    out = {}
    for path in run_dirs:
        run = Run(path)
        k5 = {r.qid: r.prediction for r in run.results if r.strategy == first and r.error is None}
        for r in run.results:
            if r.strategy == "vanilla_rag" and r.error is None and r.qid in k5:
                out[key_of(run.name, r.qid)] = float(flattened(r.prediction or "") == flattened(k5[r.qid] or ""))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--first", default="vanilla_rag_k5")
    ap.add_argument("--agent", default="unirag")
    ap.add_argument("--router", type=Path, default=None, help="router file to check (default: marag's)")
    ap.add_argument("--fit", action="store_true", help="fit a router on these runs (cross-validated) instead of checking one")
    args = ap.parse_args()

    exs, summary = examples(args.runs, first=args.first, agent=args.agent)
    model = next((s["model"] for s in summary if s["model"]), "?")
    print(f"model `{model}`; first pass `{args.first}`, agent `{args.agent}`; runs: "
          + ", ".join(f"{s['run']} ({s['dataset']}, from {s['skip'] + 1}, n={s['questions']})" for s in summary))  # fmt: skip
    print(f"{len(exs)} first-pass answers, {sum(e.right for e in exs)} right (f1 >= 0.5)\n")

    by_set: dict[str, list] = defaultdict(list)
    for e in exs:
        by_set[e.run].append(e)
    sets = {name: signal_aurocs(group) for name, group in by_set.items()}
    pooled = signal_aurocs(exs)
    agree = second_read_agreement(args.runs, args.first)
    names = list(by_set)
    print("| signal | pooled | " + " | ".join(names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    for sig in sorted(pooled, key=lambda s: -(pooled[s] if math.isfinite(pooled[s]) else 0)):
        print(f"| {sig} | {pooled[sig]:.3f} | " + " | ".join(f"{sets[n][sig]:.3f}" for n in names) + " |")
    with_second = [e for e in exs if e.key in agree]
    if with_second:
        a = auroc([agree[e.key] for e in with_second], [e.right for e in with_second])
        share = sum(agree[e.key] for e in with_second) / len(with_second)
        print(f"| second read agrees (k=2, one more call; n={len(with_second)}, {share:.0%} agree) | {max(a, 1 - a):.3f} | |")

    if args.fit:
        fitted = fit(exs, summary, escalate=None if any(e.agent for e in exs) else 0.3, agent=args.agent)
        print(f"\nrouter fitted here: AUROC {fitted.router.auroc['cross_validated']:.3f} cross-validated, features {fitted.router.features}")
    else:
        router = Router.load(args.router)
        scores = [router.score(e.signals) for e in exs]
        print(f"\nrouter {Path(router.source).name}: AUROC {auroc(scores, [e.right for e in exs]):.3f} on these answers "
              f"(best single signal {max(v for v in pooled.values() if math.isfinite(v)):.3f})")  # fmt: skip
    with_agent = [e for e in exs if e.agent is not None]
    if with_agent:
        firsts = {e.key: e.first for e in with_agent}
        agents = {e.key: e.agent for e in with_agent if e.agent is not None}
        if args.fit:  # the fit's own curve: out-of-fold scores, not the final model's on its training answers
            curve, best, k = fitted.curve, fitted.oracle, fitted.knee
        else:
            router = Router.load(args.router)
            curve = knob_curve(firsts, agents, {e.key: router.score(e.signals) for e in with_agent})
            best, k = oracle(firsts, agents), knee(curve)
        print(f"\nquality-cost over the share sent on (f1; machine seconds at {RATES.label()}; n={len(with_agent)}):\n")
        print("| sent on | f1 | s/q |\n|---:|---:|---:|")
        for share in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0):
            p = min(curve, key=lambda p: abs(p.escalated - share))
            print(f"| {p.escalated:.0%} | {p.quality:.3f} | {p.seconds:.1f} |")
        print(f"| knee {k.escalated:.0%} | {k.quality:.3f} | {k.seconds:.1f} |")
        print(f"| oracle {best.escalated:.0%} | {best.quality:.3f} | {best.seconds:.1f} |")


if __name__ == "__main__":
    main()
