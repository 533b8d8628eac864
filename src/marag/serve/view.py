"""`marag view RUN --out DIR`: the viewer's pages for one run as static HTML files (the
run page, every trajectory, every question's strategies side by side, the plots), so a
run can be read, shared or archived without a server."""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path

from marag.serve import pages
from marag.serve.store import RunStore


def write_static(run_dir: str | Path, out: str | Path) -> Path:
    run_dir = Path(run_dir).resolve()
    store = RunStore(run_dir.parent)
    run_id = run_dir.name
    meta, results, plots = store.meta(run_id), store.results(run_id), store.plots(run_id)
    links = pages.Links(static=True)
    out = Path(out)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    (out / "questions").mkdir(exist_ok=True)
    (out / "index.html").write_text(pages.run_page(run_id, meta, results, plots, links), encoding="utf-8")
    for p in plots:
        shutil.copyfile(store.file(run_id, p), out / p)
    traces = store.traces(run_id, [r["trace_id"] for r in results if r.get("trace_id")])
    for tid, t in traces.items():
        (out / "traces" / f"{tid}.html").write_text(_relink(pages.trace_page(t, links, depth=1)), encoding="utf-8")
    by_q: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        by_q[r["qid"]].append(r)
    for qid, rs in by_q.items():
        body = pages.question_page(run_id, qid, rs, traces, links, depth=1)
        (out / links.question(run_id, qid)).write_text(body, encoding="utf-8")
    return out / "index.html"


def _relink(html: str) -> str:
    """Trace pages live one folder down: their links to other trace pages are siblings."""
    return html.replace("href='traces/", "href='")
