"""mRAG's searcher (Algorithm 2), the loop: it writes a query for the aspects it was
given, retrieves `docs_per_step` documents at a time, judges each, then decides to read
the next page of the same query, to change the query (saying why), or to stop; it
returns the documents it judged relevant, each with its explanation and the fact it
gives. Its model calls are the roles of `marag.agents.mrag.searcher` (`QueryWriter`,
`Judge` or `PageJudge`, `NextMove`); the loop cleans every query they write
(`clean_query`) and decides what the limits allow.

Limits (from the strategy config, `SearchLimits`) are enforced here, not left to the
model: a query is read at most `query_reuse_limit` times (then the move is forced to a
fresh query if the model offered one, else to end), an empty page ends that query the
same way, with `max_steps` the whole search stops after that many pages, and a spent
question budget ends it at once. Every page, judgement and move, forced or not, is in
this step's outputs.

Our aids, each off in the paper's mode, are named parts in
`marag.strategies.mrag.search_aids`: the search memory (`repeated`, `seed_query`), the
echo filter on queries (`on_topic`), anchored relevance (`anchored`), the rank floor
(`keep_rank_floor`), the question first (`opens_with_question`), the next hop
(`hop_query`); the move by rule (`model_moves=False`: `rule_move` reads on while pages
add relevant documents, then searches the question) and the dry-paging stop
(`_enforce`) change the paper's move where it is made.
"""

from __future__ import annotations

import asyncio

from marag.agents.mrag._shared import clip
from marag.agents.mrag.searcher import (
    ACTIONS,
    HopWriter,
    Judge,
    JudgeInput,
    Judgement,
    Move,
    NextInput,
    NextMove,
    PageJudge,
    PageJudgeInput,
    QueryInput,
    QueryWriter,
    rule_move,
)
from marag.agents.queries import QUERY_MAX_CHARS, clean_query, content_words, topic_words
from marag.agents.search.memory import SearchFn, SearchMemory
from marag.index.base import Hit
from marag.llm.base import LLM
from marag.llm.budget import budget_spent
from marag.strategies.mrag.search_aids import (
    anchored,
    hop_query,
    keep_rank_floor,
    on_topic,
    opens_with_question,
    repeated,
    seed_query,
)
from marag.strategies.mrag.search_io import (
    SAFETY_PAGES,
    Judged,
    SearcherInput,
    SearcherOutput,
    SearchLimits,
    SearchStep,
    as_judged,
)
from marag.trace import record_read, step


class _Queries:
    """One run's checks on a query before it is read: it has words and is not a move's
    name (in every mode), is on topic (`on_topic_queries`) and repeats no earlier query
    (`memory`); what fails is kept for the run's output."""

    def __init__(self, inp: SearcherInput, memory: SearchMemory, limits: SearchLimits, found: dict[str, tuple[Hit, Judged]]):
        self.memory, self.limits, self.found = memory, limits, found
        self.topic = content_words(f"{inp.question} {inp.aspects} {' '.join(inp.known)}")
        self.rejected: list[str] = []
        self.repeated: list[str] = []

    def usable(self, q: str) -> bool:
        ok = sum(c.isalpha() for c in q) >= 3 and q.lower().strip(" .") not in ACTIONS
        if ok and self.limits.on_topic_queries:
            ok = on_topic(q, self.topic, [j for _, j in self.found.values()])
        if q and not ok:
            self.rejected.append(q)
        return ok

    def repeats(self, q: str) -> bool:
        if self.limits.memory and repeated(self.memory, q):
            self.repeated.append(q)
            return True
        return False

    def fresh(self, new_query: str, query: str, topical: bool = True) -> bool:
        """A usable new query: not the current one, pages left, on topic (unless it is so
        by construction), not a repeat."""
        return (
            bool(new_query)
            and new_query != query
            and self.memory.pages_read(new_query) < self.limits.query_reuse_limit
            and (not topical or self.usable(new_query))
            and not self.repeats(new_query)
        )


class Searcher:
    name = "searcher"
    agents = (QueryWriter, HopWriter, Judge, PageJudge, NextMove)  # its own roles (trace steps "searcher.query", ...)
    _anchored = staticmethod(anchored)  # anchored relevance (`search_aids.anchored`)

    async def __call__(
        self,
        llm: LLM,
        search: SearchMemory | SearchFn,
        inp: SearcherInput,
        limits: SearchLimits,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> tuple[SearcherOutput, list[Hit]]:
        memory = search if isinstance(search, SearchMemory) else SearchMemory(search, unseen_only=limits.memory)
        with step(self.name, **inp.model_dump(mode="json")) as s:
            found: dict[str, tuple[Hit, Judged]] = {}  # relevant documents of this run
            queries = _Queries(inp, memory, limits, found)
            # what a relevant document must share a word with (`anchored`): the question, the
            # aspects and the titles (entity names) of what was found; never the judge's facts,
            # which a small model fills with whatever the document says first
            anchor = topic_words(f"{inp.question} {inp.aspects} {' '.join(line.split(': ', 1)[0] for line in inp.known)}")
            asked = content_words(inp.question) if limits.grounded_relevance else None  # a judged fact must add to these
            opening = opens_with_question(limits, memory)

            async def written() -> str:  # the query writer's query (checked: usable, not a repeat)
                # after the question's own page, a writer that repeats the question is not
                # asked again: with the default 1.5B model its retry repeated it too in 43 of
                # 43 such questions (HotpotQA 1-30 and 51-80)
                retries = 0 if opening else limits.query_retries
                return await self._first_query(llm, inp, queries, temperature, seed, retries)

            async def writers_query(query: str, read: list[Hit]) -> Move | None:  # `question_first`
                q = await written()
                # its fallback (a fact, the coordinator's input, the clipped question) is
                # checked here: a near-repeat of the question would read its page again
                why = "rule: the query writer's query, after the question's page"
                return Move(action="change", new_query=q, reason=why) if q and queries.fresh(q, query) else None

            async def next_hop(query: str, read: list[Hit]) -> Move | None:  # `hop_query`
                q = await hop_query(llm, inp, query, read, limits, temperature, seed)
                # on topic by construction (its entity is in the documents read)
                why = "rule: the next hop, from the first page"
                return Move(action="change", new_query=q, reason=why) if q and queries.fresh(q, query, topical=False) else None

            # with the move by rule, what follows the first page in place of the rule's move
            follow = writers_query if opening else next_hop if limits.hop_query else None
            query = " ".join(inp.question.split()) if opening else await written()  # whole, as a baseline searches it
            uses: dict[str, int] = {}  # pages read per query in this run (the reuse limit counts the whole question's)
            steps: list[SearchStep] = []
            first_page: list[tuple[Hit, Judged]] = []  # the first query's first page (rank floor)
            page_cap = limits.max_steps or SAFETY_PAGES
            for n in range(page_cap if query else 0):
                page = await memory.page(query, limits.docs_per_step)
                hits, offset = page.hits, page.offset
                uses[query] = memory.pages_read(query)
                judged = await self._judge(llm, inp, hits, page.ranks, query, limits, temperature, seed)
                if limits.anchored_relevance:
                    judged = [anchored(h, j, anchor, asked) for h, j in zip(hits, judged)]
                if n == 0:
                    first_page = list(zip(hits, judged))
                new = [(h, j) for h, j in zip(hits, judged) if j.relevant and h.chunk_id not in found]
                found.update((h.chunk_id, (h, j)) for h, j in new)
                anchor |= topic_words(" ".join(h.title for h, _ in new))  # a bridge entity found
                stop = "budget" if budget_spent() else None
                if stop is None and n == page_cap - 1:
                    stop = "max_steps" if limits.max_steps else "safety_pages"
                if stop:  # the outcome is forced: no next-move call
                    steps.append(SearchStep(query=query, offset=offset, docs=judged, action="end", forced=stop, skipped=page.skipped))
                    break
                hop = ""  # the query that follows the first page (`follow`), taken when fresh
                if limits.model_moves:  # the paper: the model continues, changes the query, or ends
                    move = await NextMove()(
                        llm,
                        NextInput(
                            question=inp.question,
                            aspects=inp.aspects,
                            query=query,
                            uses=uses[query],
                            reuse_limit=limits.query_reuse_limit,
                            steps_left=page_cap - n - 1 if limits.max_steps else None,
                            page=[f"{j.title or j.chunk_id}: {'relevant' if j.relevant else 'not relevant'}" + (f" ({j.fact})" if j.fact else "") for j in judged],
                            found=[j.line for _, j in found.values()],
                            new_on_page=len(new),
                            heuristic_fallback=limits.heuristic_fallbacks,
                        ),
                        temperature,
                        seed,
                    )
                else:
                    # after a page that added nothing, the question itself (what a
                    # retrieve-then-read baseline searches); the 1.5B's moves carried a new
                    # query there, the question in 4 of 47, which the dry page ran
                    move = rule_move(len(new), uses[query], limits.query_reuse_limit, then=inp.question)
                    followed = await follow(query, [h for h, _ in new] or hits) if n == 0 and follow else None
                    move, hop = (followed, followed.new_query) if followed else (move, "")
                new_query = clean_query(move.new_query)
                fresh = bool(hop) or queries.fresh(new_query, query)
                if move.action == "change" and not fresh and limits.memory:
                    # the model wants another query but offered none that is new: the newest
                    # fact no query has used, if any (else the move ends the search below)
                    seeded = seed_query(inp, memory, [f"{j.title}: {j.fact}" for _, j in found.values() if j.fact])
                    if seeded and queries.fresh(seeded, query):
                        new_query, fresh = seeded, True
                action, forced = self._enforce(
                    move.action,
                    fresh,
                    had_hits=bool(hits),
                    used_up=uses[query] >= limits.query_reuse_limit,
                    dry=limits.stop_dry_paging and not new,
                )
                steps.append(
                    SearchStep(
                        query=query, offset=offset, docs=judged, action=action, reason=move.reason, forced=forced, skipped=page.skipped
                    )
                )
                if action == "end":
                    break
                query = new_query if action == "change" else query
            keep_rank_floor(first_page, found, limits.keep_top_ranked)
            out = SearcherOutput(
                queries=list(uses),
                steps=steps,
                relevant=[j for _, j in found.values()],
                rejected_queries=queries.rejected,
                repeated_queries=queries.repeated,
            )
            s.outputs = out.model_dump(mode="json")
        return out, [h for h, _ in found.values()]

    async def _first_query(self, llm, inp: SearcherInput, queries: _Queries, temperature, seed, retries: int) -> str:
        memory, limits = queries.memory, queries.limits
        tried: list[str] = []
        for _ in range(1 + (retries if limits.memory else 0)):
            writer_in = QueryInput(
                question=inp.question, aspects=inp.aspects, known=inp.known, searched=list(memory.queries) + tried
            )
            q = clean_query((await QueryWriter()(llm, writer_in, temperature, seed)).query)
            if not queries.usable(q):
                break
            if not queries.repeats(q):
                return q
            tried.append(q)
        # repeated or unusable: the newest fact no query has covered (a bridge to the next
        # hop), else what the coordinator asked for, else the question. A repeat of an
        # earlier query continues past what was read (the memory pages unseen documents
        # only) while it has pages left; once it has read `query_reuse_limit` pages over
        # the question, nothing new is left to search: "" ends this searcher run.
        seeded = seed_query(inp, memory) if limits.memory else None
        query = seeded or clean_query(inp.aspects) or clip(inp.question, QUERY_MAX_CHARS)
        if memory.pages_read(query) >= limits.query_reuse_limit:
            with step("searcher.no_new_query", query=query) as s:
                s.status, s.outputs = "refused", {"ended": True, "pages_read": memory.pages_read(query)}
            return ""
        return query

    async def _judge(
        self, llm, inp, hits: list[Hit], ranks: list[int], query: str, limits: SearchLimits, temperature, seed
    ) -> list[Judged]:
        docs = as_judged(inp, hits, query, limits)
        record_read(hits)
        first = bool(ranks) and ranks[0] < limits.docs_per_step
        if not hits:
            verdicts: list[Judgement] = []
        elif limits.judge_pages:  # ours: one call for the page
            p_in = PageJudgeInput(
                question=inp.question, aspects=inp.aspects, documents=docs, first_page=first, first_page_rule=limits.heuristic_fallbacks
            )
            verdicts = (await PageJudge(len(docs))(llm, p_in, temperature, seed)).judgements
        else:  # the paper: one call per document
            verdicts = list(
                await asyncio.gather(
                    *(
                        Judge()(
                            llm,
                            JudgeInput(
                                question=inp.question,
                                aspects=inp.aspects,
                                document=d,
                                first_page=first,
                                first_page_rule=limits.heuristic_fallbacks,
                            ),
                            temperature,
                            seed,
                        )
                        for d in docs
                    )
                )
            )
        return [
            Judged(
                chunk_id=h.chunk_id,
                doc_id=h.doc_id,
                title=h.title,
                query=query,
                rank=rank,
                relevant=j.relevant,
                explanation=j.explanation,
                fact=j.fact,
                fallback=j.explanation.startswith("fallback:"),
            )
            for h, rank, j in zip(hits, ranks, verdicts)
        ]

    @staticmethod
    def _enforce(action: str, fresh: bool, had_hits: bool, used_up: bool, dry: bool = False) -> tuple[str, str | None]:
        """The move actually made, and the name of the limit that forced it (if any).
        `fresh`: the model offered a usable new query; `used_up`: the current query has
        read its `query_reuse_limit` pages; `dry` (the dry-paging stop, `stop_dry_paging`,
        with `guards`, ours): the page added nothing new, so "continue" becomes a change
        or the end (small models chose "continue" after every page)."""
        if action == "end":
            return "end", None
        if action == "change":
            # without a usable new query a change ends the search: reading the same query
            # again is not what was asked for, and asking again is how searches loop
            return ("change", None) if fresh else ("end", "no_new_query")
        blocked = (
            "no_more_results" if not had_hits else "query_reuse_limit" if used_up else "page_added_nothing" if dry else None
        )
        if blocked is None:
            return "continue", None
        return ("change" if fresh else "end"), blocked


__all__ = ["Judged", "Searcher", "SearcherInput", "SearcherOutput", "SearchLimits", "SearchStep", "seed_query"]
