"""KAIR's refined context C: the paper's contextual filtering (step 4 of a cycle), C most
relevant first, and passages packed to fit a prompt, as the filter, the moderator and
the generator read them."""

from __future__ import annotations

from collections.abc import Callable

from marag.agents.documents import Doc, doc_from_hit, pack_texts
from marag.agents.kair import ContextFilter, FilterInput, KnowledgeState
from marag.agents.layout import clip
from marag.index.base import Hit
from marag.llm.base import LLM
from marag.strategies.kair.config import KAIRConfig
from marag.trace import step


def tightest(*limits: int | None) -> int | None:
    """The smallest of the character limits that are set (None: no limit)."""
    return min((n for n in limits if n), default=None)


def sampling(cfg: KAIRConfig, i: int) -> tuple[float, int | None]:
    """Agent `i`'s temperature and seed: agents after the first sample at
    `agent_temperature`, each with its own seed, so that competing agents differ."""
    if i == 0:
        return cfg.temperature, cfg.seed
    return cfg.agent_temperature, (cfg.seed or 0) + i


def packed(hits: list[Hit], chars: int | None, about: str = "") -> list[tuple[Hit, Doc]]:
    """`hits` (most relevant first) as documents that fit `chars` characters together
    (`pack_texts`: all shown while they fit, else clipped to a common share; the least
    relevant left out when even 200 characters each would not fit), each beside its hit:
    a passage left out (or an empty one) must not shift the numbers the model answers
    with onto the wrong hit. With `about`, a clipped passage shows its sentences nearest
    that (`excerpt`) instead of its opening."""
    allowance = pack_texts([len(h.text) for h in hits], chars)
    return [(h, doc_from_hit(h, n, about=about)) for h, n in zip(hits, allowance) if n > 0]


def ranked(st: KnowledgeState) -> list[Hit]:
    """C most relevant first: the passages that support a known fact (in the order
    the facts were learned), then the others in the order kept."""
    sources = list(dict.fromkeys(f.source for f in st.known if f.source in st.context))
    return [st.context[c] for c in sources] + [h for c, h in st.context.items() if c not in sources]


async def contextual_filter(llm: LLM, cfg: KAIRConfig, question: str, st: KnowledgeState, hits: list[Hit], i: int,
                            refilter: bool, view: Callable[[Hit, bool], Hit]) -> bool:  # fmt: skip
    """The paper's contextual filtering: the filter role keeps, verbatim, the passages of
    `hits` that belong in C. `refilter` (K changed): C's passages are judged again beside
    the new ones and C becomes what is kept (a passage that no longer fits
    `context_chars` beside the others leaves C); otherwise kept new passages join C.
    `view(hit, new)`: the passage as the filter reads it (an aid may clip it shorter than
    C keeps it). True if C changed."""
    temperature, seed = sampling(cfg, i)
    old = list(st.context.values()) if refilter else []
    new = [h for h in hits if h.chunk_id not in st.context]
    # most relevant first: passages that support a known fact (old or new), then the
    # rest of C, then the other new passages
    by_id = {h.chunk_id: h for h in old + new}
    sources = [c for c in dict.fromkeys(f.source for f in st.known) if c in by_id]
    shown = [by_id[c] for c in sources] + [h for h in old + new if h.chunk_id not in sources]
    if not shown:
        return False
    # C keeps a new passage as every role reads it (`doc_chars`); the filter reads each
    # one as `view` shows it, all packed to fit the prompt
    fresh = {h.chunk_id for h in new}
    keeps = {h.chunk_id: h.model_copy(update={"text": clip(h.text, cfg.doc_chars)}) if h.chunk_id in fresh else h for h in shown}
    pairs = packed([view(h, h.chunk_id in fresh) for h in shown], cfg.context_chars)
    shown, docs = [keeps[h.chunk_id] for h, _ in pairs], [d for _, d in pairs]
    f_in = FilterInput(
        question=question,
        known=st.known_lines(),
        passages=docs,
        supporting=[n for n, d in enumerate(docs, 1) if d.id in sources],
    )
    kept = await ContextFilter()(llm, f_in, temperature, seed)
    chosen = [shown[n - 1] for n in dict.fromkeys(kept.keep) if 1 <= n <= len(docs)]
    before = list(st.context)
    if refilter:
        st.context = {h.chunk_id: h for h in chosen}
    else:
        st.context.update((h.chunk_id, h) for h in chosen)
    with step("context_applied", by_agent=i) as s:
        s.outputs = {"refiltered": refilter, "kept": [h.chunk_id for h in chosen],
                     "dropped": [c for c in before if c not in st.context], "context": list(st.context)}  # fmt: skip
    return list(st.context) != before
