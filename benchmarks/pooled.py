"""Several runs' questions as one set: each strategy's quality and cost per set and
pooled, paired against baselines, auto's routing read back, and the pooled chart.

    python benchmarks/pooled.py runs/<a> runs/<b> ... [--baselines vanilla_rag_k5,unirag] [--chart FILE]
    python benchmarks/pooled.py base=runs/<a> base=runs/<b> tuned=runs/<c> ... --baselines base:unirag

A question is paired by its dataset and id, so runs of one strategy by different models
(a teacher, a student as it came and tuned) compare when each run is given a label:
`LABEL=RUN` names its strategies `LABEL:strategy`. Auto's routing lines and curve read
unlabelled runs (the strategies `auto`, --first and --agent by their own names).

For every strategy found in every run: n, F1 with its 95% bootstrap interval, the paired
difference from each baseline (interval; better/worse counts), accuracy, gold pages in
what it read, calls, evaluated prompt and generated tokens and machine seconds a question
(`marag.eval.quality_cost.RATES`), and for `auto` the share of questions sent on. Then
auto's router on these questions: its AUROC for "the first pass is right" (f1 >= 0.5,
from auto's own first answers) beside the best single signal's, and the questions it
sent the wrong way. `--chart` draws the pooled quality-cost chart with auto's curve over
its knob and the oracle router (no model calls). Reads only the run directories.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import defaultdict
from pathlib import Path

from marag.eval.metrics.lexical import max_token_f1
from marag.eval.quality_cost import RATES, Outcome, chart, knee, knob_curve, oracle, point
from marag.eval.report import Run
from marag.eval.rundir import ResultRecord
from marag.eval.stats import mean_ci, paired_diff_ci
from marag.train.router import auroc


Key = tuple[str, str]  # (dataset, qid): a question, whichever run answered it


def question_key(run: Run, qid: str) -> Key:
    return run.config["dataset"], qid


def pooled(runs: list[Run], labels: list[str | None] | None = None) -> dict[str, dict[Key, ResultRecord]]:
    """strategy (`label:strategy` for a labelled run) -> (dataset, qid) -> record, for the
    strategies whose questions every dataset's runs answered."""
    labels = labels or [None] * len(runs)
    out: dict[str, dict[Key, ResultRecord]] = defaultdict(dict)
    for run, label in zip(runs, labels):
        for r in run.results:
            key = question_key(run, r.qid)
            name = f"{label}:{r.strategy}" if label else r.strategy
            if key in out[name]:
                raise SystemExit(f"{name} answers {'/'.join(key)} in two runs: give each model's runs their own LABEL=RUN")
            out[name][key] = r
    datasets = {run.config["dataset"] for run in runs}
    names = [s for s in out if {dataset for dataset, _ in out[s]} == datasets]
    return {s: out[s] for s in names}


def labelled(args: list[str]) -> tuple[list[Run], list[str | None]]:
    """`LABEL=RUN` or `RUN` arguments: the runs and their labels (a run directory whose
    own name holds a `=` is a run, not a label)."""
    runs, labels = [], []
    for a in args:
        label, sep, path = a.partition("=")
        is_label = bool(sep) and "/" not in label and not Path(a).exists()
        runs.append(Run(Path(path if is_label else a)))
        labels.append(label if is_label else None)
    return runs, labels


def f1(r: ResultRecord) -> float:
    return r.metrics.get("f1", 0.0) if r.error is None else 0.0


def row(name: str, recs: dict[Key, ResultRecord], base: dict[str, dict[Key, ResultRecord]], keys: list[Key]) -> str:
    vals = [f1(recs[k]) for k in keys]
    m, lo, hi = mean_ci(vals)
    cells = [name, str(len(keys)), f"{m:.3f} [{lo:.3f}, {hi:.3f}]"]
    for b, brecs in base.items():
        if b == name:
            cells.append("")
            continue
        d, dlo, dhi = paired_diff_ci(vals, [f1(brecs[k]) for k in keys])
        better = sum(f1(recs[k]) > f1(brecs[k]) + 1e-9 for k in keys)
        worse = sum(f1(recs[k]) < f1(brecs[k]) - 1e-9 for k in keys)
        cells.append(f"{d:+.3f} [{dlo:+.3f}, {dhi:+.3f}] {better}/{worse}")
    ok = [recs[k] for k in keys if recs[k].error is None]
    mean = lambda key: statistics.fmean(r.cost.get(key, 0.0) for r in ok) if ok else 0.0  # noqa: E731
    cells += [f"{statistics.fmean(r.metrics.get('accuracy', 0.0) for r in ok):.3f}",
              f"{statistics.fmean(r.metrics.get('retrieval_recall', 0.0) for r in ok):.3f}",
              f"{mean('escalated'):.0%}" if name.split(":")[-1].startswith("auto") else "",
              f"{mean('llm_calls'):.1f}", f"{mean('prompt_tokens_evaluated'):,.0f}", f"{mean('completion_tokens'):,.0f}",
              f"{statistics.fmean(RATES.seconds(r.cost) for r in ok):.1f}"]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def table(groups: dict[str, dict[Key, ResultRecord]], baselines: list[str], keys: list[Key]) -> list[str]:
    base = {b: groups[b] for b in baselines if b in groups}
    head = ["strategy", "n", "F1 [95%]"] + [f"F1 − {b} [95%] better/worse" for b in base]
    head += ["accuracy", "gold pages read", "sent on", "calls/q", "evaluated prompt tok/q", "generated tok/q", "s/q"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + [row(name, recs, base, keys) for name, recs in groups.items()]


def routing(groups: dict[str, dict[Key, ResultRecord]], runs: list[Run], keys: list[Key], agent: str) -> list[str]:
    """Auto's router on these questions, read from its route steps."""
    if "auto" not in groups:
        return []
    routes = {}
    for run in runs:
        ids = {r.trace_id: question_key(run, r.qid) for r in run.results if r.strategy == "auto" and r.trace_id}
        for t in run.traces():
            step = next((s for s in t.steps if s.agent == "route"), None)
            if t.id in ids and step is not None:
                routes[ids[t.id]] = step.outputs
    keys = [k for k in keys if k in routes]
    right = [max_token_f1(routes[k]["first_answer"], groups["auto"][k].answers) >= 0.5 for k in keys]
    out = [f"auto's router on these {len(keys)} questions: first pass right (f1 >= 0.5) for {sum(right)}; "
           f"router AUROC {auroc([routes[k]['score'] for k in keys], right):.3f}"]  # fmt: skip
    singles = {}
    for sig in routes[keys[0]]["signals"]:
        vals = [routes[k]["signals"].get(sig) for k in keys]
        if all(v is None for v in vals):
            continue
        fill = statistics.fmean(v for v in vals if v is not None)
        a = auroc([fill if v is None else v for v in vals], right)
        if math.isfinite(a):
            singles[sig] = max(a, 1 - a)
    best = max(singles, key=singles.get)
    out[-1] += f"; best single signal {best} {singles[best]:.3f}"
    sent = {k for k in keys if routes[k]["decision"] != "first_pass"}
    if agent in groups:
        wrong_kept = [k for k in keys if k not in sent and not right[keys.index(k)] and f1(groups[agent][k]) > max_token_f1(routes[k]["first_answer"], groups["auto"][k].answers)]
        needless = [k for k in sent if right[keys.index(k)]]
        out.append(f"kept though wrong and {agent} alone better: {len(wrong_kept)}; sent on though the first pass was right: {len(needless)} of {len(sent)} sent")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run directories, each RUN or LABEL=RUN")
    ap.add_argument("--baselines", default="vanilla_rag_k5,unirag")
    ap.add_argument("--agent", default="unirag")
    ap.add_argument("--first", default="vanilla_rag_k5")
    ap.add_argument("--chart", type=Path, default=None)
    args = ap.parse_args()
    runs, labels = labelled(args.runs)
    groups = pooled(runs, labels)
    baselines = args.baselines.split(",")
    if unknown := [b for b in baselines if b not in groups]:
        raise SystemExit(f"--baselines: {', '.join(unknown)} not in every run (found: {', '.join(groups)})")
    models = {}
    for run, label in zip(runs, labels):
        models.setdefault(label, next((c.model for t in run.traces()[:1] for c in t.llm_calls()), "?"))
    model = ", ".join(f"{label}: {m}" if label else m for label, m in models.items())
    print(f"model `{model}`; retriever {runs[0].config.get('retriever') or 'hybrid'}; defaults; "
          f"{runs[0].config.get('concurrency')} in flight; machine seconds at {RATES.label()}\n")  # fmt: skip
    common = set.intersection(*(set(g) for g in groups.values()))
    for dataset in dict.fromkeys(run.config["dataset"] for run in runs):
        keys = sorted(k for k in common if k[0] == dataset)
        slices = sorted({(r.config.get("skip", 0), r.config.get("limit", 0)) for r in runs if r.config["dataset"] == dataset})
        where = ", ".join(f"{skip + 1}-{skip + limit}" if limit else f"{skip + 1}-end" for skip, limit in slices)
        print(f"### {dataset}, questions {where}: n={len(keys)}\n")
        print("\n".join(table(groups, baselines, keys)) + "\n")
    keys = sorted(common)
    print(f"### pooled, n={len(keys)}\n")
    print("\n".join(table(groups, baselines, keys)) + "\n")
    for line in routing(groups, runs, keys, args.agent):
        print(line)
    if args.chart:
        points = [point(name, [Outcome(f1(recs[k]), RATES.seconds(recs[k].cost)) for k in keys],
                        statistics.fmean(recs[k].cost.get("escalated", 0.0) for k in keys)) for name, recs in groups.items()]  # fmt: skip
        curve = best = None
        if {"auto", args.first, args.agent} <= set(groups):
            first = {k: Outcome(f1(groups[args.first][k]), RATES.seconds(groups[args.first][k].cost)) for k in keys}
            agent = {k: Outcome(f1(groups[args.agent][k]), RATES.seconds(groups[args.agent][k].cost)) for k in keys}
            scores = {k: groups["auto"][k].cost["router_score"] for k in keys if "router_score" in groups["auto"][k].cost}
            curve, best = knob_curve(first, agent, scores), oracle(first, agent)
            k = knee(curve)
            print(f"\nauto's curve (from the recorded scores): knee {k.escalated:.0%} sent on, F1 {k.quality:.3f} at {k.seconds:.1f} s/q; "
                  f"oracle router {best.quality:.3f} at {best.seconds:.1f} s/q ({best.escalated:.0%} sent on)")  # fmt: skip
        chart(points, args.chart, "F1", curve=curve, oracle_point=best, title=f"F1 against machine seconds a question, n={len(keys)} (pooled)")
        print(f"chart: {args.chart}")


if __name__ == "__main__":
    main()
