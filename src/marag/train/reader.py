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

The reads come from `marag eval` runs (results and traces) and from self-training
directories: a teacher's sampled trajectories (`trajectories.jsonl` of `marag train
sample`, or every source of a `marag train run` directory) are final reads of training
questions too, each over the passages its own search found. A read met twice (the same
messages: another trajectory that found the same passages) is kept once.

Every example's `role` is the reader it came from; the adapter applies to the roles of
its examples (`adapter.json`), so one adapter serves each strategy's final read.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marag.errors import MaragError
from marag.eval.report import Run
from marag.strategies import STRATEGIES
from marag.trace import Trace
from marag.train.loop import _lines  # a JSONL file's records (a torn last line skipped)

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


@dataclass(slots=True)
class _Answered:
    """One answered question as the reads need it: its gold answers, the answer given,
    the trace of how it was given, and where it came from (run, or source/trajectory)."""

    qid: str
    answers: list[str]
    prediction: str
    trace: Trace
    origin: str


def _trajectory_files(directory: Path) -> list[Path]:
    """A training directory's trajectories, or those of each source of a `train run`."""
    if (directory / "trajectories.jsonl").is_file():
        return [directory / "trajectories.jsonl"]
    return sorted((directory / "sources").glob("*/trajectories.jsonl"))


def _answered(directory: Path) -> Iterator[_Answered]:
    """The answered questions of an eval run or of a self-training directory."""
    directory = Path(directory)
    files = _trajectory_files(directory)
    if files:
        for path in files:
            for r in _lines(path):
                yield _Answered(r["qid"], r.get("answers") or [], r.get("answer") or "",
                                Trace.model_validate(r["trace"]), f"{path.parent.name}/t{r['t']}")  # fmt: skip
        return
    if not (directory / "config.json").exists():
        raise MaragError(f"no run or trajectories at {directory}",
                         hint="give `marag eval` run directories or `marag train` directories (trajectories.jsonl)")  # fmt: skip
    run = Run(directory)
    by_trace = {r.trace_id: r for r in run.results if r.trace_id and r.error is None}
    for trace in run.traces():
        rec = by_trace.get(trace.id)
        if rec is not None:
            yield _Answered(rec.qid, rec.answers, rec.prediction or "", trace, run.name)


def reader_examples(run_dirs: Iterable[Path]) -> tuple[list[dict[str, Any]], Counter]:
    """The examples of the runs' final reads, and a count of what was kept and left out
    (by reason), for the command to print."""
    readers = reader_roles()
    out: list[dict[str, Any]] = []
    tally: Counter = Counter()
    seen: set[str] = set()
    for run_dir in run_dirs:
        for rec in _answered(Path(run_dir)):
            golds = [a for a in rec.answers if a.strip() and len(a.split()) <= MAX_GOLD_WORDS]
            if not golds:
                tally["no short gold answer"] += 1
                continue
            read = _final_read(rec.trace, readers)
            if read is None:
                tally["no final read"] += 1
                continue
            role, messages = read
            prompt = "\n".join(m.get("content", "") for m in messages if m.get("role") != "assistant")
            gold = _gold_in(golds, prompt)
            if gold is None:
                tally["gold not in the passages"] += 1
                continue
            # the same passages read for the same question would only weigh that read twice
            key = hashlib.sha256(json.dumps([role, messages], sort_keys=True).encode()).hexdigest()
            if key in seen:
                tally["the same read again"] += 1
                continue
            seen.add(key)
            reply = json.dumps({"answer": gold}, ensure_ascii=False)
            out.append({"messages": [{**m, "weight": 0} for m in messages] + [{"role": "assistant", "content": reply, "weight": 1}],
                        "role": role, "qid": rec.qid, "run": rec.origin,
                        "was_right": _plain(rec.prediction) == _plain(gold)})  # fmt: skip
            tally["kept"] += 1
    return out, tally


def write_reader_examples(run_dirs: Iterable[Path], out: Path) -> tuple[Path, Counter]:
    rows, tally = reader_examples(run_dirs)
    if not rows:
        raise MaragError("no reader examples in these runs: " + (", ".join(f"{n} {why}" for why, n in tally.items()) or "no answered questions"),
                         hint="give runs or trajectories on questions with short gold answers (marag eval DATASET ... on training questions)")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(out)
    return out, tally
