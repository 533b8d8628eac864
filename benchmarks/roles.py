"""Does every role do what its protocol means? Read from the traces of real runs (no
model is called): for each strategy's role, how many steps it took, how many ended in a
fallback or an error, and the checks that apply to it:

- gold kept: a role that selects from passages it is shown (KAIR's context filter,
  UniRAG's reflector, mRAG's page judge) keeps every gold passage among them ("all");
  the two that judge passages against one query, not the whole question, also count
  keeping at least one ("any": a query may be after one hop of two);
- no guessed answer: a query a role writes does not contain a gold answer that neither
  the question nor any passage read before it contains (a guess written into the query);
- gaps as text: KAIR's open gaps are questions, not indices such as "1" or "/70's";
- closed book: the final answer was written with no passage read (per strategy), and
  whether the answer's details say so.

    python benchmarks/roles.py runs/<id> [runs/<id> ...]

A check counts only steps it applies to (a gold passage shown, a query written); "n/a"
means none did.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from marag.eval.metrics.lexical import normalize_answer
from marag.eval.rundir import RESULTS, ResultRecord, read_results

DONT_KNOW = ("don't know", "do not know", "not enough information", "cannot be determined", "answer not found")


@dataclass
class Seen:
    """What a question's steps have read so far (normalized text), and its gold."""

    question: str
    gold_titles: set[str]
    answers: list[str]
    text: str = ""

    def guessed(self, query: str) -> bool:
        q = f" {normalize_answer(query)} "
        for a in map(normalize_answer, self.answers):
            if len(a) < 3 or a in ("yes", "no"):
                continue  # too short to tell a guess from a coincidence
            if f" {a} " in q and f" {a} " not in f" {normalize_answer(self.question)} " and a not in self.text:
                return True
        return False


@dataclass
class Tally:
    steps: int = 0
    not_ok: int = 0
    checks: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))  # name -> [passed, applied]

    def check(self, name: str, passed: bool | None) -> None:
        if passed is not None:
            self.checks[name][1] += 1
            self.checks[name][0] += bool(passed)


def _title(p: dict) -> str:
    return p.get("title") or _doc(p)


def _doc(p: dict) -> str:
    """The document a shown passage is a chunk of (chunk ids are `<doc id>#<n>`; MuSiQue's
    doc ids carry a hash after the title, so titles alone do not name them)."""
    return str(p.get("id", "")).rsplit("#", 1)[0] if p.get("id") else p.get("title", "")


def _gold_kept(shown: list[dict], kept: set[int], seen: Seen, per_query: bool = False) -> dict[str, bool | None]:
    """None when no gold passage was shown; else whether all shown gold ones were kept
    (and with `per_query`, whether any was); `kept`: 1-based positions."""
    gold = {i for i, p in enumerate(shown, 1) if _doc(p) in seen.gold_titles}
    out = {"gold kept (all)": None if not gold else gold <= kept}
    if per_query:
        out["gold kept (any)"] = None if not gold else bool(gold & kept)
    return out


# role checks: agent name as the trace records it -> fn(inputs, outputs, seen) -> {check: passed | None}
Check = Callable[[dict, dict, Seen], dict[str, bool | None]]


def kair_filter(i, o, seen):
    return _gold_kept(i.get("passages", []), set(o.get("keep", [])), seen)


def unirag_reflector(i, o, seen):
    kept = {e.get("doc") for e in o.get("evidence", [])} if o.get("found") else set()
    return _gold_kept(i.get("documents", []), kept, seen, per_query=True)


def mrag_judge(i, o, seen):
    kept = {n for n, j in enumerate(o.get("judgements", []), 1) if j.get("relevant")}
    return _gold_kept(i.get("documents", []), kept, seen, per_query=True)


def kair_update(i, o, seen):
    gaps = o.get("new_gaps", []) + [f["text"] for f in o.get("facts", []) if f.get("status") == "required"]
    return {"gaps as text": (all(len(re.findall(r"[A-Za-z]{2,}", g)) >= 2 for g in gaps) if gaps else None)}


def queries(*paths: str) -> Check:
    """The queries at these output paths ("query", "candidates.query", "questions")."""

    def check(i, o, seen):
        found = []
        for path in paths:
            head, _, tail = path.partition(".")
            value = o.get(head)
            items = value if isinstance(value, list) else [value]
            found += [(x.get(tail) if tail else x) for x in items if x]
        found = [q for q in found if isinstance(q, str) and q.strip()]
        return {"no guessed answer": (not any(seen.guessed(q) for q in found)) if found else None}

    return check


CHECKS: dict[str, Check] = {
    "context_filter": kair_filter,
    "knowledge_update": kair_update,
    "query_planner": queries("candidates.query"),
    "reflector": unirag_reflector,
    "searcher.judge": mrag_judge,
    "searcher.query": queries("query"),
    "searcher.next": queries("new_query"),
    "planner": queries("query"),  # UniRAG's thought + query (mRAG's planner writes steps: none)
    "splitter": queries("questions"),
}


def _read(i: dict) -> str:
    docs = i.get("passages") or i.get("documents") or []
    return " ".join(normalize_answer(f"{_title(d)} {d.get('text', '')}") for d in docs if isinstance(d, dict))


def _final(t: dict) -> tuple[bool, bool]:
    """(closed book, said so): no passage read for the final answer, and whether the
    answer or its step says it (a don't-know answer, or a `closed_book` flag)."""
    closed = not t.get("read")
    said = any(d in (t.get("answer") or "").lower() for d in DONT_KNOW) or any(
        (s.get("inputs") or {}).get("closed_book") or (s.get("outputs") or {}).get("closed_book") for s in t["steps"]
    )
    return closed, said


def tally(paths: list[Path]) -> Iterator[tuple[str, str, Tally]]:
    roles: dict[tuple[str, str], Tally] = defaultdict(Tally)
    for p in paths:
        results: dict[tuple[str, str], ResultRecord] = {(r.strategy, r.trace_id): r for r in read_results(p / RESULTS).values()}
        for line in (p / "traces.jsonl").read_text().splitlines():
            t = json.loads(line)
            r = results.get((t["strategy"], t["id"]))
            if r is None or r.error:
                continue
            seen = Seen(t["question"], set(r.gold_doc_ids), list(r.answers))
            for s in t["steps"]:
                i, o = s.get("inputs") or {}, s.get("outputs") or {}
                if s.get("llm_calls"):
                    tl = roles[(t["strategy"], s["agent"])]
                    tl.steps += 1
                    tl.not_ok += s["status"] != "ok"
                    if s["status"] == "ok" and (fn := CHECKS.get(s["agent"])):
                        for name, passed in fn(i, o, seen).items():
                            tl.check(name, passed)
                seen.text += " " + _read(i)
            closed, said = _final(t)
            final = roles[(t["strategy"], "(final answer)")]
            final.steps += 1
            final.check("read a passage", not closed)
            if closed:
                final.check("closed book said so", said)
    yield from ((s, a, t) for (s, a), t in sorted(roles.items()))


def main(args: list[str]) -> None:
    if not args:
        sys.exit(__doc__)
    print("| strategy | role | steps | fallback or error | check | passed |")
    print("|---|---|---|---|---|---|")
    for strategy, agent, t in tally([Path(a) for a in args]):
        checks = [f"{k}: {p}/{n}" for k, (p, n) in t.checks.items()] or ["–"]
        shown = "–" if agent == "(final answer)" else f"{t.not_ok}/{t.steps}"
        print(f"| {strategy} | {agent} | {t.steps} | {shown} | " + "; ".join(checks) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
