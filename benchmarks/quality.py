"""One quality-and-cost table per evaluation run, with the settings that produced it.

    python benchmarks/quality.py runs/<id> [runs/<id> ...] [--baseline vanilla_rag]

For each run directory written by `marag eval`: the model (resolved file), dataset and
pool, n, and per strategy EM, F1, accuracy, recall of the gold documents in what the
strategy read (`retrieval_recall`) and in its sources (`sources_recall`), LLM calls
(mean and median), prompt and completion tokens, seconds per question, questions
stopped by the question budget (and by the deadline among them), and the failure
attribution (`marag.eval.attribution`); then the paired difference of each strategy
from the baseline (bootstrap 95% interval, `*` where it excludes 0) on the questions
both answered, and about how many paired questions the F1 difference seen would need
for its interval to exclude 0 (`marag.eval.stats.questions_needed`); then the cost per
correct answer. Answers replayed from the LLM cache cost nothing; `--costs-from RUN`
takes their cost from the run that made them. Markdown, ready for RESULTS.md. Reads
only the run directories.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

from marag.eval.attribution import CAUSES, cause_of_record
from marag.eval.report import Run, common_questions, cost_per_correct, metric_values, needed_cell, paired_cell
from marag.eval.rundir import ResultRecord

METRICS = ["em", "f1", "accuracy", "retrieval_recall", "sources_recall"]


def deadline_stops(run: Run, records: list[ResultRecord]) -> Counter:
    """Per strategy, how many of these result records the deadline stopped (from their
    traces' budget records; traces of answers not in `records`, such as one replaced
    after a resume or a question outside the common set, do not count)."""
    stopped = {t.id for t in run.traces() if (t.budget or {}).get("stopped_by") == "deadline"}
    return Counter(r.strategy for r in records if r.trace_id in stopped)


def describe(run: Run) -> str:
    meta, cfg = run.meta, run.config
    model = (meta.get("models") or {}).get("llm") or cfg.get("llm", {}).get("model") or "?"
    ds = meta.get("dataset") or {}
    pool = ds.get("pool_note") or ds.get("pool") or "?"
    skip, limit = cfg.get("skip") or 0, cfg.get("limit")
    which = f"questions {skip + 1}-{skip + limit}" if limit else f"questions from {skip + 1}"
    settings = "; ".join(
        f"{name}: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(s.items()) if k in _SHOWN)
        for name, s in (meta.get("strategy_settings") or {}).items()
    )
    return (
        f"**{run.name}** — dataset `{cfg['dataset']}` ({pool}), {which}; model `{Path(str(model)).name}` "
        f"(`{cfg.get('llm', {}).get('backend', '?')}`, {cfg.get('concurrency', '?')} questions in flight); "
        f"retriever {cfg.get('retriever') or 'hybrid'}; seed {cfg.get('seed')}; code {meta.get('code', '?')}.\n"
        f"Settings: {settings}"
    )


# the settings worth printing beside a number (budgets and the switches that change behaviour)
_SHOWN = {"k", "max_agent_calls", "max_llm_calls", "max_tokens", "deadline_s", "max_steps", "max_searches", "paper",
          "judge_pages", "searcher_max_steps", "agents", "rerank", "answer_style"}  # fmt: skip


def replayed(r: ResultRecord) -> bool:
    """An answer whose LLM calls all came from the cache: its cost record says nothing
    was spent this time."""
    return r.cost.get("llm_calls", 0) > 0 and not r.cost.get("prompt_tokens") and not r.cost.get("completion_tokens")


def with_costs_from(groups: dict[str, list[ResultRecord]], other: Run | None) -> tuple[dict[str, list[ResultRecord]], int]:
    """Answers replayed from the LLM cache take their cost from `other` (an earlier run of
    the same code that made those calls), matched by strategy and question."""
    if other is None:
        return groups, 0
    made = {r.key: r.cost for r in other.results if not replayed(r)}
    out, n = {}, 0
    for name, rs in groups.items():
        out[name] = []
        for r in rs:
            if replayed(r) and (cost := made.get(r.key)):
                r, n = r.model_copy(update={"cost": cost}), n + 1
            out[name].append(r)
    return out, n


def table(run: Run, baseline: str, costs_from: Run | None = None, only: list[str] | None = None) -> str:
    groups = run.groups(False)
    if only:
        groups = {k: v for k, v in groups.items() if k in only}
    common, _ = common_questions(groups)
    groups = {k: [r for r in v if r.qid in common] for k, v in groups.items()}
    groups, patched = with_costs_from(groups, costs_from)
    still = sum(replayed(r) for rs in groups.values() for r in rs)
    stops = deadline_stops(run, [r for rs in groups.values() for r in rs])
    head = ["strategy", "n", "EM", "F1", "acc", "recall (read)", "recall (S)", "LLM calls mean/median", "prompt tok", "compl tok",
            "s/q", "budget stops (deadline)"] + list(CAUSES)  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, rs in groups.items():
        ok = [r for r in rs if not r.error]

        def avg(metric: str) -> str:
            vals = list(metric_values(rs, metric).values())
            return f"{statistics.fmean(vals):.3f}" if vals else "–"

        def cost(key: str) -> list[float]:
            return [r.cost.get(key, 0.0) for r in ok]

        calls = cost("llm_calls")
        causes = Counter(cause_of_record(r) for r in rs)
        cells = [name, str(len(rs))] + [avg(m) for m in METRICS] + [
            f"{statistics.fmean(calls):.1f} / {statistics.median(calls):.0f}" if calls else "–",
            f"{statistics.fmean(cost('prompt_tokens')):,.0f}" if ok else "–",
            f"{statistics.fmean(cost('completion_tokens')):,.0f}" if ok else "–",
            f"{statistics.fmean(cost('seconds')):.0f}" if ok else "–",
            f"{int(sum(cost('stopped_by_budget')))} ({stops[name]})",
        ] + [str(causes[c]) for c in CAUSES]
        lines.append("| " + " | ".join(cells) + " |")
    if baseline in groups and len(groups) > 1:
        lines += ["", f"Paired difference from `{baseline}` (mean [95% bootstrap interval], `*`: excludes 0):", ""]
        lines += ["| strategy | " + " | ".join(METRICS) + " | questions the F1 difference needs |", "|" + "---|" * (len(METRICS) + 2)]
        base = groups[baseline]
        for name, rs in groups.items():
            if name == baseline:
                continue
            cells = [name] + [paired_cell(rs, base, m, with_n=False) for m in METRICS] + [needed_cell(rs, base, "f1")]
            lines.append("| " + " | ".join(cells) + " |")
    # what a correct answer cost, beside the per-question cost above (the report's own section)
    lines += [""] + cost_per_correct(groups)
    notes = []
    if patched:
        notes.append(f"{patched} answers were replayed from the LLM cache; their cost is the one recorded when {costs_from.name} made them.")
    if still:
        notes.append(f"{still} answers were replayed from the LLM cache and count no tokens or model time (give --costs-from RUN).")
    return describe(run) + ("\n" + " ".join(notes) if notes else "") + "\n\n" + "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--baseline", default="vanilla_rag")
    ap.add_argument("--strategies", help="only these strategies (comma-separated), e.g. while a run is still going")
    ap.add_argument("--costs-from", type=Path, help="an earlier run of the same code whose costs stand in for answers replayed from the LLM cache")
    args = ap.parse_args()
    other = Run(args.costs_from) if args.costs_from else None
    only = [x.strip() for x in args.strategies.split(",") if x.strip()] if args.strategies else None
    for p in args.runs:
        print(table(Run(p), args.baseline, other, only) + "\n")


if __name__ == "__main__":
    main()
