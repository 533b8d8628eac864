"""The finisher ends the run: no model call, just a recorded step with the response the
coordinator returns."""

from __future__ import annotations

from marag.trace import step


def finish(response: str | None, documents: int) -> None:
    with step("finisher", response=response) as s:
        s.outputs = {"response": response, "documents": documents}
