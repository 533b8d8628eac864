"""`marag view RUN --out DIR`: the viewer's pages for one run as static HTML files (the
run page, every trajectory, every question's strategies side by side, the plots), so a
run can be read, shared or archived without a server.

The run is read through the same jail as the server's (`RunStore`): a file of the run
that links out of its folder is skipped with a warning, never copied. The pages are
written only inside `out`, and never through a link found there (a run folder from
someone else could hold `view/index.html` pointing at one of your files).
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from marag.errors import MaragError
from marag.eval.rundir import ResultRecord
from marag.serve import pages
from marag.serve.store import RunStore


def write_static(run_dir: str | Path, out: str | Path) -> Path:
    run_dir = Path(run_dir).resolve()
    store = RunStore(run_dir.parent)
    run_id = run_dir.name
    meta, results, plots = store.meta(run_id), store.results(run_id), store.plots(run_id)
    top, below = pages.Links(static=True), pages.Links(static=True, depth=1)
    out = _folder(Path(out))
    traces_dir, questions_dir = _folder(out / "traces"), _folder(out / "questions")
    _write(out / "index.html", pages.run_page(run_id, meta, results, plots, top))
    for p in plots:
        _write(out / p, store.file(run_id, p).read_bytes())
    traces = store.traces(run_id, [r.trace_id for r in results if r.trace_id])
    by_trace = {r.trace_id: r for r in results if r.trace_id}
    for tid, t in traces.items():
        _write(traces_dir / f"{tid}.html", pages.trace_page(t, below, run_id, by_trace.get(tid)))
    by_q: dict[str, list[ResultRecord]] = defaultdict(list)
    for r in results:
        by_q[r.qid].append(r)
    for qid, rs in by_q.items():
        _write(questions_dir / pages.question_file(qid), pages.question_page(run_id, qid, rs, traces, below))
    return out / "index.html"


def _folder(path: Path) -> Path:
    if path.is_symlink():
        raise MaragError(f"{path} is a symbolic link: the pages are not written through it", hint="pass --out with a new folder")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write(path: Path, content: str | bytes) -> None:
    """Write `path` by renaming a new file over it: a link already at `path` is
    replaced, not followed."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    data = content.encode("utf-8", "replace") if isinstance(content, str) else content
    with open(tmp, "xb") as f:  # x: fails rather than follows a link planted at the temporary name
        f.write(data)
    os.replace(tmp, path)
