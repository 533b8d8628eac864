"""One quality-and-cost table per evaluation run, with the settings that produced it.

    python benchmarks/quality.py runs/<id> [runs/<id> ...] [--baseline vanilla_rag]

For each run directory written by `marag eval`: the model (resolved file), dataset and
pool, n, and per strategy EM, F1, accuracy, recall of the gold documents in what the
strategy read (`retrieval_recall`) and in its sources (`sources_recall`), LLM calls
(mean and median), prompt and completion tokens, seconds per question, questions
stopped by the question budget (and by the deadline among them), and the failure
attribution (`marag.eval.attribution`); then the paired difference of each strategy
from the baseline (bootstrap 95% interval, `*` where it excludes 0) on the questions
both answered; then the cost per correct answer. Markdown, ready for RESULTS.md. Reads only the run directories.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

from marag.eval.attribution import CAUSES, cause_of_record
from marag.eval.report import Run, common_questions, cost_per_correct, metric_values, paired_cell

METRICS = ["em", "f1", "accuracy", "retrieval_recall", "sources_recall"]


def deadline_stops(run: Run, records: list[dict]) -> Counter:
    """Per strategy, how many of these result records the deadline stopped (from their
    traces' budget records; traces of answers not in `records`, such as one replaced
    after a resume or a question outside the common set, do not count)."""
    stopped = {t.id for t in run.traces() if (t.budget or {}).get("stopped_by") == "deadline"}
    return Counter(r["strategy"] for r in records if r.get("trace_id") in stopped)


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


def table(run: Run, baseline: str) -> str:
    groups = run.groups(False)
    common, _ = common_questions(groups)
    groups = {k: [r for r in v if r["qid"] in common] for k, v in groups.items()}
    stops = deadline_stops(run, [r for rs in groups.values() for r in rs])
    head = ["strategy", "n", "EM", "F1", "acc", "recall (read)", "recall (S)", "LLM calls mean/median", "prompt tok", "compl tok",
            "s/q", "budget stops (deadline)"] + list(CAUSES)  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, rs in groups.items():
        ok = [r for r in rs if not r.get("error")]

        def avg(metric: str) -> str:
            vals = list(metric_values(rs, metric).values())
            return f"{statistics.fmean(vals):.3f}" if vals else "–"

        def cost(key: str) -> list[float]:
            return [float((r.get("cost") or {}).get(key, 0.0)) for r in ok]

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
        lines += ["| strategy | " + " | ".join(METRICS) + " |", "|" + "---|" * (len(METRICS) + 1)]
        base = groups[baseline]
        for name, rs in groups.items():
            if name == baseline:
                continue
            cells = [name] + [paired_cell(rs, base, m, with_n=False) for m in METRICS]
            lines.append("| " + " | ".join(cells) + " |")
    # what a correct answer cost, beside the per-question cost above (the report's own section)
    lines += [""] + cost_per_correct(groups)
    return describe(run) + "\n\n" + "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--baseline", default="vanilla_rag")
    args = ap.parse_args()
    for p in args.runs:
        print(table(Run(p), args.baseline) + "\n")


if __name__ == "__main__":
    main()
