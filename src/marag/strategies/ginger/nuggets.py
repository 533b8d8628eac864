"""The paper's nugget detection (step 4): the model copies a passage with <n>...</n>
around the spans that help answer the question; a copy that changes the text is
rejected and asked for once more (the fallback the method needs, not an aid). Our
numbered-sentence picker is an aid (`aids.sentence_nuggets`)."""

from __future__ import annotations

from marag.agents.ginger import NuggetDetector, TagInput, spans
from marag.index.base import Hit
from marag.strategies.ginger.config import GingerConfig
from marag.trace import step


async def tagged_nuggets(cfg: GingerConfig, call, question: str, hit: Hit) -> list[str]:
    """The verified spans of `hit` (none when neither copy passes the check)."""
    passage = cfg.passage(hit)
    detector = NuggetDetector(len(passage))
    for retry in (False, True):
        out = await call(detector, TagInput(question=question, passage=passage, retry=retry))
        got = spans(passage, out.tagged)
        with step("nugget_check", chunk_id=hit.chunk_id, retry=retry) as s:
            s.status = "ok" if got is not None else "refused"
            s.outputs = {"spans": got or [], "accepted": got is not None}
        if got is not None:
            return got
    return []
