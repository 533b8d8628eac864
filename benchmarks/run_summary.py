"""Per-question summaries of evaluation runs, small enough to keep in the repository, and
paired differences between any two of them.

    python benchmarks/run_summary.py save runs/<id> [runs/<id> ...]   # -> benchmarks/runs/<id>.tsv
    python benchmarks/run_summary.py pair A B --strategy unirag [--baseline-strategy S]

A run directory (`marag eval`) holds traces and whole records (megabytes); the runs a
RESULTS.md section reports are worth pairing with later runs made on another machine,
so `save` keeps one row per (strategy, question): the scores, the cost (LLM calls and
prompt tokens evaluated, as the run recorded them: 0 for a call replayed from a cache)
and the answer. `pair` reads run directories or saved summaries alike and prints the
paired F1 difference (bootstrap 95%) of A's strategy minus B's, with the questions whose
F1 differs.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

from marag.eval.stats import paired_diff_ci

FIELDS = ["strategy", "qid", "em", "f1", "accuracy", "overlong", "sources_recall", "llm_calls", "prompt_tokens_evaluated", "prediction"]
HERE = Path(__file__).parent / "runs"


def rows_of(path: Path) -> list[dict]:
    """The rows of a run directory's results.jsonl, or of a saved summary."""
    if path.is_dir():
        out = []
        for line in (path / "results.jsonl").read_text().splitlines():
            r = json.loads(line)
            m, c = r.get("metrics") or {}, r.get("cost") or {}
            out.append(
                {"strategy": r["strategy"], "qid": r["qid"], **{k: m.get(k, "") for k in FIELDS[2:7]},
                 "llm_calls": c.get("llm_calls", ""), "prompt_tokens_evaluated": c.get("prompt_tokens_evaluated", ""),
                 "prediction": " ".join(str(r.get("prediction") or "").split())}  # fmt: skip
            )
        return out
    with path.open(newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def save(run: Path, to: Path = HERE) -> Path:
    to.mkdir(parents=True, exist_ok=True)
    dest = to / f"{run.name}.tsv"
    rows = sorted(rows_of(run), key=lambda r: (r["strategy"], r["qid"]))
    tmp = dest.with_suffix(".tsv.tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, FIELDS, delimiter="\t", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(dest)
    return dest


def pair(a: Path, b: Path, strategy: str, other: str | None) -> None:
    def f1s(path: Path, strat: str) -> dict[str, tuple[float, str]]:
        # a question that ended in an error has no score: paired on the questions both scored
        return {r["qid"]: (float(r["f1"]), r["prediction"]) for r in rows_of(path) if r["strategy"] == strat and r["f1"] != ""}

    A, B = f1s(a, strategy), f1s(b, other or strategy)
    ids = sorted(set(A) & set(B))
    if not ids:
        raise SystemExit(f"no question answered by {strategy} in {a} and by {other or strategy} in {b}")
    m, lo, hi = paired_diff_ci([A[i][0] for i in ids], [B[i][0] for i in ids])
    better, worse = sum(A[i][0] > B[i][0] for i in ids), sum(A[i][0] < B[i][0] for i in ids)
    print(f"n={len(ids)}: A {statistics.fmean(A[i][0] for i in ids):.3f}, B {statistics.fmean(B[i][0] for i in ids):.3f}, "
          f"A - B {m:+.3f} [{lo:+.3f}, {hi:+.3f}] ({better} better, {worse} worse)")  # fmt: skip
    for i in ids:
        if A[i][0] != B[i][0]:
            print(f"  {i}: {A[i][0]:.2f} {A[i][1]!r} vs {B[i][0]:.2f} {B[i][1]!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save", help="write benchmarks/runs/<run>.tsv for each run directory")
    s.add_argument("runs", nargs="+", type=Path)
    s.add_argument("--to", type=Path, default=HERE, help="directory of the summaries (default: benchmarks/runs)")
    p = sub.add_parser("pair", help="paired F1 of A's strategy minus B's (run directories or summaries)")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--strategy", required=True)
    p.add_argument("--baseline-strategy", help="B's strategy (default: the same as A's)")
    args = ap.parse_args()
    if args.cmd == "save":
        for run in args.runs:
            print(save(run, args.to))
    else:
        pair(args.a, args.b, args.strategy, args.baseline_strategy)


if __name__ == "__main__":
    main()
