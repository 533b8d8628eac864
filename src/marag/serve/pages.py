"""The viewer's HTML pages, as plain functions of the data they show: the runs, one
run (metrics, every question's answers, plots), one question (its gold answers, each
strategy's answer with its scores, their trajectories side by side), one trajectory,
and the sign-in page. `marag serve` sends them; `marag view` writes them to files, so
they open without a server. Every value that comes from a document, a model or a user
is escaped: the pages never execute or link to what they show.

Links are made by a `Links` object, because the server and the static copy address
pages differently. Every page starts with breadcrumbs back to where it belongs.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

from marag.eval.attribution import CAUSES
from marag.eval.rundir import ResultRecord
from marag.serve.trajectory import Palette, e, num, trajectory

CSS = """
body{font-family:system-ui,sans-serif;font-size:14px;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:9px 18px;display:flex;align-items:center;gap:14px;flex-wrap:wrap}
header a{color:#9fc5ff}header .brand{font-weight:700;color:#fff;text-decoration:none}
.crumbs{flex:1;font-size:14px}.crumbs .sep{color:#7a8699;margin:0 6px}.crumbs .here{color:#dfe3ea}
header form{margin:0}header button{background:none;border:1px solid #5f6b7c;color:#dfe3ea;border-radius:4px;padding:2px 10px;cursor:pointer}
main{padding:16px 18px;max-width:1280px}
h1{font-size:20px;margin:4px 0 6px}h2{font-size:16px;margin:20px 0 8px}h3{font-size:14px;margin:12px 0 6px}
table{border-collapse:collapse;background:#fff;font-size:13px}
td,th{border:1px solid #d8dbe2;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef0f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.meta{color:#5f6b7c;font-size:12px}.agent{font-weight:600;margin-right:8px}
pre{white-space:pre-wrap;word-break:break-word;background:#f3f4f6;padding:6px;font-size:12px;margin:4px 0}
details{margin:4px 0}summary{cursor:pointer;font-size:13px}
.box{background:#fff;border:1px solid #d8dbe2;padding:8px 12px;border-radius:4px;margin:4px 0}
.answer{background:#fff;border:1px solid #2d72d2;padding:10px;border-radius:4px}
.goldbox{background:#f1f9f1;border:1px solid #3a9a4a;padding:8px 12px;border-radius:4px;display:flex;gap:48px;flex-wrap:wrap}
.goldbox ul{margin:4px 0;padding-left:20px}.goldbox b{font-size:13px}
.gold{background:#3a9a4a;color:#fff;font-size:10px;padding:0 4px;border-radius:3px}
.search{font-size:13px;margin:6px 0}.hits{margin:4px 0}.hits li{font-size:12px}.hits li.is-gold{font-weight:600}.hits .meta{font-weight:400}.diff td.disagree{background:#fff4e5}
.cause{font-size:11px;color:#5a3e8a;background:#f1ecf9;border-radius:3px;padding:0 4px}
.timeline{display:flex;gap:3px;margin:6px 0;flex-wrap:wrap}
.chip{font-size:11px;padding:2px 6px;border-radius:3px;text-decoration:none;color:#1d2330;
 background:hsl(var(--hue) 70% 87%);border:1px solid hsl(var(--hue) 45% 55%)}
.chip:hover{background:hsl(var(--hue) 70% 77%)}
.chip.st-fallback{border:2px dashed #d9822b}.chip.st-error{border:2px solid #c23030}
.chip.st-skipped,.chip.st-refused{opacity:.6;border-style:dotted}
.step{background:#fff;border-left:5px solid hsl(var(--hue) 45% 55%);margin:8px 0;padding:8px 12px;border-radius:4px}
.step:target{outline:2px solid #2d72d2}
.badge{font-size:11px;padding:0 5px;border-radius:3px;margin-right:6px;background:#b5b5b5;color:#fff}
.badge.st-fallback{background:#d9822b}.badge.st-error{background:#c23030}
.cols{display:flex;gap:12px;align-items:flex-start}.cols>div{flex:1;min-width:0}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:10px}
.plots img{width:100%;background:#fff;border:1px solid #d8dbe2}
.signin{max-width:420px;margin:40px auto;background:#fff;border:1px solid #d8dbe2;border-radius:6px;padding:18px 22px}
.signin input[type=password]{width:100%;box-sizing:border-box;padding:6px;margin:6px 0 12px;font-size:14px}
.signin button{padding:6px 16px;font-size:14px}.error{color:#c23030}
"""

FILTER_JS = """
document.addEventListener('DOMContentLoaded',function(){
  var box=document.getElementById('only-disagree'), pick=document.getElementById('by-cause');
  function apply(){
    var want=pick?pick.value:'';
    document.querySelectorAll('tr[data-agree]').forEach(function(tr){
      var hide=(box&&box.checked&&tr.dataset.agree==='1')||(want&&(' '+tr.dataset.causes+' ').indexOf(' '+want+' ')<0);
      tr.style.display=hide?'none':'';
    });
  }
  if(box){box.addEventListener('change',apply);}
  if(pick){pick.addEventListener('change',apply);}
});
"""


def question_file(qid: str) -> str:
    """A static question page's file name: readable, and distinct for distinct ids
    (the hash tells apart ids that differ only in characters a file name cannot hold)."""
    readable = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in qid)[:60]
    return f"{readable}-{hashlib.sha256(qid.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}.html"


@dataclass(frozen=True)
class Links:
    """How pages address each other: server paths, or files of the static copy (`static`,
    from a page `depth` folders below the copy's index.html)."""

    static: bool = False
    depth: int = 0
    signout: bool = False  # a server with a token: pages carry a sign-out button

    def _file(self, path: str) -> str:
        return "../" * self.depth + path

    def below(self) -> Links:
        return replace(self, depth=self.depth + 1)

    def home(self) -> str | None:
        return None if self.static else "/"  # the static copy is one run: its index is the run page

    def run(self, run_id: str) -> str:
        return self._file("index.html") if self.static else f"/view/runs/{quote(run_id, safe='')}"

    def trace(self, run_id: str, trace_id: str) -> str:
        return self._file(f"traces/{trace_id}.html") if self.static else f"/view/runs/{quote(run_id, safe='')}/traces/{trace_id}"

    def question(self, run_id: str, qid: str) -> str:
        # a query parameter: any id (with / # ? % or a lone dot) survives it, where a
        # path segment would be split or normalised by the browser
        if self.static:
            return self._file(f"questions/{question_file(qid)}")
        return f"/view/runs/{quote(run_id, safe='')}/question?qid={quote(qid, safe='')}"

    def file(self, run_id: str, name: str) -> str:
        return self._file(name) if self.static else f"/runs/{quote(run_id, safe='')}/files/{quote(name)}"


Crumbs = list[tuple[str, str | None]]  # (label, link); the last one is the page itself


def page(title: str, body: str, links: Links, crumbs: Crumbs = ()) -> str:
    home = links.home()
    trail = ([("runs", home)] if home else []) + list(crumbs)
    nav = "<span class='sep'>›</span>".join(
        f"<a href='{e(href)}'>{e(label)}</a>" if href and i < len(trail) - 1 else f"<span class='here'>{e(label)}</span>"
        for i, (label, href) in enumerate(trail)
    )
    brand = f"<a class='brand' href='{e(home)}'>marag</a>" if home else "<span class='brand'>marag</span>"
    signout = "<form method='post' action='/signout'><button type='submit'>sign out</button></form>" if links.signout else ""
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><link rel='icon' href='data:,'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{e(title)} · marag</title><style>{CSS}</style><script>{FILTER_JS}</script></head>"
        f"<body><header>{brand}<nav class='crumbs' aria-label='breadcrumbs'>{nav}</nav>{signout}</header>"
        f"<main>{body}</main></body></html>"
    )


def _short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


# -- the runs ---------------------------------------------------------------------------------
def home_page(runs: list[tuple[str, dict[str, Any]]], strategies: list[tuple[str, str]], links: Links,
              skipped: Iterable[tuple[str, str]] = ()) -> str:  # fmt: skip
    items = "".join(
        f"<tr><td><a href='{e(links.run(rid))}'>{e(rid)}</a></td><td>{e(_get(m, 'config', 'dataset'))}</td>"
        f"<td>{e(', '.join(_get(m, 'config', 'strategies') or []))}</td><td class='n'>{e(_get(m, 'config', 'limit') or '–')}</td>"
        f"<td>{e(m.get('started', '') if isinstance(m, dict) else '')}</td></tr>"
        for rid, m in runs
    )
    table = (
        "<table id='runs'><tr><th>run</th><th>dataset</th><th>strategies</th><th>questions (limit)</th><th>started</th></tr>"
        f"{items}</table>" if runs else "<p>No runs yet: <code>marag eval DATASET --runs DIR</code> writes one; POST /runs starts one.</p>"
    )  # fmt: skip
    skipped = list(skipped)
    note = (
        f"<details class='meta' id='skipped'><summary>{len(skipped)} folder(s) skipped</summary><ul>"
        + "".join(f"<li>{e(name)}: {e(why)}</li>" for name, why in skipped)
        + "</ul></details>" if skipped else ""
    )  # fmt: skip
    strat = "".join(f"<tr><td>{e(n)}</td><td>{e(d)}</td></tr>" for n, d in strategies)
    return page(
        "runs",
        f"<h1>Runs</h1>{table}{note}"
        f"<details><summary>Strategies this server can run ({len(strategies)})</summary><table>{strat}</table></details>",
        links,
    )


# -- a run ------------------------------------------------------------------------------------
def _mean(values: Iterable[float], spec: str = ".3f") -> str:
    vals = list(values)
    return format(sum(vals) / len(vals), spec) if vals else "–"


def _headline(results: list[ResultRecord]) -> str | None:
    present = {m for r in results for m in r.metrics}
    return next((m for m in ("accuracy", "f1", "rouge_l", "em") if m in present), None)


def run_page(run_id: str, meta: dict[str, Any], results: list[ResultRecord], plots: list[str], links: Links) -> str:
    """The metrics, every question (first: that is what people open a run for), the
    settings, and the plots side by side at the end."""
    by_strategy: dict[str, list[ResultRecord]] = defaultdict(list)
    for r in results:
        by_strategy[r.strategy].append(r)
    metrics = sorted({m for r in results for m in r.metrics})
    head = "".join(f"<th>{e(m)}</th>" for m in metrics)
    rows = "".join(
        f"<tr><td>{e(s)}</td><td class='n'>{len(rs)}</td><td class='n'>{sum(1 for r in rs if r.error)}</td>"
        + "".join(f"<td class='n'>{_mean(r.metrics[m] for r in rs if m in r.metrics)}</td>" for m in metrics)
        + f"<td class='n'>{_mean((r.cost.get('llm_calls', 0) for r in rs), '.1f')}</td>"
        + f"<td class='n'>{_mean((r.cost.get('seconds', 0) for r in rs), '.1f')}</td></tr>"
        for s, rs in by_strategy.items()
    )
    table = f"<table id='metrics'><tr><th>strategy</th><th>n</th><th>failed</th>{head}<th>LLM calls</th><th>seconds</th></tr>{rows}</table>"
    images = "".join(
        f"<figure style='margin:0'><a href='{e(links.file(run_id, p))}'><img alt='{e(p)}' src='{e(links.file(run_id, p))}'></a>"
        f"<figcaption class='meta'>{e(p)}</figcaption></figure>"
        for p in plots
    )
    causes = [c for c in CAUSES if any(r.cause == c for r in results)]
    crow = "".join(
        f"<tr><td>{e(s)}</td>" + "".join(f"<td class='n'>{sum(r.cause == c for r in rs)}</td>" for c in causes) + "</tr>"
        for s, rs in by_strategy.items()
    )
    failures = f"<table id='causes'><tr><th>strategy</th>{''.join(f'<th>{e(c)}</th>' for c in causes)}</tr>{crow}</table>"
    settings = e(json.dumps(meta.get("strategy_settings", {}), indent=1, ensure_ascii=False))
    n_questions = len({r.qid for r in results})
    return page(
        f"run {run_id}",
        f"<h1>Run {e(run_id)}</h1><div class='meta'>dataset {e(_get(meta, 'config', 'dataset'))} · {n_questions} questions · "
        f"model {e(_get(meta, 'models', 'llm') or '')} · code {e(meta.get('code', ''))}</div>"
        f"<h2>Metrics (means)</h2>{table}"
        f"<h2>Why answers fail</h2><div class='meta'>one cause per question and strategy (marag.eval.attribution)</div>{failures}"
        f"<h2>Questions</h2>{comparison(run_id, results, links)}"
        f"<details><summary>settings</summary><pre>{settings}</pre></details>"
        f"<details open id='plots'><summary>Plots ({len(plots)})</summary><div class='plots'>{images or '(none)'}</div></details>",
        links,
        [(f"run {_short(run_id)}", None)],
    )


def comparison(run_id: str, results: list[ResultRecord], links: Links) -> str:
    """Every question with each strategy's answer (linked to its trajectory); rows where
    the strategies' scores differ can be shown alone."""
    strategies = list(dict.fromkeys(r.strategy for r in results))
    head = _headline(results)
    by_q: dict[str, dict[str, ResultRecord]] = defaultdict(dict)
    for r in results:
        by_q[r.qid][r.strategy] = r
    rows = []
    for qid, per in by_q.items():
        scores = {round(per[s].metrics.get(head, 0.0), 3) for s in per} if head else set()
        agree = "1" if len(scores) <= 1 else "0"
        cells = []
        for s in strategies:
            r = per.get(s)
            if r is None:
                cells.append("<td>–</td>")
                continue
            score = f" <span class='meta'>{head} {r.metrics.get(head, 0.0):.2f}</span>" if head else ""
            score += f" <span class='cause'>{e(r.cause.replace('_', ' '))}</span>"
            text = e(r.prediction or r.error or "")
            link = f" <a href='{e(links.trace(run_id, r.trace_id))}'>trajectory</a>" if r.trace_id else ""
            cells.append(f"<td class='{'disagree' if agree == '0' else ''}'>{text}{score}{link}</td>")
        first = next(iter(per.values()))
        q = f"<a class='question' href='{e(links.question(run_id, qid))}'>{e(first.question)}</a>"
        gold = e(_short("; ".join(first.answers), 200))
        causes = " ".join(f"{s}:{per[s].cause}" for s in strategies if s in per)
        rows.append(f"<tr data-agree='{agree}' data-causes='{e(causes)}'><td>{q}<div class='meta'>gold: {gold}</div></td>{''.join(cells)}</tr>")
    header = "".join(f"<th>{e(s)}</th>" for s in strategies)
    counts = Counter(f"{r.strategy}:{r.cause}" for r in results)
    options = "".join(
        f"<option value='{e(k)}'>{e(k.replace(':', ' / '))} ({n})</option>" for k, n in sorted(counts.items()) if not k.endswith(":correct")
    )
    return (
        "<label><input type='checkbox' id='only-disagree'> only questions where the strategies disagree</label> · "
        f"<label>cause <select id='by-cause'><option value=''>any</option>{options}</select></label>"
        f"<table class='diff' id='compare'><tr><th>question</th>{header}</tr>{''.join(rows)}</table>"
    )


# -- one question -----------------------------------------------------------------------------
def _scores(r: ResultRecord) -> str:
    return " · ".join(f"{e(m)} <b>{num(v, '.2f')}</b>" for m, v in r.metrics.items()) or "–"


def _gold(r: ResultRecord) -> str:
    answers = "".join(f"<li>{e(a)}</li>" for a in r.answers) or "<li>(none given)</li>"
    docs = "".join(f"<li>{e(d)}</li>" for d in r.gold_doc_ids)
    return (
        f"<div class='goldbox' id='gold'><div><b>Gold answer{'s' if len(r.answers) > 1 else ''}</b><ul>{answers}</ul></div>"
        + (f"<div><b>Gold documents</b> <span class='meta'>(marked <span class='gold'>gold</span> among the hits)</span><ul>{docs}</ul></div>" if docs else "")
        + "</div>"
    )


def question_page(run_id: str, qid: str, results: list[ResultRecord], traces: dict[str, dict], links: Links) -> str:
    """The question once, its gold answers and documents, each strategy's answer with
    its scores, and their trajectories side by side."""
    first = results[0]
    gold = set(first.gold_doc_ids)
    rows, cols, palette = [], [], Palette()  # one palette: a role has one colour in every column
    for r in results:
        t = traces.get(r.trace_id or "")
        link = f"<a href='{e(links.trace(run_id, r.trace_id))}'>trajectory</a>" if t else "–"
        answer = e(r.prediction or "") + (f"<div class='error'>error: {e(r.error)}</div>" if r.error else "")
        cost = f"{num(r.cost.get('llm_calls'), '.0f')} LLM calls · {num(r.cost.get('seconds'), '.1f')} s"
        rows.append(
            f"<tr><td>{e(r.strategy)}</td><td class='pred'>{answer}</td><td>{e(r.cause.replace('_', ' '))}</td>"
            f"<td>{_scores(r)}</td><td class='meta'>{cost}</td><td>{link}</td></tr>"
        )
        body = trajectory(t, f"t{r.trace_id}", gold, palette) if t else f"<div>{e(r.error or 'no trace')}</div>"
        cols.append(f"<div><h2>{e(r.strategy)}</h2>{body}</div>")
    about = " · ".join(f"{e(k)} {e(v)}" for k, v in first.metadata.items() if isinstance(v, (str, int, float)))
    return page(
        f"question {qid}",
        f"<h1 id='question'>{e(first.question)}</h1><div class='meta'>question {e(qid)}{' · ' + about if about else ''}</div>"
        f"{_gold(first)}"
        "<h2>Answers</h2><table id='answers'><tr><th>strategy</th><th>answer</th><th>cause</th><th>scores</th><th>cost</th><th></th></tr>"
        f"{''.join(rows)}</table>"
        f"<h2>Trajectories</h2><div class='cols'>{''.join(cols)}</div>",
        links,
        [(f"run {_short(run_id)}", links.run(run_id)), (f"question {_short(first.question, 50)}", None)],
    )


# -- one trajectory ---------------------------------------------------------------------------
def trace_page(trace: dict[str, Any], links: Links, run_id: str | None = None, result: ResultRecord | None = None) -> str:
    """One trajectory; inside a run (`run_id`, and its `result` record when found) with
    breadcrumbs to the run and the question, and the gold answer beside the answer."""
    question = str(trace.get("question") or "")
    crumbs: Crumbs = []
    if run_id:
        crumbs.append((f"run {_short(run_id)}", links.run(run_id)))
        if result:
            crumbs.append((f"question {_short(question, 50)}", links.question(run_id, result.qid)))
    crumbs.append((f"{trace.get('strategy', '')} trajectory", None))
    gold = _gold(result) if result else ""
    scores = f"<div class='meta'>scores: {_scores(result)}</div>" if result else ""
    body = (
        f"<h1 id='question'>{e(question)}</h1><div class='meta'>strategy {e(trace.get('strategy'))}</div>"
        f"<div class='cols'><div><h2>Answer</h2><div class='answer' id='answer'>{e(trace.get('answer') or '(none)')}</div>{scores}</div>"
        + (f"<div><h2>Expected</h2>{gold}</div>" if gold else "")
        + f"</div>{trajectory(trace, 'step', set(result.gold_doc_ids) if result else ())}"
    )
    return page(f"trajectory {trace.get('id')}", body, links, crumbs)


# -- signing in -------------------------------------------------------------------------------
def signin_page(next_path: str, error: str | None = None) -> str:
    message = f"<p class='error' id='signin-error'>{e(error)}</p>" if error else ""
    form = (
        "<div class='signin'><h1>Sign in</h1>"
        "<p class='meta'>This server needs the token it was started with (<code>--token-env</code>). "
        "Your browser keeps a session cookie until you sign out, it expires, or the server restarts; "
        "the token itself is not stored.</p>"
        f"{message}<form method='post' action='/signin'>"
        f"<input type='hidden' name='next' value='{e(next_path)}'>"
        "<label for='token'>Token</label>"
        "<input type='password' id='token' name='token' autocomplete='current-password' autofocus required>"
        "<button type='submit' id='signin'>Sign in</button></form></div>"
    )
    return page("sign in", form, Links(static=True))
