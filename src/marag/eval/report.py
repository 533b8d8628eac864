"""`report.md` (+ PNG plots) from one or more run directories."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from marag.eval.attribution import CAUSES, FAILURES, cause_of_record
from marag.eval.quality_cost import RATES, Point, auto_curve, chart, knee, outcomes, point
from marag.eval.metrics.base import METRICS
from marag.eval.rundir import RESULTS, ResultRecord, read_results
from marag.eval.stats import mean_ci, paired_diff_ci, questions_needed
from marag.trace import read_jsonl

# The metric that stands for "quality" in plots, first one a run has.
HEADLINE = ["accuracy", "f1", "judge_correct", "rouge_l", "mrag_correctness", "em"]
COST_KEYS = [
    ("llm_calls", "LLM calls"),
    ("prompt_tokens", "prompt tok"),
    ("prompt_tokens_reused", "of which reused"),
    ("completion_tokens", "completion tok"),
    ("searches", "searches"),
    ("distinct_queries", "distinct queries"),
    ("docs_read", "docs read"),
    ("repeated_searches", "repeated searches"),
    ("steps", "agent steps"),
    ("stopped_by_budget", "stopped by budget"),
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
        if not isinstance(self.meta.get("config"), dict) or not isinstance(self.meta["config"].get("strategies"), list):
            from marag.errors import MaragError

            raise MaragError(f"{cfg_file} has no config with a 'strategies' list", hint="give a directory written by `marag eval`")
        self.config = self.meta["config"]
        self.results: list[ResultRecord] = list(read_results(self.path / RESULTS).values())
        self.name = self.path.name

    @classmethod
    def of(cls, name: str, meta: dict[str, Any], results: list[ResultRecord]) -> Run:
        """A run from records already read (the server reads them through its jail)."""
        run = cls.__new__(cls)
        run.path, run.name, run.meta, run.config, run.results = Path(name), name, meta, meta["config"], results
        return run

    def groups(self, label_run: bool) -> dict[str, list[ResultRecord]]:
        out: dict[str, list[ResultRecord]] = defaultdict(list)
        order = {s: i for i, s in enumerate(self.config["strategies"])}
        for r in sorted(self.results, key=lambda r: (order.get(r.strategy, 99), r.qid)):
            out[f"{self.name}:{r.strategy}" if label_run else r.strategy].append(r)
        return out

    def traces(self):
        p = self.path / "traces.jsonl"
        return read_jsonl(p) if p.exists() else []


def _metric_names(groups: dict[str, list[ResultRecord]]) -> list[str]:
    seen: dict[str, None] = {}
    for rows in groups.values():
        for r in rows:
            for m in r.metrics:
                seen.setdefault(m, None)
    return list(seen)


def _fmt(m: float, lo: float, hi: float) -> str:
    return f"{m:.3f} [{lo:.3f}, {hi:.3f}]"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _ok(rows: list[ResultRecord]) -> list[ResultRecord]:
    return [r for r in rows if not r.error]


def incomplete_strategies(runs: list[Run], label_run: bool = False) -> dict[str, tuple[int, int]]:
    """Strategies of each run's config with fewer results than the run's question count
    (the most any of its strategies has, or its recorded count): name -> (done, total)."""
    out: dict[str, tuple[int, int]] = {}
    for run in runs:
        done = {s: 0 for s in run.config["strategies"]}
        for r in run.results:
            done[r.strategy] = done.get(r.strategy, 0) + 1
        total = max([run.meta.get("questions") or 0, *done.values()])
        for name, n in done.items():
            if n < total:
                out[f"{run.name}:{name}" if label_run else name] = (n, total)
    return out


def common_questions(groups: dict[str, list[ResultRecord]]) -> tuple[set[str], dict[str, int]]:
    """The question ids every group has a result for (answered or failed), and per group
    how many of its questions fall outside that set."""
    ids = [{r.qid for r in rows} for rows in groups.values()]
    common = set.intersection(*ids) if ids else set()
    return common, {name: len(i - common) for name, i in zip(groups, ids)}


def failed_value(metric: str) -> float:
    """What a failed question counts as for `metric`: its worst value (0, or 1 for a
    lower-is-better share such as `overlong`); names outside the registry (a judged
    metric's _std column) count 0."""
    return METRICS.get(metric).worst if metric in METRICS else 0.0


def _failure_values(metrics: list[str]) -> str:
    """What a failed question counts as, for the report's header: "0", and each metric
    whose worst value is not 0 ("0; 1 for `overlong`")."""
    others = [f"{failed_value(m):g} for `{m}`" for m in metrics if failed_value(m) != 0.0]
    return "; ".join(["0", *others])


def metric_values(rows: list[ResultRecord], metric: str) -> dict[str, float]:
    """qid -> value of `metric`; a failed question counts as a failure (the metric's
    worst value, see `failed_value`), a question the metric does not apply to (no gold
    documents, a strategy that never retrieves) is left out."""
    out = {}
    for r in rows:
        if r.error:
            out[r.qid] = failed_value(metric)
        elif metric in r.metrics:
            out[r.qid] = r.metrics[metric]
    return out


def _applies_when_failed(rows: list[ResultRecord], metric: str) -> bool:
    # a failed row has no metrics; count it as 0 only for metrics this strategy produces
    if cut := _depth(metric):  # recall@5 says nothing about a strategy that returns 2 documents
        if max((len(r.retrieved_doc_ids) for r in rows), default=0) < cut:
            return False
    return any(metric in r.metrics for r in _ok(rows))


def _depth(metric: str) -> int | None:
    """k of a rank-cut metric such as recall@5 (None for others)."""
    name, _, k = metric.partition("@")
    return int(k) if k.isdigit() and name.startswith("recall") else None


# Category values that have an order of their own (HotpotQA's levels); others sort
# naturally ("2hop" < "3hop" < "10hop").
_ORDER = {"easy": 0, "medium": 1, "hard": 2}


def category_order(values) -> list[str]:
    def key(v: str):
        parts = re.split(r"(\d+)", str(v))
        return (_ORDER.get(str(v).lower(), 99), [int(p) if p.isdigit() else p for p in parts])

    return sorted(values, key=key)


def _paired(rows: list[ResultRecord], base: list[ResultRecord], metric: str) -> tuple[list[float], list[float]]:
    """The strategy's and the baseline's values of `metric` on the questions both have
    one for, in question order."""
    a, b = metric_values(rows, metric), metric_values(base, metric)
    qids = sorted(set(a) & set(b))
    return [a[q] for q in qids], [b[q] for q in qids]


def paired_cell(rows: list[ResultRecord], base: list[ResultRecord], metric: str, with_n: bool = True) -> str:
    """Mean of (strategy - baseline) on the questions both have a value for, with its
    95% paired bootstrap interval; `*` where the interval excludes 0."""
    a, b = _paired(rows, base, metric)
    if not a:
        return "–"
    d, lo, hi = paired_diff_ci(a, b)
    star = "*" if lo > 0 or hi < 0 else ""
    return f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]{star}" + (f" n={len(a)}" if with_n else "")


def needed_cell(rows: list[ResultRecord], base: list[ResultRecord], metric: str) -> str:
    """How many paired questions the observed difference would need to be significant
    (`questions_needed`), beside how many it had."""
    a, b = _paired(rows, base, metric)
    n = questions_needed(a, b) if a else None
    return f"~{n:,} (has {len(a)})" if n else "–"


def quality_tables(groups: dict[str, list[ResultRecord]], metrics: list[str], baseline: str | None) -> list[str]:
    parts = ["## Quality", ""]
    header = ["strategy", "n", "failed"] + metrics
    rows = []
    for name, rs in groups.items():
        row = [name, str(len(rs)), str(len(rs) - len(_ok(rs)))]
        for m in metrics:
            vals = list(metric_values(rs, m).values()) if _applies_when_failed(rs, m) else []
            row.append(_fmt(*mean_ci(vals)) if vals else "–")
        rows.append(row)
    parts.append(_table(header, rows))
    if baseline is None or len(groups) < 2:
        return parts
    parts += [
        "",
        f"### Difference from {baseline} (paired over the same questions)",
        "",
        "Cells: mean of (strategy - baseline) [95% paired bootstrap interval], n questions; "
        "`*` where the interval excludes 0.",
        "",
    ]
    base = groups[baseline]
    drows = []
    for name, rs in groups.items():
        if name == baseline:
            continue
        row = [name]
        for m in metrics:
            if not (_applies_when_failed(rs, m) and _applies_when_failed(base, m)):
                row.append("–")
                continue
            row.append(paired_cell(rs, base, m))
        drows.append(row)
    parts.append(_table(["strategy"] + metrics, drows))
    # One metric is enough to tell "no difference" from "too few questions": F1 where
    # there is one (graded, so it separates strategies at smaller n than accuracy).
    head = next((m for m in ["f1", *HEADLINE] if m in metrics), None)
    if head and drows:
        parts += [
            "",
            f"Paired questions the {head} difference would need for its interval to exclude 0, at the mean and "
            "spread seen here (normal approximation; –: no difference):",
            "",
            _table(["strategy", head], [[name, needed_cell(rs, base, head)] for name, rs in groups.items() if name != baseline]),
        ]
    return parts


def cost_per_correct(groups: dict[str, list[ResultRecord]]) -> list[str]:
    """What a correct answer cost each strategy: its totals over the questions divided
    by its correct answers (correct as in `marag.eval.attribution`), beside the rate."""
    parts = [
        "### Cost per correct answer",
        "",
        "Totals over all questions divided by the correct answers (answer contains a gold answer, or token F1 >= 0.5).",
        "",
    ]
    rows = []
    for name, rs in groups.items():
        right = sum(cause_of_record(r) == "correct" for r in rs)
        cells = [name, f"{right}/{len(rs)}"]
        for key in ("llm_calls", "prompt_tokens", "completion_tokens", "seconds"):
            total = sum(r.cost.get(key, 0.0) for r in rs)
            cells.append(f"{total / right:,.1f}" if right else "–")
        rows.append(cells)
    return parts + [_table(["strategy", "correct", "LLM calls", "prompt tok", "completion tok", "seconds"], rows)]


def failure_sections(groups: dict[str, list[ResultRecord]]) -> list[str]:
    """One cause per question and strategy (`marag.eval.attribution`): counts, then the
    questions behind each cause, so a failure can be looked up in the viewer."""
    gold = any(r.gold_doc_ids for rs in groups.values() for r in rs)
    parts = [
        "## Why answers fail",
        "",
        "One cause per question (`marag.eval.attribution`): budget_stop (the question's budget or deadline stopped it), "
        "protocol_failure (no usable answer, or over a quarter of the steps were fallbacks or refusals), retrieval_miss "
        "(no gold document among what the strategy read), answer_not_extracted (a gold answer is in the answer's sources, "
        "the answer does not give it), reading_miss (a gold document was read, the answer is wrong), wrong (no gold "
        "documents to tell retrieval from reading)."
        + ("" if gold else " This dataset has no gold documents: retrieval_miss, answer_not_extracted and reading_miss are n/a."),
        "",
    ]
    counts = {name: Counter(cause_of_record(r) for r in rs) for name, rs in groups.items()}
    shown = [c for c in CAUSES if any(n[c] for n in counts.values())] or ["correct"]
    rows = [[name] + [str(counts[name][c]) for c in shown] for name in groups]
    parts.append(_table(["strategy"] + shown, rows))
    listing = []
    for name, rs in groups.items():
        for cause in FAILURES:
            qids = sorted(r.qid for r in rs if cause_of_record(r) == cause)
            if qids:
                listing.append(f"- {name} / {cause} ({len(qids)}): {', '.join(qids)}")
    if listing:
        parts += ["", "Questions by cause:", ""] + listing
    return parts


def settings_section(runs: list["Run"], label_run: bool) -> list[str]:
    """What each strategy ran with, so a number can be read with its settings."""
    from marag.strategies import STRATEGIES

    parts = ["## Settings", ""]
    for run in runs:
        cfg, meta = run.config, run.meta
        prefix = f"{run.name}:" if label_run else ""
        llm = cfg.get("llm", {})
        model = meta.get("models", {}).get("llm") or llm.get("model") or llm.get("model_path") or ""
        parts.append(f"- {prefix}LLM: `{llm.get('backend')}` {model}; seed {cfg.get('seed')}; code {meta.get('code', '?')}")
        for name, settings in (meta.get("strategy_settings") or {}).items():
            shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in settings.items() if k != "role_llms" or v)
            extra = ""
            if "paper" in settings:  # a strategy with a paper mode names the additions that were on
                config_class = getattr(STRATEGIES.get(name), "Config", None) if name in STRATEGIES else None
                if config_class is not None and hasattr(config_class, "additions"):
                    on = config_class.model_validate(settings).additions()
                    extra = " — paper's behaviour only" if not on else f" — our additions on: {', '.join(on)}"
            parts.append(f"- {prefix}{name}{extra}: {shown}")
    return parts + [""]


def judge_sections(groups: dict[str, list[ResultRecord]], runs: list["Run"]) -> list[str]:
    parts: list[str] = []
    setups = [r.meta.get("judge_setup") for r in runs if r.meta.get("judge_setup")]
    judged = sorted({m for rs in groups.values() for r in _ok(rs) for m in r.metrics_std})
    if not judged:
        return parts
    for js in setups:
        line = f"Judge: {js['repeats']} repeat(s) at temperature {js['temperature']}"
        line += f", {js['batch']} item(s) per call" if js.get("batch") else ", the metrics' default items per call"
        if js.get("self_judged"):
            line += ". **The judge is the strategies' own model: it grades itself.**"
        parts += [line, ""]
    parts += ["Judge spread (mean over questions of the std across repeats):", ""]
    jrows = []
    for name, rs in groups.items():
        cells = []
        for m in judged:
            sds = [r.metrics_std[m] for r in _ok(rs) if m in r.metrics_std]
            cells.append(f"{sum(sds) / len(sds):.3f}" if sds else "–")
        jrows.append([name] + cells)
    parts += [_table(["strategy"] + judged, jrows), ""]
    parts += ["Judgments made by a lexical stand-in because the judge's output was unusable:", ""]
    frows = []
    for name, rs in groups.items():
        cells = []
        for m in judged:
            made = sum(r.judge_fallbacks.get(m, {}).get("decisions", 0) for r in _ok(rs))
            fell = sum(r.judge_fallbacks.get(m, {}).get("fallbacks", 0) for r in _ok(rs))
            cells.append(f"{fell}/{made} ({fell / made:.0%})" if made else "–")
        frows.append([name] + cells)
    return parts + [_table(["strategy"] + judged, frows)]


def comparison_dir(runs: list[Path], out: Path | None = None) -> Path:
    """Where a comparison of several runs goes: `out`, or a new `compare-A+B` beside the
    first run; never one of the runs themselves (their own report.md stays theirs)."""
    runs = [Path(r).resolve() for r in runs]
    out = Path(out) if out else runs[0].parent / ("compare-" + "+".join(r.name for r in runs))[:120]
    if out.resolve() in runs:
        from marag.errors import MaragError

        raise MaragError(f"{out} is one of the runs being compared", hint="choose another --out for the comparison")
    return out


def build_report(
    run_paths: list[Path], out_dir: Path | None = None, plots: bool = True, baseline: str | None = None
) -> Path:
    runs = [Run(p) for p in run_paths]
    out_dir = Path(out_dir or runs[0].path)
    label_run = len(runs) > 1
    groups: dict[str, list[ResultRecord]] = {}
    for run in runs:
        groups |= run.groups(label_run)
    unfinished = incomplete_strategies(runs, label_run)
    common, left_out = common_questions(groups)
    dropped = {r.qid for rs in groups.values() for r in rs} - common
    groups = {k: [r for r in v if r.qid in common] for k, v in groups.items()}
    metrics = _metric_names(groups)
    cfg = runs[0].config
    ds = runs[0].meta.get("dataset") or {}
    parts = [f"# marag evaluation: {', '.join(r.name for r in runs)}", ""]
    parts.append(
        f"Dataset `{cfg['dataset']}`"
        + (f" ({ds['pool_note']}; answers in the {ds['answer_style']} style)" if ds.get("pool_note") else "")
        + f". {len(common)} questions answered by every strategy"
        + (f"; left out: {', '.join(f'{k}={n}' for k, n in left_out.items() if n)}" if any(left_out.values()) else "")
        + (f" (questions: {', '.join(sorted(dropped)[:10])}{', ...' if len(dropped) > 10 else ''})" if dropped else "")
        + f". Failed questions count as failures ({_failure_values(metrics)}). Cells: mean [95% bootstrap interval]."
    )
    if unfinished:
        parts.append("")
        parts.append("**Incomplete** (the run is in progress or was stopped; rerun its command to finish it): "
                     + ", ".join(f"{name} {done} of {total}" for name, (done, total) in unfinished.items())
                     + " questions answered; strategies with none are not in the tables.")  # fmt: skip
    if baseline is None:
        names = [n.split(":", 1)[-1] for n in groups]
        baseline = next((g for g, n in zip(groups, names) if n == "vanilla_rag"), next(iter(groups), None))
    parts += [""] + settings_section(runs, label_run)
    parts += quality_tables(groups, metrics, baseline if baseline in groups else None)
    if judge_part := judge_sections(groups, runs):
        parts += [""] + judge_part

    # cost
    parts += ["", "## Cost per question (answered questions)", ""]
    crow = []
    for name, rs in groups.items():
        ok = _ok(rs)
        cells = [name]
        for key, _ in COST_KEYS:
            vals = [r.cost.get(key, 0.0) for r in ok]
            cells.append(f"{sum(vals) / len(vals):.1f}" if vals else "–")
        crow.append(cells)
    parts.append(_table(["strategy"] + [label for _, label in COST_KEYS], crow))

    costs = cost_view(groups, metrics, cfg if not label_run else None)
    parts += [""] + quality_cost_section(costs)
    parts += [""] + cost_per_correct(groups)
    parts += [""] + failure_sections(groups)

    roles = _role_costs(runs, label_run, common)
    if roles:
        parts += ["", "### Per agent role (totals per question)", ""]
        rrows = [
            [s, role, f"{v['steps']:.2f}", f"{v['llm_calls']:.2f}", f"{v['prompt']:.0f}", f"{v['reused']:.0f}", f"{v['completion']:.0f}"]
            for (s, role), v in roles.items()
        ]
        parts.append(_table(["strategy", "role", "steps", "LLM calls", "prompt tok", "of which reused", "completion tok"], rrows))

    # categories
    head = next((m for m in HEADLINE if m in metrics), metrics[0] if metrics else None)
    cat_keys = sorted({k for rs in groups.values() for r in rs for k in r.metadata})
    cat_tables: dict[str, dict[str, dict[str, list[float]]]] = {}
    if head and cat_keys:
        parts += ["", f"## By category ({head})", ""]
        for key in cat_keys:
            per: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
            for name, rs in groups.items():
                values = metric_values(rs, head)
                for r in rs:
                    v = r.metadata.get(key)
                    if v is not None and r.qid in values:
                        per[str(v)][name].append(values[r.qid])
            cat_tables[key] = per
            names = list(groups)
            rows = [[val] + [f"{sum(per[val][n]) / len(per[val][n]):.3f} (n={len(per[val][n])})" if per[val].get(n) else "–" for n in names]
                    for val in category_order(per)]
            parts += [f"### {key}", "", _table([key] + names, rows), ""]

    if plots:
        parts += ["", "## Plots", ""]
        for png in _plots(groups, head, cat_tables, out_dir, costs):
            parts.append(f"![{png.stem}]({png.name})")

    path = out_dir / "report.md"
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path


class CostView:
    """The run on the quality-cost plane: a point per strategy, and auto's curve over
    its knob and the oracle router's point when the run holds what they need."""

    def __init__(self, metric: str, points: list[Point], curve: list[Point] | None, oracle: Point | None, tokens: dict[str, tuple[float, float, float]]):
        self.metric, self.points, self.curve, self.oracle, self.tokens = metric, points, curve, oracle, tokens


def cost_view(groups: dict[str, list[ResultRecord]], metrics: list[str], cfg: dict | None) -> CostView | None:
    """`cfg`: the run's config (one run; None for a comparison of runs, which gets no
    auto curve: its strategies come from different runs)."""
    metric = next((m for m in ("f1", *HEADLINE) if m in metrics), None)
    if metric is None or not groups:
        return None
    points, tokens = [], {}
    for name, rs in groups.items():
        outs = list(outcomes(rs, metric).values())
        if not outs:
            continue
        ok = _ok(rs)
        share = sum(r.cost.get("escalated", 0.0) for r in ok) / max(1, len(ok))
        points.append(point(name, outs, share))
        tokens[name] = tuple(sum(r.cost.get(k, 0.0) for r in ok) / max(1, len(ok)) for k in ("prompt_tokens_evaluated", "completion_tokens", "llm_calls"))  # type: ignore[assignment]
    curve = oracle = None
    if cfg is not None and "auto" in groups:
        from marag.strategies.auto import AutoConfig, first_pass_strategy

        auto_cfg = AutoConfig.model_construct(**{**AutoConfig().model_dump(), **((cfg.get("strategy_configs") or {}).get("auto") or {})})
        first = first_pass_strategy(auto_cfg.k)
        found = auto_curve(groups, metric, first, auto_cfg.agent) if first else None
        if found:
            curve, oracle = found
    return CostView(metric, points, curve, oracle, tokens)


def quality_cost_section(view: CostView | None) -> list[str]:
    if view is None or not view.points:
        return []
    rows = []
    for p in view.points:
        prompt, generated, calls = view.tokens.get(p.name, (0.0, 0.0, 0.0))
        rows.append([p.name, _fmt(p.quality, p.low, p.high), f"{p.seconds:.1f}", f"{prompt:.0f}", f"{generated:.0f}", f"{calls:.1f}",
                     f"{p.escalated:.0%}" if p.name.split(":")[-1].startswith("auto") else ""])  # fmt: skip
    out = ["## Quality and cost", "",
           f"Machine seconds a question: {RATES.label()} (the rates measured here with the default model on 2 cores).", "",
           _table(["strategy", view.metric, "s/q", "evaluated prompt tok/q", "generated tok/q", "calls/q", "sent on"], rows)]  # fmt: skip
    if view.curve:
        k = knee(view.curve)
        out += ["", f"auto's knob, from the recorded router scores (no model calls): sending none on {view.curve[0].quality:.3f} at "
                f"{view.curve[0].seconds:.1f} s/q, all {view.curve[-1].quality:.3f} at {view.curve[-1].seconds:.1f} s/q; "
                f"the knee sends {k.escalated:.0%} on: {k.quality:.3f} at {k.seconds:.1f} s/q."]  # fmt: skip
    if view.oracle:
        o = view.oracle
        out.append(f"Oracle router (a question goes on exactly when the agent scores higher): {o.quality:.3f} at {o.seconds:.1f} s/q, {o.escalated:.0%} sent on.")
    return out


def _role_costs(runs: list[Run], label_run: bool, qids: set[str]) -> dict[tuple[str, str], dict[str, float]]:
    totals: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    questions: dict[str, set[str]] = defaultdict(set)
    for run in runs:
        # a resumed run may hold an orphan trace of a re-answered question: latest wins
        latest = {(t.strategy, t.config.get("qid", t.id)): t for t in run.traces() if t.config.get("qid", t.id) in qids}
        for t in latest.values():
            s = f"{run.name}:{t.strategy}" if label_run else t.strategy
            questions[s].add(t.id)
            for st in t.steps:
                acc = totals[(s, st.agent)]
                acc["steps"] += 1
                acc["llm_calls"] += len(st.llm_calls)
                spent = [c for c in st.llm_calls if not c.cached]
                acc["prompt"] += sum(c.prompt_tokens for c in spent)
                acc["reused"] += sum(c.reused_prompt_tokens for c in spent)
                acc["completion"] += sum(c.completion_tokens for c in spent)
    return {k: {m: v / max(1, len(questions[k[0]])) for m, v in d.items()} for k, d in sorted(totals.items())}


def _plots(groups, head, cat_tables, out_dir: Path, costs: "CostView | None" = None) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # plots are optional; the tables are the report
        return []
    made = []
    if costs is not None and costs.points:
        p = out_dir / "quality_cost.png"
        if chart(costs.points, p, costs.metric, curve=costs.curve, oracle_point=costs.oracle):
            made.append(p)
    for key, per in cat_tables.items():
        vals = category_order(per)
        names = list(groups)
        if not vals:
            continue
        fig, ax = plt.subplots(figsize=(max(6, len(vals) * 1.2 * max(1, len(names) / 2)), 4.5))
        width = 0.8 / max(1, len(names))
        top = 0.0
        for i, n in enumerate(names):
            xs, ys, lows, highs, counts = [], [], [], [], []
            for j, v in enumerate(vals):
                if not per[v].get(n):
                    continue  # no question of this category for this strategy: no bar
                m, lo, hi = mean_ci(per[v][n])
                xs.append(j + i * width)
                ys.append(m)
                lows.append(m - lo)
                highs.append(hi - m)
                counts.append(len(per[v][n]))
            # an edge keeps a zero-height bar visible; whiskers are the bootstrap interval
            bars = ax.bar(xs, ys, width, label=n, edgecolor="black", linewidth=0.6, yerr=[lows, highs], capsize=2)
            for b, y, c in zip(bars, ys, counts):
                ax.annotate(f"{y:.2f}\nn={c}", (b.get_x() + b.get_width() / 2, y), textcoords="offset points", xytext=(0, 3),
                            ha="center", fontsize=6)  # fmt: skip
            top = max([top] + [y + h for y, h in zip(ys, highs)])
        ax.set_ylim(0, max(0.1, top * 1.25))
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


def summary_rows(run: Path | Run) -> list[dict[str, Any]]:
    """Per strategy means over the questions every strategy answered (failures count
    as 0, as in report.md), without intervals: a compact table for the terminal."""
    run = run if isinstance(run, Run) else Run(run)
    groups = run.groups(False)
    common, _ = common_questions(groups)
    out = []
    for name, rs in groups.items():
        rs = [r for r in rs if r.qid in common]
        ok = _ok(rs)
        row: dict[str, Any] = {"strategy": name, "n": len(rs), "errors": len(rs) - len(ok)}
        for m in _metric_names({name: rs}):
            vals = list(metric_values(rs, m).values())
            row[m] = sum(vals) / len(vals) if vals else None
        for key, _ in COST_KEYS:
            vals = [r.cost.get(key, 0.0) for r in ok]
            row[key] = sum(vals) / len(vals) if vals else None
        out.append(row)
    return out


# Column titles of the terminal table: the report's cost labels, metric names as they are.
SUMMARY_LABELS = {"n": "n", "errors": "errors", **dict(COST_KEYS)}


def summary_table(rows: list[dict[str, Any]]) -> str:
    """`summary_rows` as aligned text: one column per value any row has, each as wide
    as its whole title (never cut: cut titles turned "prompt_tokens" and
    "prompt_tokens_reused" into two equal headers) and its widest value."""
    if not rows:
        return ""
    keys = [k for k in dict.fromkeys(k for r in rows for k in r if k != "strategy") if any(r.get(k) is not None for r in rows)]
    titles = ["strategy"] + [SUMMARY_LABELS.get(k, k) for k in keys]
    seen: dict[str, int] = {}
    for i, t in enumerate(titles):  # two keys with one label (a metric named like a cost) stay apart
        seen[t] = seen.get(t, 0) + 1
        if seen[t] > 1:
            titles[i] = f"{t} ({keys[i - 1]})"

    costs = dict(COST_KEYS)

    def cell(key: str, v: Any) -> str:
        if v is None:
            return "–"
        if isinstance(v, float):
            return f"{v:.1f}" if key in costs else f"{v:.3f}"  # counts and seconds vs scores in [0, 1]
        return str(v)

    body = [[str(r["strategy"])] + [cell(k, r.get(k)) for k in keys] for r in rows]
    widths = [max(len(titles[i]), *(len(b[i]) for b in body)) for i in range(len(titles))]
    lines = [[t.ljust(w) if i == 0 else t.rjust(w) for i, (t, w) in enumerate(zip(titles, widths))]]
    lines += [[c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(b, widths))] for b in body]
    return "\n".join("  ".join(line).rstrip() for line in lines)
