"""A run directory's results: `results.jsonl`, one `ResultRecord` per answered (strategy,
question), appended the moment it is scored. Everything that reads or writes the file
goes through here: the runner (append, resume), reports, the server and viewer, the
self-training loop (`drop_torn_tail`, for its own JSONL files) and the benchmarks.

The file is the record's JSON, one per line. A question answered again (a failed one,
retried on resume) gets a new line: the latest line of a (strategy, question) is its
result. A run killed mid-write leaves a last line without its newline: `read_results`
skips it, `drop_torn_tail` cuts it off before the next append.

Run folders are other people's data too (copied runs, runs of older versions): a line
with a string `strategy` and `qid` is a record; fields it lacks take their defaults,
fields of the wrong shape are emptied (numbers that are not numbers dropped), and keys
this version does not know are kept (`model_extra`). A line that is not a record is
skipped by the readers, and `parse_result` says why.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from numbers import Real
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    ValidationError,
    field_validator,
)

RESULTS = "results.jsonl"  # the file's name in a run directory

Key = tuple[str, str]  # (strategy, question id)


class ResultRecord(BaseModel):
    """One answered (strategy, question), as `eval.answering.answer_one` writes it. A
    failed question has `error` (and `cause` "error", `cost` with its seconds) and no
    prediction, documents, metrics or trace."""

    model_config = ConfigDict(extra="allow")

    strategy: StrictStr
    qid: StrictStr
    question: str = ""
    prediction: str | None = None
    cause: str | None = None  # one of `eval.attribution.CAUSES`; `cause_of_record` checks it
    retrieved_doc_ids: list[str] = Field(default_factory=list)  # what the strategy read, in order
    source_doc_ids: list[str] = Field(default_factory=list)  # what the answer was written from
    metrics: dict[str, float] = Field(default_factory=dict)  # means over judge repeats
    metrics_std: dict[str, float] = Field(default_factory=dict)  # judged metrics: std across repeats
    judge_details: dict[str, Any] = Field(default_factory=dict)  # judged metrics: the first repeat's details
    judge_fallbacks: dict[str, dict[str, int]] = Field(default_factory=dict)  # metric -> {"decisions", "fallbacks"}
    cost: dict[str, float] = Field(default_factory=dict)  # the answer's usage totals and "seconds"
    trace_id: str | None = None  # its trace in traces.jsonl
    error: str | None = None  # "ErrorType: message" when the question raised
    answers: list[str] = Field(default_factory=list)  # gold answers
    gold_doc_ids: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)  # the question's categories (scalars)

    @property
    def key(self) -> Key:
        return (self.strategy, self.qid)

    # -- what a file may hold instead ----------------------------------------------------------
    @field_validator("question", mode="before")
    @classmethod
    def _text(cls, v: Any) -> str:
        return "" if v is None else str(v)

    @field_validator("prediction", "cause", "trace_id", "error", mode="before")
    @classmethod
    def _optional_text(cls, v: Any) -> str | None:
        return None if v is None else str(v)

    @field_validator("retrieved_doc_ids", "source_doc_ids", "answers", "gold_doc_ids", mode="before")
    @classmethod
    def _texts(cls, v: Any) -> list[str]:
        return [str(x) for x in v] if isinstance(v, list) else []

    @field_validator("metrics", "metrics_std", "cost", mode="before")
    @classmethod
    def _numbers(cls, v: Any) -> dict[str, float]:
        return {str(k): x for k, x in v.items() if _is_number(x)} if isinstance(v, dict) else {}

    @field_validator("judge_fallbacks", mode="before")
    @classmethod
    def _counts(cls, v: Any) -> dict[str, dict[str, int]]:
        if not isinstance(v, dict):
            return {}
        return {str(k): {str(n): c for n, c in d.items() if isinstance(c, int) and not isinstance(c, bool)}
                for k, d in v.items() if isinstance(d, dict)}  # fmt: skip

    @field_validator("judge_details", "metadata", mode="before")
    @classmethod
    def _table(cls, v: Any) -> dict[str, Any]:
        return v if isinstance(v, dict) else {}

    def line(self) -> str:
        """The record as one line of results.jsonl (without the newline): the fields it was
        made or read with, and no others, so a record written again reads the same."""
        return json.dumps(self.model_dump(mode="json", exclude_unset=True), ensure_ascii=False)


def _is_number(x: Any) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def parse_result(line: str) -> ResultRecord:
    """One line of results.jsonl. ValueError, saying why, when it is not a result record
    (not JSON, such as a torn last line; not an object with a string strategy and qid)."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at character {exc.pos}): {line[:60]!r}") from None
    if not isinstance(data, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(data), "a number")
        raise ValueError(f"not a result record: {kind}, not a JSON object")  # noqa: TRY004 - a line read as a value
    try:
        return ResultRecord.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err.get("loc", ())) or "record"
        raise ValueError(f"not a result record: {field}: {err.get('msg')}") from None


def latest_results(lines: Iterable[str]) -> tuple[dict[Key, ResultRecord], int]:
    """The latest record per (strategy, question id) among `lines`, and how many lines
    were not records (blank lines are neither)."""
    out: dict[Key, ResultRecord] = {}
    bad = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            r = parse_result(line)
        except ValueError:
            bad += 1
            continue
        out[r.key] = r
    return out, bad


def scan_results(path: Path) -> tuple[dict[Key, ResultRecord], int]:
    """`latest_results` of a results file (none when it does not exist); bytes that are
    not UTF-8 are replaced, never fatal."""
    if not path.exists():
        return {}, 0
    return latest_results(path.read_bytes().decode("utf-8", errors="replace").splitlines())


def read_results(path: Path) -> dict[Key, ResultRecord]:
    """Latest record per (strategy, question id); lines that are not records (a torn last
    line, killed mid-write) are skipped."""
    return scan_results(path)[0]


def append_result(path: Path, record: ResultRecord) -> None:
    """Add one record to the end of a results file (one write of one whole line)."""
    with path.open("a", encoding="utf-8") as f:
        f.write(record.line() + "\n")


def drop_torn_tail(path: Path) -> None:
    """A run killed mid-write leaves a last line without its newline: cut it off, or the
    next appended record would be glued onto it and lost. For any JSONL file that is
    only appended to (results, traces, the training loop's files)."""
    if not path.exists():
        return
    with path.open("rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)
