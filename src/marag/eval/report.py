"""`report.md` (+ PNG plots) from one or more run directories."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from marag.eval.runner import read_results
from marag.eval.stats import mean_ci
from marag.trace import read_jsonl

# The metric that stands for "quality" in plots, first one a run has.
HEADLINE = ["accuracy", "f1", "judge_correct", "rouge_l", "mrag_correctness", "em"]
COST_KEYS = [
    ("llm_calls", "LLM calls"),
    ("prompt_tokens", "prompt tok"),
    ("completion_tokens", "completion tok"),
    ("searches", "searches"),
    ("steps", "agent steps"),
    ("seconds", "seconds"),
]


class Run:
    def __init__(self, path: Path):
        self.path = Path(path)
        cfg_file = self.path / "config.json"
        if not cfg_file.exists():
            from marag.errors import MaragError

            raise MaragError(f"no run at {self.path}", hint="give a directory written by `marag eval` (runs/<id>)")
        self.meta = json.loads(cfg_file.read_text())
        self.config = self.meta["config"]
        self.results = list(read_results(self.path / "results.jsonl").values())
        self.name = self.path.name

    def groups(self, label_run: bool) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = defaultdict(list)
        order = {s: i for i, s in enumerate(self.config["strategies"])}
        for r in sorted(self.results, key=lambda r: (order.get(r["strategy"], 99), r["qid"])):
            out[f"{self.name}:{r['strategy']}" if label_run else r["strategy"]].append(r)
        return out

    def traces(self):
        p = self.path / "traces.jsonl"
        return read_jsonl(p) if p.exists() else []


def _metric_names(groups: dict[str, list[dict]]) -> list[str]:
    seen: dict[str, None] = {}
    for rows in groups.values():
        for r in rows:
            for m in r.get("metrics") or {}:
                seen.setdefault(m, None)
    return list(seen)


def _fmt(m: float, lo: float, hi: float) -> str:
    return f"{m:.3f} [{lo:.3f}, {hi:.3f}]"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _ok(rows: list[dict]) -> list[dict]:
    return [r for r in rows if not r.get("error")]


def build_report(run_paths: list[Path], out_dir: Path | None = None, plots: bool = True) -> Path:
    runs = [Run(p) for p in run_paths]
    out_dir = Path(out_dir or runs[0].path)
    label_run = len(runs) > 1
    groups: dict[str, list[dict]] = {}
    for run in runs:
        groups |= run.groups(label_run)
    metrics = _metric_names(groups)
    cfg = runs[0].config
    parts = [f"# marag evaluation: {', '.join(r.name for r in runs)}", ""]
    parts.append(
        f"Dataset `{cfg['dataset']}`; LLM `{cfg['llm'].get('backend')}`"
        f"{(' ' + cfg['llm'].get('model')) if cfg['llm'].get('model') else ''}; "
        f"questions per strategy: {', '.join(f'{k}={len(v)}' for k, v in groups.items())}. "
        "Cells: mean [95% bootstrap interval]."
    )
    errors = {k: sum(1 for r in v if r.get("error")) for k, v in groups.items()}
    if any(errors.values()):
        parts.append(f"\nFailed questions (excluded from means): {', '.join(f'{k}={n}' for k, n in errors.items() if n)}")

    # quality
    parts += ["", "## Quality", ""]
    header = ["strategy"] + metrics
    rows = []
    for name, rs in groups.items():
        row = [name]
        for m in metrics:
            vals = [r["metrics"][m] for r in _ok(rs) if m in r.get("metrics", {})]
            row.append(_fmt(*mean_ci(vals)) if vals else "–")
        rows.append(row)
    parts.append(_table(header, rows))
    judged = sorted({m for rs in groups.values() for r in _ok(rs) for m in r.get("metrics_std", {})})
    if judged:
        parts += ["", "Judge spread (mean over questions of the std across repeats):", ""]
        jrows = []
        for name, rs in groups.items():
            cells = []
            for m in judged:
                sds = [r["metrics_std"][m] for r in _ok(rs) if m in r.get("metrics_std", {})]
                cells.append(f"{sum(sds) / len(sds):.3f}" if sds else "–")
            jrows.append([name] + cells)
        parts.append(_table(["strategy"] + judged, jrows))

    # cost
    parts += ["", "## Cost per question", ""]
    crow = []
    for name, rs in groups.items():
        ok = _ok(rs)
        cells = [name]
        for key, _ in COST_KEYS:
            vals = [float(r.get("cost", {}).get(key, 0.0)) for r in ok]
            cells.append(f"{sum(vals) / len(vals):.1f}" if vals else "–")
        crow.append(cells)
    parts.append(_table(["strategy"] + [label for _, label in COST_KEYS], crow))

    roles = _role_costs(runs, label_run)
    if roles:
        parts += ["", "### Per agent role (totals per question)", ""]
        rrows = [[s, role, f"{v['steps']:.2f}", f"{v['llm_calls']:.2f}", f"{v['tokens']:.0f}"] for (s, role), v in roles.items()]
        parts.append(_table(["strategy", "role", "steps", "LLM calls", "tokens"], rrows))

    # categories
    head = next((m for m in HEADLINE if m in metrics), metrics[0] if metrics else None)
    cat_keys = sorted({k for rs in groups.values() for r in rs for k in (r.get("metadata") or {})})
    cat_tables: dict[str, dict[str, dict[str, list[float]]]] = {}
    if head and cat_keys:
        parts += ["", f"## By category ({head})", ""]
        for key in cat_keys:
            per: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
            for name, rs in groups.items():
                for r in _ok(rs):
                    v = (r.get("metadata") or {}).get(key)
                    if v is not None and head in r.get("metrics", {}):
                        per[str(v)][name].append(r["metrics"][head])
            cat_tables[key] = per
            names = list(groups)
            rows = [[val] + [f"{sum(c[n]) / len(c[n]):.3f} (n={len(c[n])})" if c.get(n) else "–" for n in names]
                    for val, c in sorted(per.items())]
            parts += [f"### {key}", "", _table([key] + names, rows), ""]

    if plots:
        parts += ["", "## Plots", ""]
        for png in _plots(groups, head, cat_tables, out_dir):
            parts.append(f"![{png.stem}]({png.name})")

    path = out_dir / "report.md"
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path


def _role_costs(runs: list[Run], label_run: bool) -> dict[tuple[str, str], dict[str, float]]:
    totals: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    questions: dict[str, set[str]] = defaultdict(set)
    for run in runs:
        # a resumed run may hold an orphan trace of a re-answered question: latest wins
        latest = {(t.strategy, t.config.get("qid", t.id)): t for t in run.traces()}
        for t in latest.values():
            s = f"{run.name}:{t.strategy}" if label_run else t.strategy
            questions[s].add(t.id)
            for st in t.steps:
                acc = totals[(s, st.agent)]
                acc["steps"] += 1
                acc["llm_calls"] += len(st.llm_calls)
                acc["tokens"] += sum(c.prompt_tokens + c.completion_tokens for c in st.llm_calls if not c.cached)
    return {k: {m: v / max(1, len(questions[k[0]])) for m, v in d.items()} for k, d in sorted(totals.items())}


def _plots(groups, head, cat_tables, out_dir: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # plots are optional; the tables are the report
        return []
    made = []
    if head:
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, rs in groups.items():
            ok = _ok(rs)
            if not ok:
                continue
            q = sum(r["metrics"].get(head, 0.0) for r in ok) / len(ok)
            tok = sum(r.get("cost", {}).get("prompt_tokens", 0) + r.get("cost", {}).get("completion_tokens", 0) for r in ok) / len(ok)
            ax.scatter([tok], [q], s=60)
            ax.annotate(name, (tok, q), textcoords="offset points", xytext=(5, 5), fontsize=8)
        ax.set_xlabel("tokens per question")
        ax.set_ylabel(head)
        ax.set_title(f"{head} vs tokens per question")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        p = out_dir / f"{head}_vs_tokens.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p)
    for key, per in cat_tables.items():
        vals = sorted(per)
        names = list(groups)
        if not vals:
            continue
        fig, ax = plt.subplots(figsize=(max(6, len(vals) * 1.2), 4))
        width = 0.8 / max(1, len(names))
        for i, n in enumerate(names):
            ys = [sum(per[v][n]) / len(per[v][n]) if per[v].get(n) else 0.0 for v in vals]
            ax.bar([j + i * width for j in range(len(vals))], ys, width, label=n)
        ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(vals))])
        ax.set_xticklabels(vals, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(head)
        ax.set_title(f"{head} by {key}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        p = out_dir / f"by_{key.replace('/', '_')}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p)
    return made


def summary_rows(run_path: Path) -> list[dict[str, Any]]:
    """Per strategy means (no intervals), for printing a compact table in the terminal."""
    run = Run(run_path)
    out = []
    for name, rs in run.groups(False).items():
        ok = _ok(rs)
        row: dict[str, Any] = {"strategy": name, "n": len(ok), "errors": len(rs) - len(ok)}
        for m in _metric_names({name: ok}):
            vals = [r["metrics"][m] for r in ok if m in r["metrics"]]
            row[m] = sum(vals) / len(vals) if vals else None
        for key, _ in COST_KEYS:
            vals = [float(r.get("cost", {}).get(key, 0.0)) for r in ok]
            row[key] = sum(vals) / len(vals) if vals else None
        out.append(row)
    return out
