"""Our aids inside mRAG's searcher (`marag.strategies.mrag.search`), one function each:
what it does, the failure of a small model it was added for, and where that was
measured (docs/strategies/mrag.md, "Aids"; benchmarks/RESULTS.md). Each is switched by
a field of `SearchLimits`, which `MRAGConfig.search_limits` fills from the strategy's
config; the paper's mode (`paper=True`) switches every one of them off. Two more live
where the paper's step they change is: the dry-paging stop (`Searcher._enforce`, `dry`)
and the heuristic fallbacks of the judge and the next move (their roles in
`marag.agents.mrag.searcher`)."""

from __future__ import annotations

from marag.agents.mrag._shared import clip
from marag.agents.mrag.searcher import HopInput, HopWriter
from marag.agents.queries import QUERY_MAX_CHARS, clean_query, content_words, topic_words
from marag.agents.search.memory import SearchMemory, query_terms
from marag.index.base import Hit
from marag.llm.base import LLM
from marag.llm.budget import budget_spent
from marag.strategies.mrag.search_io import Judged, SearcherInput, SearchLimits, as_judged
from marag.trace import step


def used_terms(memory: SearchMemory | None) -> set[str]:
    """The content words of every query this question has run."""
    return set().union(*(query_terms(q) for q in memory.queries)) if memory and memory.queries else set()


def seed_query(inp: SearcherInput, memory: SearchMemory, found: list[str] = ()) -> str | None:
    """Search memory (`memory`): a query from the newest fact found (this run's `found`
    lines first, then what the team knew) that no query has covered yet (the bridge to
    the next hop), or None; it replaces a query the writer repeated. With SmolLM2-135M
    the search-progress work (memory, bridge-seeded queries, ...) took repeated searches
    from .53 a question to 0 at 26% fewer calls (benchmarks/RESULTS.md, "Search
    progress")."""
    used = used_terms(memory)
    for line in [*reversed(found), *reversed(inp.known)]:
        if ": " not in line:  # a title without a fact: nothing to bridge with
            continue
        fact = line.split(": ", 1)[1]
        terms = query_terms(fact)
        if terms and not terms <= used:
            return clip(fact, QUERY_MAX_CHARS)
    return None


def repeated(memory: SearchMemory, query: str) -> bool:
    """Search memory (`memory`): the query repeats one this question already ran (same
    content words), recorded as a refused `searcher.query_rejected` step; the writer is
    then asked again (`query_retries`), else `seed_query` seeds one. With the pages of
    unseen documents only, no document is judged twice (SmolLM2-135M: 6.9 judge calls a
    question instead of 14.3, docs/research-notes.md)."""
    dup = memory.near_duplicate(query)
    if dup is not None:
        with step("searcher.query_rejected", query=query, repeats=dup[0], similarity=round(dup[1], 3)) as r:
            r.status, r.outputs = "refused", {"rejected": query, "repeats": dup[0]}
    return dup is not None


def on_topic(query: str, topic: set[str], found: list[Judged]) -> bool:
    """Echo filter on queries (`on_topic_queries`, with `guards`): the query shares a
    content word with the question, the aspects, what was known, or what this run's
    documents gave (a bridge entity is a fair next query). Small models' query writers
    fill the slot with a move's name or an unrelated phrase."""
    seen = topic.union(*(content_words(f"{j.title} {j.fact}") for j in found))
    return bool(content_words(query) & seen)


def anchored(hit: Hit, j: Judged, anchor: set[str], asked: set[str] | None = None) -> Judged:
    """Anchored relevance (`anchored_relevance`, with `guards`): the verdict, overruled
    to "not relevant" when a document judged relevant shares no topic word with the
    question, the aspects or the titles found so far. The 0.5B reference model's judge
    called ~90% of documents relevant, and its "facts" then pulled queries to pizza
    chains for a reggae question. With `asked` (the question's content words; the
    `grounded_relevance` limit, off: it did not measure better) a document kept so must
    also share such a word in its title, or have the judge's fact as its own (half its
    words in it) adding a word to the question's: the 1.5B's page judge often copies one
    verdict to every document of a page. The rank floor's documents are never overruled."""
    if not j.relevant or j.by_rank:
        return j
    keep = bool(topic_words(f"{hit.title} {hit.text}") & anchor)
    if keep and asked is not None and not topic_words(hit.title) & anchor:
        fact = content_words(j.fact)
        own = bool(fact) and len(fact & content_words(f"{hit.title} {hit.text}")) * 2 >= len(fact)
        keep = own and bool(fact - asked)
    return j if keep else j.model_copy(update={"relevant": False, "overruled": True})


def opens_with_question(limits: SearchLimits, memory: SearchMemory) -> bool:
    """The question first (`question_first`): the question's first searcher run reads the
    question's own first page, whole, as a retrieve-then-read baseline searches it (so the
    rank floor keeps its top hits); with the move by rule the query writer's query follows
    that page. Only the first run: a later run's question query would repeat it. The
    1.5B query writer dropped the question's names or added a guess ("painter known for
    his precisionist depictions of nature" for a question on the Brisbane Institute), and
    the rank floor then kept that query's hits instead."""
    return limits.question_first and not memory.queries


def keep_rank_floor(first_page: list[tuple[Hit, Judged]], found: dict[str, tuple[Hit, Judged]], n: int) -> None:
    """The rank floor (`keep_top_ranked`): the top `n` hits of the run's first query stay
    in what the run returns, marked `by_rank`, whatever the judge said: they are what a
    retrieve-then-read baseline reads, and small judges are close to chance (HotpotQA
    51-70, 2 gold and 2 distractor paragraphs each: the 1.5B called 21 of 40 gold
    paragraphs relevant and 30 of 40 distractors not relevant, SmolLM2-135M 20 and 20)."""
    for h, j in first_page[:n]:
        if h.chunk_id not in found:
            found[h.chunk_id] = (h, j.model_copy(update={"relevant": True, "by_rank": True}))


async def hop_query(
    llm: LLM, inp: SearcherInput, query: str, read: list[Hit], limits: SearchLimits, temperature: float, seed: int | None
) -> str:
    """The next hop by name (`next_move="hop"`, off: it did not measure better): a query
    for what the question asks about the entity the first page's documents (`read`,
    found by `query`) give: one `HopWriter` call that reads them as the judge did. ""
    (the rule's move stands) when nothing was read, the budget is spent, or the entity
    named is empty, one the question already names, or not in the documents shown. The
    entity's name leads the query if the model left it out, and is the whole query when
    the model's adds no word to the question's. The caller takes it only when fresh. The
    1.5B's searcher read the first query's pages while its judge called nearly
    everything relevant, so second-hop pages were rarely searched."""
    if not read or budget_spent():
        return ""
    docs = as_judged(inp, read, query, limits)
    hop = await HopWriter()(llm, HopInput(question=inp.question, documents=docs), temperature, seed)
    entity = clean_query(hop.entity)
    named, asked = content_words(entity), content_words(inp.question)
    shown = " ".join(f"{d.title} {d.text}" for d in docs).lower()
    if not named or named <= asked or entity.lower() not in shown:
        return ""
    q = clean_query(hop.query)
    in_query = content_words(q)
    if in_query <= asked | named:  # the question copied: the entity alone
        return entity
    return q if named <= in_query else clean_query(f"{entity} {q}")
