"""The viewer's HTML pages, as plain functions of the data they show: one question's
trajectory, a run (metrics, plots, questions), and a comparison of strategies on the
same questions. `marag serve` sends them; `marag view` writes them to files, so they
open without a server. Every value that comes from a document, a model or a user is
escaped: the pages never execute or link to what they show.

Links are made by a `Links` object, because the server and the static copy address
pages differently.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

CSS = """
body{font-family:system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:10px 18px}header a{color:#9fc5ff}
main{padding:16px 18px;max-width:1200px}
h1{font-size:20px;margin:4px 0}h2{font-size:16px;margin:18px 0 8px}
table{border-collapse:collapse;background:#fff;font-size:13px}
td,th{border:1px solid #d8dbe2;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef0f4}
.step{background:#fff;border-left:4px solid #7a8699;margin:8px 0;padding:8px 12px;border-radius:4px}
.step.fallback{border-color:#d9822b}.step.refused{border-color:#b5b5b5}.step.skipped{border-color:#b5b5b5}
.step.error{border-color:#c23030}.step.ok{border-color:#2d72d2}
.agent{font-weight:600}.meta{color:#5f6b7c;font-size:12px;margin-left:8px}
pre{white-space:pre-wrap;word-break:break-word;background:#f3f4f6;padding:6px;font-size:12px;margin:4px 0}
details{margin:4px 0}summary{cursor:pointer;font-size:13px}
.answer{background:#fff;border:1px solid #2d72d2;padding:10px;border-radius:4px}
.hits li{font-size:12px}.diff td.disagree{background:#fff4e5}
.timeline{display:flex;gap:2px;margin:8px 0;flex-wrap:wrap}.timeline span{font-size:11px;padding:2px 5px;border-radius:3px;background:#dde5f3}
.cols{display:flex;gap:12px;align-items:flex-start}.cols>div{flex:1;min-width:0}
"""

FILTER_JS = """
document.addEventListener('DOMContentLoaded',function(){
  var box=document.getElementById('only-disagree');
  if(!box){return;}
  box.addEventListener('change',function(){
    document.querySelectorAll('tr[data-agree]').forEach(function(tr){
      tr.style.display=(box.checked&&tr.dataset.agree==='1')?'none':'';
    });
  });
});
"""


def e(value: Any) -> str:
    return html.escape(str(value), quote=True)


@dataclass
class Links:
    """How pages address each other: `server` paths, or relative files (`static`)."""

    static: bool = False

    def home(self) -> str:
        return "index.html" if self.static else "/"

    def run(self, run_id: str) -> str:
        return "index.html" if self.static else f"/view/runs/{run_id}"

    def trace(self, run_id: str, trace_id: str) -> str:
        return f"traces/{trace_id}.html" if self.static else f"/view/runs/{run_id}/traces/{trace_id}"

    def question(self, run_id: str, qid: str) -> str:
        return f"questions/{_safe(qid)}.html" if self.static else f"/view/runs/{run_id}/questions/{qid}"

    def file(self, run_id: str, name: str) -> str:
        return name if self.static else f"/runs/{run_id}/files/{name}"

    def up(self, href: str) -> str:
        """A link from a page one folder down (static trace and question pages)."""
        return ("../" + href) if self.static and not href.startswith(("/", "http")) else href


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def page(title: str, body: str, links: Links, depth: int = 0) -> str:
    home = links.home() if depth == 0 else links.up(links.home())
    return (
        "<!doctype html><html><head><meta charset='utf-8'><link rel='icon' href='data:,'>"
        f"<title>{e(title)} · marag</title><style>{CSS}</style><script>{FILTER_JS}</script></head>"
        f"<body><header><a href='{e(home)}'>marag</a> · {e(title)}</header><main>{body}</main></body></html>"
    )


# -- one question's trajectory ---------------------------------------------------------------
def _llm_call(c: dict[str, Any]) -> str:
    head = (
        f"{e(c.get('schema_name') or 'text')} · {c.get('prompt_tokens', 0)} prompt tokens"
        + (f" ({c.get('reused_prompt_tokens', 0)} reused)" if c.get("reused_prompt_tokens") else "")
        + f" + {c.get('completion_tokens', 0)} completion · {c.get('latency_s', 0):.2f}s"
        + (" · cached" if c.get("cached") else "")
        + (" · repaired" if c.get("repaired") else "")
    )
    prompt = "".join(f"<pre><b>{e(m.get('role'))}</b>\n{e(m.get('content'))}</pre>" for m in c.get("messages", []))
    return (
        f"<details class='llm'><summary>LLM call: {head}</summary>{prompt}"
        f"<div>response:</div><pre>{e(c.get('response', ''))}</pre>"
        + (f"<div>error: {e(c['error'])}</div>" if c.get("error") else "")
        + "</details>"
    )


def _search(s: dict[str, Any]) -> str:
    hits = "".join(f"<li>{e(h.get('chunk_id'))} <span class='meta'>{float(h.get('score', 0)):.4f}</span></li>" for h in s.get("hits", []))
    return (
        f"<div class='search'>search <b>{e(s.get('retriever'))}</b>: “{e(s.get('query'))}” "
        f"<span class='meta'>k={e(s.get('k'))} offset={e(s.get('offset'))} · {float(s.get('latency_s', 0)) * 1000:.1f} ms</span>"
        f"<ul class='hits'>{hits or '<li>(no hits)</li>'}</ul></div>"
    )


def trajectory(trace: dict[str, Any]) -> str:
    """The body of one trajectory: a timeline of roles, then every step with its model
    calls and searches, then the answer."""
    steps = trace.get("steps", [])
    timeline = "".join(f"<span title='{e(s.get('status'))}'>{e(s.get('agent'))}</span>" for s in steps)
    cards = []
    for i, s in enumerate(steps, 1):
        status = str(s.get("status", "ok"))
        calls = "".join(_llm_call(c) for c in s.get("llm_calls", []))
        searches = "".join(_search(x) for x in s.get("searches", []))
        outputs = json.dumps(s.get("outputs", {}), ensure_ascii=False, indent=1)[:4000]
        inputs = json.dumps(s.get("inputs", {}), ensure_ascii=False, indent=1)[:4000]
        cards.append(
            f"<div class='step {e(status)}' data-agent='{e(s.get('agent'))}'>"
            f"<span class='agent'>{i}. {e(s.get('agent'))}</span>"
            f"<span class='meta'>{e(status)} · {float(s.get('latency_s', 0)):.2f}s · {len(s.get('llm_calls', []))} LLM calls</span>"
            + (f"<div class='meta'>error: {e(s['error'])}</div>" if s.get("error") else "")
            + f"<details><summary>inputs</summary><pre>{e(inputs)}</pre></details>"
            + f"<details><summary>outputs</summary><pre>{e(outputs)}</pre></details>"
            + calls
            + searches
            + "</div>"
        )
    totals = _totals(steps)
    return (
        f"<h1>{e(trace.get('question'))}</h1>"
        f"<div class='meta'>strategy {e(trace.get('strategy'))} · trace {e(trace.get('id'))} · {totals}</div>"
        f"<h2>Answer</h2><div class='answer' id='answer'>{e(trace.get('answer') or '(none)')}</div>"
        f"<h2>Timeline</h2><div class='timeline'>{timeline}</div>"
        f"<h2>Steps</h2><div id='steps'>{''.join(cards)}</div>"
    )


def _totals(steps: list[dict[str, Any]]) -> str:
    calls = [c for s in steps for c in s.get("llm_calls", [])]
    tokens = sum(c.get("prompt_tokens", 0) + c.get("completion_tokens", 0) for c in calls if not c.get("cached"))
    searches = sum(len(s.get("searches", [])) for s in steps)
    return f"{len(calls)} LLM calls · {tokens} tokens · {searches} searches"


def trace_page(trace: dict[str, Any], links: Links, depth: int = 0) -> str:
    return page(f"trajectory {trace.get('id')}", trajectory(trace), links, depth)


# -- a run ------------------------------------------------------------------------------------
def _mean(values: Iterable[float]) -> str:
    vals = list(values)
    return f"{sum(vals) / len(vals):.3f}" if vals else "–"


def run_page(run_id: str, meta: dict[str, Any], results: list[dict[str, Any]], plots: list[str], links: Links) -> str:
    by_strategy: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        by_strategy[r["strategy"]].append(r)
    metrics = sorted({m for r in results for m in (r.get("metrics") or {})})
    head = "".join(f"<th>{e(m)}</th>" for m in metrics)
    rows = "".join(
        f"<tr><td>{e(s)}</td><td>{len(rs)}</td><td>{sum(1 for r in rs if r.get('error'))}</td>"
        + "".join(f"<td>{_mean(r['metrics'][m] for r in rs if m in (r.get('metrics') or {}))}</td>" for m in metrics)
        + f"<td>{_mean(r.get('cost', {}).get('llm_calls', 0) for r in rs)}</td><td>{_mean(r.get('cost', {}).get('seconds', 0) for r in rs)}</td></tr>"
        for s, rs in by_strategy.items()
    )
    table = f"<table id='metrics'><tr><th>strategy</th><th>n</th><th>failed</th>{head}<th>LLM calls</th><th>seconds</th></tr>{rows}</table>"
    images = "".join(f"<div><img alt='{e(p)}' src='{e(links.file(run_id, p))}' style='max-width:560px'></div>" for p in plots)
    settings = e(json.dumps(meta.get("strategy_settings", {}), indent=1, ensure_ascii=False))
    return page(
        f"run {run_id}",
        f"<h1>Run {e(run_id)}</h1><div class='meta'>dataset {e(meta.get('config', {}).get('dataset'))} · "
        f"model {e(meta.get('models', {}).get('llm', ''))} · code {e(meta.get('code', ''))}</div>"
        f"<h2>Metrics (means)</h2>{table}<details><summary>settings</summary><pre>{settings}</pre></details>"
        f"<h2>Plots</h2>{images or '(none)'}"
        f"<h2>Questions</h2>{comparison(run_id, results, links)}",
        links,
    )


def _headline(results: list[dict[str, Any]]) -> str | None:
    present = {m for r in results for m in (r.get("metrics") or {})}
    return next((m for m in ("accuracy", "f1", "rouge_l", "em") if m in present), None)


def comparison(run_id: str, results: list[dict[str, Any]], links: Links) -> str:
    """Every question with each strategy's answer (linked to its trajectory); rows where
    the strategies' scores differ can be shown alone."""
    strategies = list(dict.fromkeys(r["strategy"] for r in results))
    head = _headline(results)
    by_q: dict[str, dict[str, dict]] = defaultdict(dict)
    questions: dict[str, str] = {}
    for r in results:
        by_q[r["qid"]][r["strategy"]] = r
        questions[r["qid"]] = r.get("question", r["qid"])
    rows = []
    for qid, per in by_q.items():
        scores = {round(float((per[s].get("metrics") or {}).get(head, 0.0)), 3) for s in per} if head else set()
        agree = "1" if len(scores) <= 1 else "0"
        cells = []
        for s in strategies:
            r = per.get(s)
            if r is None:
                cells.append("<td>–</td>")
                continue
            score = f" <span class='meta'>{head} {float((r.get('metrics') or {}).get(head, 0.0)):.2f}</span>" if head else ""
            text = e(r.get("prediction") or r.get("error") or "")
            link = f" <a href='{e(links.trace(run_id, r['trace_id']))}'>trajectory</a>" if r.get("trace_id") else ""
            cells.append(f"<td class='{'disagree' if agree == '0' else ''}'>{text}{score}{link}</td>")
        q = f"<a href='{e(links.question(run_id, qid))}'>{e(questions[qid])}</a>"
        gold = e("; ".join(per[next(iter(per))].get("answers") or [])[:200])
        rows.append(f"<tr data-agree='{agree}'><td>{q}<div class='meta'>gold: {gold}</div></td>{''.join(cells)}</tr>")
    header = "".join(f"<th>{e(s)}</th>" for s in strategies)
    return (
        "<label><input type='checkbox' id='only-disagree'> only questions where the strategies disagree</label>"
        f"<table class='diff' id='compare'><tr><th>question</th>{header}</tr>{''.join(rows)}</table>"
    )


def question_page(run_id: str, qid: str, results: list[dict[str, Any]], traces: dict[str, dict], links: Links, depth: int = 0) -> str:
    """Every strategy's trajectory for one question, side by side."""
    cols = []
    for r in results:
        t = traces.get(r.get("trace_id", ""))
        body = trajectory(t) if t else f"<div>{e(r.get('error') or 'no trace')}</div>"
        cols.append(f"<div><h2>{e(r['strategy'])}</h2>{body}</div>")
    title = results[0].get("question", qid) if results else qid
    back = links.up(links.run(run_id)) if depth else links.run(run_id)
    return page(f"question {qid}", f"<div><a href='{e(back)}'>back to the run</a></div><h1>{e(title)}</h1><div class='cols'>{''.join(cols)}</div>", links, depth)


def home_page(runs: list[tuple[str, dict[str, Any]]], strategies: list[tuple[str, str]], links: Links) -> str:
    items = "".join(
        f"<tr><td><a href='{e(links.run(rid))}'>{e(rid)}</a></td><td>{e(m.get('config', {}).get('dataset'))}</td>"
        f"<td>{e(', '.join(m.get('config', {}).get('strategies', [])))}</td><td>{e(m.get('started', ''))}</td></tr>"
        for rid, m in runs
    )
    strat = "".join(f"<tr><td>{e(n)}</td><td>{e(d)}</td></tr>" for n, d in strategies)
    return page(
        "runs",
        f"<h1>Runs</h1><table id='runs'><tr><th>run</th><th>dataset</th><th>strategies</th><th>started</th></tr>{items}</table>"
        f"<h2>Strategies</h2><table>{strat}</table>",
        links,
    )
