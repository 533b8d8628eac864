"""Examples that teach the reader to read (RA-DIT's reader fine-tuning, on a CPU budget).

The answers are lost in the final read: with both gold pages in hand the 1.5B names the
bridge entity, the other candidate or "Yes" for a "no", whichever strategy fed it. So the
examples come from runs already made on training questions: each answered question's
final read (the last call of an answer-writing role: `vanilla_rag.answerer`,
`unirag.final_answer`, ...) with the passages the strategy gave it, as the prompt, and
the gold short answer, in the reply format the reader writes (`{"answer": ...}`), as the
reply. A question whose passages hold none of its gold answers is left out (the reader
would learn to answer from nowhere), unless the gold is yes or no (a verdict is read, not
found). The same question read from other passages (another strategy, another run) is
another example, as RA-DIT trains on several retrieved contexts per question.

Every example's `role` is the reader it came from; the adapter applies to the roles of
its examples (`adapter.json`), so one adapter serves each strategy's final read.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from marag.errors import MaragError
from marag.eval.report import Run
from marag.strategies import STRATEGIES
from marag.trace import Trace

MAX_GOLD_WORDS = 12  # longer gold answers are long-form references, not what a short read writes
VERDICTS = frozenset({"yes", "no"})


def reader_roles() -> frozenset[str]:
    """Every strategy's answer-writing roles, qualified (`unirag.final_answer`)."""
    from marag.train.loop import answer_roles

    return frozenset(r for name in STRATEGIES.names() for r in answer_roles(name))


def _plain(text: str) -> str:
    return " ".join("".join(c if c.isalnum() else " " for c in text.lower()).split())


def _final_read(trace: Trace, readers: frozenset[str]) -> tuple[str, list[dict[str, str]]] | None:
    """(role, messages) of the trace's last answer-writing call that returned a reply."""
    family = STRATEGIES.get(trace.strategy).family() if trace.strategy in STRATEGIES else trace.strategy
    for step in reversed(trace.steps):
        role = step.role or f"{family}.{step.agent}"
        if role not in readers or step.status in ("fallback", "skipped"):
            continue
        for call in reversed(step.llm_calls):
            if not call.error and call.response and call.messages:
                return role, call.messages
    return None


def _gold_in(golds: list[str], prompt: str) -> str | None:
    """The first gold answer the prompt holds (a verdict counts as held)."""
    text = f" {_plain(prompt)} "
    for gold in golds:
        plain = _plain(gold)
        if plain in VERDICTS or (plain and f" {plain} " in text):
            return gold.strip()
    return None


def reader_examples(run_dirs: Iterable[Path]) -> tuple[list[dict[str, Any]], Counter]:
    """The examples of the runs' final reads, and a count of what was kept and left out
    (by reason), for the command to print."""
    readers = reader_roles()
    out: list[dict[str, Any]] = []
    tally: Counter = Counter()
    for run_dir in run_dirs:
        run = Run(Path(run_dir))
        by_trace = {r.trace_id: r for r in run.results if r.trace_id and r.error is None}
        for trace in run.traces():
            rec = by_trace.get(trace.id)
            if rec is None:
                continue
            golds = [a for a in rec.answers if a.strip() and len(a.split()) <= MAX_GOLD_WORDS]
            if not golds:
                tally["no short gold answer"] += 1
                continue
            read = _final_read(trace, readers)
            if read is None:
                tally["no final read"] += 1
                continue
            role, messages = read
            prompt = "\n".join(m.get("content", "") for m in messages if m.get("role") != "assistant")
            gold = _gold_in(golds, prompt)
            if gold is None:
                tally["gold not in the passages"] += 1
                continue
            reply = json.dumps({"answer": gold}, ensure_ascii=False)
            out.append({"messages": [{**m, "weight": 0} for m in messages] + [{"role": "assistant", "content": reply, "weight": 1}],
                        "role": role, "qid": rec.qid, "run": run.name,
                        "was_right": _plain(rec.prediction or "") == _plain(gold)})  # fmt: skip
            tally["kept"] += 1
    return out, tally


def write_reader_examples(run_dirs: Iterable[Path], out: Path) -> tuple[Path, Counter]:
    rows, tally = reader_examples(run_dirs)
    if not rows:
        raise MaragError("no reader examples in these runs: " + (", ".join(f"{n} {why}" for why, n in tally.items()) or "no answered questions"),
                         hint="give runs on questions with short gold answers (marag eval DATASET ... on training questions)")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(out)
    return out, tally
