"""Search progress per question, from a run's traces: distinct queries, distinct
documents read, searches that re-read a page already read, recall of the gold
documents in what the strategy returned (S), and LLM calls. Works on runs made by any
marag version (it reads only the searches in the traces).

    python benchmarks/search_progress.py runs/<id> [runs/<id> ...]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from marag.eval.rundir import RESULTS, read_results


def norm(q: str) -> str:
    return " ".join(q.lower().split())


def main(paths: list[str]) -> None:
    print("| run | strategy | n | distinct queries | docs read | repeated searches | recall of S | LLM calls |")
    print("|---|---|---|---|---|---|---|---|")
    for p in map(Path, paths):
        results = {(r.strategy, r.trace_id): r for r in read_results(p / RESULTS).values() if not r.error}
        acc: dict[str, list[tuple]] = defaultdict(list)
        for line in (p / "traces.jsonl").read_text().splitlines():
            t = json.loads(line)
            r = results.get((t["strategy"], t["id"]))
            if r is None:
                continue
            searches = [c for s in t["steps"] for c in s["searches"]]
            pages = [(norm(c["query"]), c["offset"]) for c in searches]
            docs = {h["chunk_id"] for c in searches for h in c["hits"]}
            gold = set(r.gold_doc_ids)
            recall = len(gold & set(r.retrieved_doc_ids)) / len(gold) if gold else 0.0
            calls = sum(len(s["llm_calls"]) for s in t["steps"])
            acc[t["strategy"]].append((len({q for q, _ in pages}), len(docs), len(pages) - len(set(pages)), recall, calls))
        for strategy, rows in acc.items():
            n = len(rows)
            means = [sum(r[i] for r in rows) / n for i in range(5)]
            print(f"| {p.name} | {strategy} | {n} | {means[0]:.2f} | {means[1]:.2f} | {means[2]:.2f} | {means[3]:.3f} | {means[4]:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
