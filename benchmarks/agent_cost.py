"""What an agent strategy costs per question, before and after a change, in one run.

    python benchmarks/agent_cost.py --questions 20                 # before = git ref below
    python benchmarks/agent_cost.py --before-ref 4296466 --variant pages=mrag.judge_pages=true

Each side answers the same `hotpotqa_train100` questions with `marag eval` in a
subprocess, one strategy at a time with `--concurrency` questions in flight (so
questions/minute is that strategy's own). "before" runs the code of `--before-ref`
from a temporary git worktree; "after" runs this checkout; each `--variant` runs this
checkout with extra `--set` overrides (one variant per change to measure it alone).

Framework overhead: every LLM call of a run is cached on disk (`--cache-dir`), then the
same eval runs again from that cache, one question at a time: the control flow is
identical and the model costs nothing, so the replay's per-question seconds minus its
retrieval seconds are the time spent outside LLM calls and retrieval (prompt building,
parsing, validation, tracing, and the cache lookups themselves: a slight
over-estimate). The first questions of a process also pay one-time warm-ups (compiling
the BM25 kernels, loading the embedder), so the median question's time stands for each
question. The share is of the real run's wall time without the process start
(imports, index loading: the replay's wall time minus its questions' seconds).

It prints, per side and strategy: seconds/question, questions/minute, prompt tokens
evaluated and reused, completion tokens, LLM calls, searches, distinct queries, docs
read, F1 and the recall of gold documents in what the strategy returned, per-role
costs, and the paired bootstrap interval of each side's difference from "before". Not
a timed test: the machine's load changes the seconds, not the tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from marag.eval.rundir import RESULTS, ResultRecord, read_results

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BEFORE = "4296466"  # the last commit before the agent-loop speed work (issue 8)


def run_eval(src: Path, strategy: str, n: int, run_dir: Path, cache: Path, sets: list[str], args, concurrency: int) -> float:
    """One `marag eval` in a subprocess on the code under `src`; its wall seconds."""
    cmd = [
        sys.executable, "-m", "marag.cli", "eval", args.dataset, "--strategies", strategy, "--limit", str(n),
        "--runs", str(run_dir.parent), "--run-id", run_dir.name, "--cache-dir", str(cache),
        "--concurrency", str(concurrency), "--threads", str(args.threads), "-q",
    ]  # fmt: skip
    for s in sets:
        cmd += ["--set", s]
    env = {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def load(run_dir: Path) -> tuple[list[ResultRecord], list[dict]]:
    results = list(read_results(run_dir / RESULTS).values())
    traces = [json.loads(line) for line in (run_dir / "traces.jsonl").read_text().splitlines() if line.strip()]
    return results, traces


def roles(traces: list[dict]) -> dict[str, dict[str, float]]:
    acc: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for t in traces:
        for s in t["steps"]:
            for c in s["llm_calls"]:
                a = acc[s["agent"]]
                a["calls"] += 1
                a["evaluated"] += c["prompt_tokens"] - c.get("reused_prompt_tokens", 0)
                a["reused"] += c.get("reused_prompt_tokens", 0)
                a["completion"] += c["completion_tokens"]
    n = max(1, len(traces))
    return {r: {k: v / n for k, v in d.items()} for r, d in sorted(acc.items())}


def recall(r: ResultRecord) -> float:
    gold = set(r.gold_doc_ids)
    return len(gold & set(r.retrieved_doc_ids)) / len(gold) if gold else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=20)
    ap.add_argument("--dataset", default="hotpotqa_train100")
    ap.add_argument("--strategies", default="vanilla_rag,mrag")
    ap.add_argument("--before-ref", default=DEFAULT_BEFORE, help="git ref of the 'before' code ('' to skip)")
    ap.add_argument("--variant", action="append", default=[], help="NAME=STRATEGY.KEY=VALUE[,...]: this checkout with overrides")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="keep the run directories here (default: a temp dir)")
    args = ap.parse_args()

    from marag.eval.stats import paired_diff_ci  # this checkout's statistics for every side

    work = args.out or Path(tempfile.mkdtemp(prefix="marag-agent-cost-"))
    work.mkdir(parents=True, exist_ok=True)
    sides: dict[str, tuple[Path, list[str]]] = {}
    worktree = None
    if args.before_ref:
        worktree = work / "before-src"
        if not worktree.exists():
            subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.before_ref], cwd=REPO, check=True,
                           stdout=subprocess.DEVNULL)  # fmt: skip
        sides["before"] = (worktree / "src", [])
    sides["after"] = (REPO / "src", [])
    for v in args.variant:
        name, _, sets = v.partition("=")
        sides[name] = (REPO / "src", [s for s in sets.split(",") if s])

    strategies = [s for s in args.strategies.split(",") if s]
    rows: dict[tuple[str, str], dict] = {}
    try:
        for strategy in strategies:
            for side, (src, sets) in sides.items():
                mine = [s for s in sets if s.startswith(strategy + ".")]
                run_dir, cache = work / f"{side}-{strategy}", work / f"cache-{side}-{strategy}"
                wall = run_eval(src, strategy, args.questions, run_dir, cache, mine, args, args.concurrency)
                replay_dir = work / f"{side}-{strategy}-replay"
                replay = run_eval(src, strategy, args.questions, replay_dir, cache, mine, args, 1)
                results, traces = load(run_dir)
                replayed, _ = load(replay_dir)
                in_questions = sum(r.cost.get("seconds", 0.0) for r in replayed)
                own = sorted(r.cost.get("seconds", 0.0) - r.cost.get("search_latency_s", 0.0) for r in replayed)
                framework = own[len(own) // 2] * len(own) if own else 0.0
                rows[(side, strategy)] = {
                    "wall": wall, "results": results, "traces": traces,
                    "overhead": framework / max(1e-9, wall - (replay - in_questions)),
                }  # fmt: skip
                print(f"done: {side} {strategy} ({wall:.0f} s, replay {replay:.0f} s)", file=sys.stderr, flush=True)
    finally:
        if worktree is not None and args.out is None:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, check=False)

    def mean(rs: list[ResultRecord], key: str) -> float:
        vals = [r.cost.get(key, 0.0) for r in rs if not r.error]
        return sum(vals) / len(vals) if vals else float("nan")

    print(f"\n## Cost per question: {args.dataset}, {args.questions} questions, {args.concurrency} in flight, "
          f"{args.threads} threads, local model (before = {args.before_ref or '-'}, after = this checkout)\n")  # fmt: skip
    head = ["side", "strategy", "s/question", "q/min", "prompt evaluated", "prompt reused", "completion", "LLM calls",
            "searches", "distinct queries", "docs read", "F1", "recall of S", "overhead"]  # fmt: skip
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for (side, strategy), d in rows.items():
        rs = d["results"]
        ok = [r for r in rs if not r.error]
        evaluated = mean(ok, "prompt_tokens") - mean(ok, "prompt_tokens_reused") if ok and "prompt_tokens_reused" in ok[0].cost else mean(ok, "prompt_tokens")
        overhead = d["overhead"]
        cells = [
            side, strategy, f"{mean(ok, 'seconds'):.1f}", f"{60 * len(rs) / d['wall']:.2f}", f"{evaluated:.0f}",
            f"{mean(ok, 'prompt_tokens_reused'):.0f}" if ok and "prompt_tokens_reused" in ok[0].cost else "–",
            f"{mean(ok, 'completion_tokens'):.0f}", f"{mean(ok, 'llm_calls'):.1f}", f"{mean(ok, 'searches'):.1f}",
            f"{mean(ok, 'distinct_queries'):.1f}" if ok and "distinct_queries" in ok[0].cost else "–",
            f"{mean(ok, 'docs_read'):.1f}" if ok and "docs_read" in ok[0].cost else "–",
            f"{sum(r.metrics.get('f1', 0) for r in ok) / max(1, len(ok)):.3f}",
            f"{sum(recall(r) for r in ok) / max(1, len(ok)):.3f}", f"{100 * overhead:.1f}%",
        ]  # fmt: skip
        print("| " + " | ".join(cells) + " |")

    if "before" in sides:
        print("\n## Difference from before, paired by question (mean [95% bootstrap interval])\n")
        print("| side | strategy | n | F1 | recall of S | s/question | prompt evaluated/question |\n|---|---|---|---|---|---|---|")
        for (side, strategy), d in rows.items():
            if side == "before":
                continue
            base = {r.qid: r for r in rows[("before", strategy)]["results"]}
            pairs = [(r, base[r.qid]) for r in d["results"] if r.qid in base]

            def ci(f) -> str:
                m, lo, hi = paired_diff_ci([f(a) for a, _ in pairs], [f(b) for _, b in pairs])
                return f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}]"

            def evaluated(r: ResultRecord) -> float:
                return r.cost.get("prompt_tokens", 0) - r.cost.get("prompt_tokens_reused", 0)

            print(f"| {side} | {strategy} | {len(pairs)} | {ci(lambda r: r.metrics.get('f1', 0.0))} | "
                  f"{ci(recall)} | {ci(lambda r: r.cost.get('seconds', 0.0))} | {ci(evaluated)} |")  # fmt: skip

    print("\n## Per role (per question): LLM calls, prompt evaluated, prompt reused, completion\n")
    print("| side | strategy | role | calls | prompt evaluated | prompt reused | completion |\n|---|---|---|---|---|---|---|")
    for (side, strategy), d in rows.items():
        for role, v in roles(d["traces"]).items():
            print(f"| {side} | {strategy} | {role} | {v.get('calls', 0):.1f} | {v.get('evaluated', 0):.0f} | "
                  f"{v.get('reused', 0):.0f} | {v.get('completion', 0):.0f} |")  # fmt: skip
    if args.out is None:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"\nrun directories: {work}")


if __name__ == "__main__":
    main()
