"""One trajectory as HTML: a timeline of roles (coloured by role, see `Palette`; each
chip a link to its step), then every step with its inputs, outputs, model calls and searches.

Traces are read from files other people may have written: every value is escaped,
numbers are formatted only when they are numbers, and statuses become CSS classes only
from a fixed list.
"""

from __future__ import annotations

import html
import json
import zlib
from collections.abc import Collection
from typing import Any

STATUSES = frozenset({"ok", "fallback", "refused", "skipped", "error"})


def e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def num(value: Any, spec: str = ".2f", default: str = "–") -> str:
    """`value` formatted by `spec` when it is a number, else `default`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return format(value, spec)


class Palette:
    """Colours (HSL hues) of roles on one page: each role gets the next of a dozen
    well-separated hues as it first appears, so the roles of a page never look alike
    and one role looks the same in every strategy's column. A sub-role
    ("searcher.judge") takes its role's colour. Reds are left out: a red border means
    an error. Past a dozen roles, hues come from the name."""

    HUES = (210, 130, 40, 280, 180, 60, 320, 250, 90, 160, 300, 20)

    def __init__(self) -> None:
        self._given: dict[str, int] = {}

    def hue(self, agent: str) -> int:
        role = agent.split(".", 1)[0]
        if role not in self._given:
            n = len(self._given)
            self._given[role] = self.HUES[n] if n < len(self.HUES) else 30 + zlib.crc32(role.encode("utf-8", "replace")) % 300
        return self._given[role]


def dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a list read from a trace file (anything else there is skipped)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def status_class(status: Any) -> str:
    return str(status) if str(status) in STATUSES else "other"


def _llm_call(c: dict[str, Any]) -> str:
    head = (
        f"{e(c.get('schema_name') or 'text')} · {num(c.get('prompt_tokens', 0), 'd')} prompt tokens"
        + (f" ({num(c.get('reused_prompt_tokens'), 'd')} reused)" if c.get("reused_prompt_tokens") else "")
        + f" + {num(c.get('completion_tokens', 0), 'd')} completion · {num(c.get('latency_s', 0))}s"
        + (" · cached" if c.get("cached") else "")
        + (" · repaired" if c.get("repaired") else "")
    )
    prompt = "".join(f"<pre><b>{e(m.get('role'))}</b>\n{e(m.get('content'))}</pre>" for m in dicts(c.get("messages")))
    return (
        f"<details class='llm'><summary>LLM call: {head}</summary>{prompt}"
        f"<div>response:</div><pre>{e(c.get('response', ''))}</pre>"
        + (f"<div>error: {e(c['error'])}</div>" if c.get("error") else "")
        + "</details>"
    )


def _hit(h: dict[str, Any], gold: Collection[str]) -> str:
    doc = str(h.get("doc_id", ""))
    title = str(h.get("title") or doc or h.get("chunk_id", ""))
    mark = " <span class='gold' title='a gold document of this question'>gold</span>" if doc in gold else ""
    # the title first (what a person recognises), then the chunk id (what the index knows)
    return (
        f"<li class='{'is-gold' if mark else ''}'>{e(title)}{mark} "
        f"<span class='meta'>{e(h.get('chunk_id', ''))} · {num(h.get('score', 0), '.4f')}</span></li>"
    )


def _search(s: dict[str, Any], gold: Collection[str]) -> str:
    items = "".join(_hit(h, gold) for h in dicts(s.get("hits")))
    latency = s.get("latency_s", 0)
    return (
        f"<div class='search'>search <b>{e(s.get('retriever'))}</b>: “{e(s.get('query'))}” "
        f"<span class='meta'>k={e(s.get('k'))} offset={e(s.get('offset'))} · "
        f"{num(latency * 1000 if isinstance(latency, (int, float)) else None, '.1f')} ms</span>"
        f"<ul class='hits'>{items or '<li>(no hits)</li>'}</ul></div>"
    )


def timeline(steps: list[dict[str, Any]], anchor: str, palette: Palette) -> str:
    chips = []
    for i, s in enumerate(steps, 1):
        agent, status = str(s.get("agent", "?")), status_class(s.get("status", "ok"))
        chips.append(
            f"<a class='chip st-{status}' href='#{anchor}-{i}' style='--hue:{palette.hue(agent)}' "
            f"title='step {i}: {e(agent)} ({e(s.get('status', 'ok'))})'>{e(agent)}</a>"
        )
    return f"<nav class='timeline' aria-label='steps'>{''.join(chips)}</nav>"


def steps_html(steps: list[dict[str, Any]], anchor: str, gold: Collection[str], palette: Palette) -> str:
    cards = []
    for i, s in enumerate(steps, 1):
        agent, status = str(s.get("agent", "?")), status_class(s.get("status", "ok"))
        calls, searches = dicts(s.get("llm_calls")), dicts(s.get("searches"))
        outputs = json.dumps(s.get("outputs", {}), ensure_ascii=False, indent=1)[:4000]
        inputs = json.dumps(s.get("inputs", {}), ensure_ascii=False, indent=1)[:4000]
        badge = "" if status == "ok" else f" <span class='badge st-{status}'>{e(s.get('status'))}</span>"
        cards.append(
            f"<div class='step' id='{anchor}-{i}' data-agent='{e(agent)}' data-status='{e(s.get('status', 'ok'))}' "
            f"style='--hue:{palette.hue(agent)}'>"
            f"<span class='agent'>{i}. {e(agent)}</span>{badge}"
            f"<span class='meta'>{num(s.get('latency_s', 0))}s · {len(calls)} LLM calls · {len(searches)} searches</span>"
            + (f"<div class='meta'>error: {e(s['error'])}</div>" if s.get("error") else "")
            + f"<details><summary>inputs</summary><pre>{e(inputs)}</pre></details>"
            + f"<details><summary>outputs</summary><pre>{e(outputs)}</pre></details>"
            + "".join(_llm_call(c) for c in calls)
            + "".join(_search(x, gold) for x in searches)
            + "</div>"
        )
    return f"<div class='steps'>{''.join(cards)}</div>"


def totals(steps: list[dict[str, Any]]) -> str:
    calls = [c for s in steps for c in dicts(s.get("llm_calls"))]
    tokens = sum(
        v for c in calls if not c.get("cached")
        for v in (c.get("prompt_tokens"), c.get("completion_tokens")) if isinstance(v, (int, float))
    )  # fmt: skip
    searches = sum(len(dicts(s.get("searches"))) for s in steps)
    return f"{len(calls)} LLM calls · {num(tokens, '.0f')} tokens · {searches} searches"


def trajectory(trace: dict[str, Any], anchor: str, gold_docs: Collection[str] = (), palette: Palette | None = None) -> str:
    """The timeline and the steps of one trace. `anchor` prefixes the steps' element
    ids and `palette` is shared, so several trajectories can share a page."""
    steps = dicts(trace.get("steps"))
    palette = palette or Palette()
    return (
        f"<div class='meta'>{totals(steps)} · trace {e(trace.get('id'))}</div>"
        f"<h3>Timeline</h3>{timeline(steps, anchor, palette)}"
        f"<h3>Steps</h3>{steps_html(steps, anchor, gold_docs, palette)}"
    )
