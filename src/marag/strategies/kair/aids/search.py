"""KAIR's aids to step 1 and 2, query planning and retrieval (ours; `paper=true` turns each
off). Each takes the config first and fills one place of the loop (`aids.Aids`)."""

from __future__ import annotations

from collections.abc import Callable

from marag.agents.kair import KnowledgeState
from marag.agents.queries import clean_query
from marag.agents.search.linked import linked_hits
from marag.agents.search.memory import SearchMemory, query_terms
from marag.index.base import Hit
from marag.strategies.kair.config import KAIRConfig
from marag.trace import step

# how relevant a query's content words are to a gap's: (query terms, gap terms) -> 0..1
Relevance = Callable[[frozenset[str], frozenset[str]], float]


def unseen_only(cfg: KAIRConfig, search) -> SearchMemory:
    """`memory`: a retrieval returns only passages that no earlier retrieval of the
    question returned (the paper's: each query's top `k`, read or not). Why: the search
    memory built for mRAG's searcher, where it ended repeated searches and judging a
    document twice at 26% fewer calls (benchmarks/RESULTS.md, "Search progress: mrag on
    30 HotpotQA questions"); not measured on its own for KAIR."""
    return SearchMemory(search, unseen_only=True)


def question_first(cfg: KAIRConfig, question: str, st: KnowledgeState, i: int) -> str | None:
    """`question_first`: the first agent's first query is the whole question (what a
    retrieve-then-read baseline searches), with no planner call; None elsewhere (the
    planner writes it). Why: the 1.5B planner's first query was the question verbatim in
    11 of 30 held-out MuSiQue questions and elsewhere carried a guessed answer ("... Day
    by J.K. Rowling"). Measured: docs/strategies/kair.md, "`question_first`"; benchmarks/
    RESULTS.md, "The question first". Collaborating agents, each given a gap, still plan."""
    if i or st.history:
        return None
    query = " ".join(question.split())
    with step("query_choice") as s:
        s.outputs = {"rejected": [], "chosen": query, "rule": "question_first"}
    return query


def agent_angles(cfg: KAIRConfig) -> int:
    """`agent_angles`: how many agents the planner is told there are (the paper's: it is
    not told, 1), so that each competing agent is asked, by its number, for its own angle
    and the agents do not all search alike. Not measured on its own."""
    return cfg.agents


def grounded(terms: frozenset[str], gap: frozenset[str], known: frozenset[str]) -> float:
    """The share of a query's content words that its gap or a known fact gives; 0 for a
    query that shares no word with its gap (`query_relevance=grounded`)."""
    if not terms or not terms & gap:
        return 0.0
    return len(terms & (gap | known)) / len(terms)


def grounded_relevance(cfg: KAIRConfig, st: KnowledgeState) -> Relevance:
    """`query_relevance=grounded` (off: not yet measured): a candidate query's relevance
    is `grounded` in the open gap and the known facts, not its overlap with the gap. Why:
    the first gap is the question, which is also the first query, so overlap with the gap
    and redundancy measure nearly the same thing, and a restatement of the question
    outscored the query naming the bridge a known fact gives ("... waterfall in the
    country where the Limpopo River is found?" chosen over "... waterfall in Zimbabwe?"
    with "... District, Zimbabwe" known; read in a MuSiQue report run)."""
    known = frozenset().union(*(query_terms(f.text) for f in st.known))
    return lambda terms, gap: grounded(terms, gap, known)


def gap_as_query(cfg: KAIRConfig, gaps: list[str]) -> list[tuple[str, int]]:
    """`gap_as_query`: when every candidate repeats an earlier query, the open gap itself
    is offered as the query (as a candidate for gap 1); the paper's cycle ends there.
    Why: the 1.5B planner's candidates often only repeat queries already run. Not measured
    on its own; the stop it delays is still common (16 of 24 tuning questions ended with
    every candidate, mostly the gap itself, a repeat: benchmarks/RESULTS.md, "KAIR: `k=5`
    against `k=10` paired on MuSiQue 1-30", "Tried, not kept: reading on")."""
    return [(clean_query(gaps[0]) if gaps else "", 1)]


async def linked_docs(cfg: KAIRConfig, retriever, question: str, st: KnowledgeState, memory: SearchMemory,
                      hits: list[Hit], query: str) -> list[Hit]:  # fmt: skip
    """`linked_docs`: after a search, up to that many unread documents that the question,
    the known facts' passages or the search's best two name by title (the one the
    question ranks highest), with no model call (`marag.agents.search.linked`, as in
    UniRAG and mRAG); recorded in `st.linked` so that C keeps them. Why: a multi-hop
    question's second entity is named on the first hop's page, not in any query. Measured:
    benchmarks/RESULTS.md, "KAIR reaches the next hop by link and reads excerpts" (with
    `answer_excerpts`: tuning MuSiQue 63-74 F1 .046 -> .144 at 13% more tokens)."""
    if not hits:
        return []
    sources = [memory.read[c].text for c in dict.fromkeys(f.source for f in st.known) if c in memory.read]
    texts = [question, *sources, *(h.text for h in hits[:2])]
    more = await linked_hits(retriever, question, texts, memory, cfg.linked_docs, query)
    st.linked += [h.chunk_id for h in more]
    return more
