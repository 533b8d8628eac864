"""mRAG's searcher (Algorithm 2), the loop: it writes a query for the aspects it was
given, retrieves `docs_per_step` documents at a time, judges each, then decides to read
the next page of the same query, to change the query (saying why), or to stop; it
returns the documents it judged relevant, each with its explanation and the fact it
gives. Its model calls are the roles of `marag.agents.mrag.searcher` (`QueryWriter`,
`Judge` or `PageJudge`, `NextMove`); the loop cleans every query they write
(`clean_query`) and decides what the limits allow.

Search memory (`memory=True`, ours; `marag.agents.search.memory`): pages hold only documents no
search of this question returned before, and a query that repeats an earlier one (same
content words) is rejected (recorded as a `searcher.query_rejected` step): the query
writer is asked for another (`query_retries` times), then the query is seeded by the
newest fact found that no query has used yet; a rejected new query in a move counts as
no new query.

Limits (from the strategy config) are enforced here, not left to the model: a query is
read at most `query_reuse_limit` times (then the move is forced to a fresh query if the
model offered one, else to end), an empty page ends that query the same way, with
`max_steps` the whole search stops after that many pages, and a spent question budget
ends it at once. Our guards, each off in the paper's mode: `stop_dry_paging` (a page
that added nothing ends paging of that query), `model_moves=False` (no next-move call:
`rule_move` reads on while pages add relevant documents, then searches the question),
`on_topic_queries`, `question_first` (the question's first searcher run opens with the
question itself; with `model_moves=False` the query writer's query follows its first
page) and the rank floor
`keep_top_ranked` (the top hits of the run's first query stay in what it returns,
marked `by_rank`, whatever the judge said: the retriever's top hits are what a
retrieve-then-read baseline reads, and small judges miss gold documents. Measured on
HotpotQA 51-70, 2 gold and 2 distractor paragraphs each: the default 1.5B model called
21 of 40 gold paragraphs relevant and 30 of 40 distractors not relevant (accuracy .64);
SmolLM2-135M 20 and 20, chance). Every page, judgement and move, forced or not, is in this step's
outputs.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from marag.agents.mrag._shared import Doc, clip, doc_from_hit
from marag.agents.mrag.searcher import (
    ACTIONS,
    HopInput,
    HopWriter,
    Judge,
    JudgeInput,
    Judgement,
    NextInput,
    Move,
    NextMove,
    PageJudge,
    PageJudgeInput,
    QueryInput,
    QueryWriter,
    rule_move,
)
from marag.agents.queries import QUERY_MAX_CHARS, clean_query, content_words, topic_words
from marag.agents.search.memory import SearchFn, SearchMemory, query_terms
from marag.index.base import Hit
from marag.llm.base import LLM
from marag.llm.budget import budget_spent
from marag.trace import record_read, step


class SearcherInput(BaseModel):
    question: str
    aspects: str = ""  # the coordinator's input
    known: list[str] = Field(default_factory=list)  # facts the team has so far: "title: fact"


SAFETY_PAGES = 50  # with no page cap (the paper's mode), a searcher run still ends here


class SearchLimits(BaseModel):
    docs_per_step: int = 2
    query_reuse_limit: int = 5
    max_steps: int | None = 6  # pages per searcher run (ours; None = the paper: no cap)
    doc_chars: int | None = 1000  # document text the judge reads (None = whole)
    focused: bool = False  # the judge reads the sentences nearest the query (`excerpt`), not the first doc_chars
    keep_top_ranked: int = 0  # rank floor: the run's first query's top N are kept whatever the judge said
    on_topic_queries: bool = False  # a query must share a content word with question/aspects
    # a document judged relevant must share a topic word with the question, the aspects or
    # the title of a document already found; else the verdict is overruled (ours)
    anchored_relevance: bool = False
    # with `anchored_relevance`: a document kept by it must also share a topic word with
    # that anchor in its title, or have the judge's fact as its own (half its words in it)
    # adding a word to the question's (ours, `Searcher._anchored`)
    grounded_relevance: bool = False
    stop_dry_paging: bool = False  # "continue" after a page that added nothing becomes change/end
    heuristic_fallbacks: bool = False  # judge: first page relevant; next move: continue if productive
    memory: bool = False  # unseen documents only, repeated queries rejected (module docstring)
    query_retries: int = 1  # with memory: new queries asked for after a repeated one
    judge_pages: bool = False  # one judge call per page instead of per document (ours)
    # the move after each page: a next-move model call (the paper), or (False, ours)
    # `rule_move`: the same query's next page while pages add relevant documents, then
    # the question itself
    model_moves: bool = True
    # with `model_moves=False`: the move after the first page is a query for the entity
    # that page's relevant documents give (`Searcher._hop`, ours), when there is one
    hop_query: bool = False
    # the first searcher run of a question opens with the question itself (what a
    # retrieve-then-read baseline searches, so the rank floor keeps its top hits), and the
    # query writer's query runs second, after that first page (ours; `Searcher.__call__`)
    question_first: bool = False


class Judged(BaseModel):
    chunk_id: str
    doc_id: str
    title: str = ""
    query: str = ""  # the query it was retrieved for
    rank: int  # 0-based rank under its query
    relevant: bool  # the verdict used (the judge's, unless `by_rank`)
    explanation: str
    fact: str = ""  # the entity or fact it gives toward the answer (seeds later queries)
    fallback: bool = False  # the judge's output was unusable: its fallback decided
    by_rank: bool = False  # kept by the rank floor (`keep_top_ranked`), not by the judge
    overruled: bool = False  # judged relevant, but off the question's topic (`anchored_relevance`)

    @property
    def line(self) -> str:
        return f"{self.title or self.chunk_id}: {self.fact or self.explanation}"


class SearchStep(BaseModel):
    query: str
    offset: int
    docs: list[Judged]
    action: str  # continue | change | end
    reason: str = ""
    forced: str | None = None  # which limit overrode the model's move, if any
    skipped: int = 0  # documents read before that this page passed over (search memory)


class SearcherOutput(BaseModel):
    queries: list[str]
    steps: list[SearchStep]
    relevant: list[Judged]
    rejected_queries: list[str] = Field(default_factory=list)  # off-topic queries not run
    repeated_queries: list[str] = Field(default_factory=list)  # rejected as repeats of earlier queries

    @property
    def query_reuses(self) -> int:
        return len(self.steps) - len({s.query for s in self.steps})


def seed_query(inp: SearcherInput, memory: SearchMemory, found: list[str] = ()) -> str | None:
    """A query from the newest fact found (this run's `found` lines first, then what the
    team knew) that no query has covered yet (the bridge to the next hop), or None."""
    used = set().union(*(query_terms(q) for q in memory.queries)) if memory.queries else set()
    for line in [*reversed(found), *reversed(inp.known)]:
        if ": " not in line:  # a title without a fact: nothing to bridge with
            continue
        fact = line.split(": ", 1)[1]
        terms = query_terms(fact)
        if terms and not terms <= used:
            return clip(fact, QUERY_MAX_CHARS)
    return None


class Searcher:
    name = "searcher"
    agents = (QueryWriter, HopWriter, Judge, PageJudge, NextMove)  # its own roles (trace steps "searcher.query", ...)

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
            topic = content_words(f"{inp.question} {inp.aspects} {' '.join(inp.known)}")
            # what a relevant document must share a word with: the question, the aspects and the
            # titles (entity names) of what was found; never the judge's facts, which a small
            # model fills with whatever the document says first
            anchor = topic_words(f"{inp.question} {inp.aspects} {' '.join(line.split(': ', 1)[0] for line in inp.known)}")
            asked = content_words(inp.question) if limits.grounded_relevance else None  # a judged fact must add to these
            rejected: list[str] = []
            repeated: list[str] = []
            found: dict[str, tuple[Hit, Judged]] = {}  # relevant documents of this run

            def usable(q: str) -> bool:  # has words, is not a move's name, is about the question
                ok = sum(c.isalpha() for c in q) >= 3 and q.lower().strip(" .") not in ACTIONS
                # on topic: shares a word with the question, the aspects, what was known, or
                # what this run's documents gave (a bridge entity is a fair next query)
                if ok and limits.on_topic_queries:
                    seen = topic.union(*(content_words(f"{j.title} {j.fact}") for _, j in found.values()))
                    ok = bool(content_words(q) & seen)
                if q and not ok:
                    rejected.append(q)
                return ok

            def repeats(q: str) -> bool:  # with memory: a near-duplicate of a query already run
                dup = memory.near_duplicate(q) if limits.memory else None
                if dup is not None:
                    repeated.append(q)
                    with step("searcher.query_rejected", query=q, repeats=dup[0], similarity=round(dup[1], 3)) as r:
                        r.status, r.outputs = "refused", {"rejected": q, "repeats": dup[0]}
                return dup is not None

            # `question_first`: only the question's first searcher run opens with the question
            # (a later run's question query would repeat it); the query writer's turn comes
            # after the first page
            opening = limits.question_first and not memory.queries

            async def written() -> str:  # the query writer's query (checked: usable, not a repeat)
                # after the question's own page, a writer that repeats the question is not
                # asked again: with the default 1.5B model its retry repeated it too in 43 of
                # 43 such questions (HotpotQA 1-30 and 51-80)
                retries = 0 if opening else limits.query_retries
                return await self._first_query(llm, inp, memory, limits, usable, repeats, temperature, seed, retries)

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
                    judged = [self._anchored(h, j, anchor, asked) for h, j in zip(hits, judged)]
                if n == 0:
                    first_page = list(zip(hits, judged))
                new = [(h, j) for h, j in zip(hits, judged) if j.relevant and h.chunk_id not in found]
                found.update((h.chunk_id, (h, j)) for h, j in new)
                anchor |= topic_words(" ".join(h.title for h, _ in new))  # a bridge entity found
                stop = None
                if budget_spent():
                    stop = "budget"
                elif n == page_cap - 1:
                    stop = "max_steps" if limits.max_steps else "safety_pages"
                if stop:  # the outcome is forced: no next-move call
                    steps.append(SearchStep(query=query, offset=offset, docs=judged, action="end", forced=stop, skipped=page.skipped))
                    break
                hop = ""  # a next-hop query (`hop_query`), taken when fresh
                if limits.model_moves:
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
                    if n == 0 and opening:  # the query writer's query, after the question's page
                        hop = await written()
                        # its fallback (a fact, the coordinator's input, the clipped question) is
                        # checked here: a near-repeat of the question would read its page again
                        hop = hop if hop and self._fresh(hop, query, memory, limits, usable, repeats) else ""
                    elif n == 0 and limits.hop_query:
                        hop = await self._hop(llm, inp, query, [h for h, _ in new] or hits, limits, temperature, seed)
                        # on topic by construction (its entity is in the documents read)
                        hop = hop if hop and self._fresh(hop, query, memory, limits, lambda q: True, repeats) else ""
                    if hop:
                        why = "rule: the query writer's query, after the question's page" if opening else "rule: the next hop, from the first page"
                        move = Move(action="change", new_query=hop, reason=why)
                new_query = clean_query(move.new_query)
                fresh = bool(hop) or self._fresh(new_query, query, memory, limits, usable, repeats)
                if move.action == "change" and not fresh and limits.memory:
                    # the model wants another query but offered none that is new: the newest
                    # fact no query has used, if any (else the move ends the search below)
                    seeded = seed_query(inp, memory, [f"{j.title}: {j.fact}" for _, j in found.values() if j.fact])
                    if seeded and self._fresh(seeded, query, memory, limits, usable, repeats):
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
            for h, j in first_page[: limits.keep_top_ranked]:  # rank floor (ours): the first query's top hits stay
                if h.chunk_id not in found:
                    found[h.chunk_id] = (h, j.model_copy(update={"relevant": True, "by_rank": True}))
            out = SearcherOutput(
                queries=list(uses),
                steps=steps,
                relevant=[j for _, j in found.values()],
                rejected_queries=rejected,
                repeated_queries=repeated,
            )
            s.outputs = out.model_dump(mode="json")
        return out, [h for h, _ in found.values()]

    async def _hop(self, llm, inp: SearcherInput, query: str, read: list[Hit], limits, temperature, seed) -> str:
        """`hop_query`: a query for what the question asks about the entity the first
        page's documents (`read`, found by `query`) give: one `HopWriter` call that reads
        them as the judge did. "" (the rule's move stands) when nothing was read, the
        budget is spent, or the entity named is empty, one the question already names, or
        not in the documents shown. The entity's name leads the query if the model left it
        out, and is the whole query when the model's adds no word to the question's. The
        caller takes the query only when it is fresh."""
        if not read or budget_spent():
            return ""
        docs = self._as_judged(inp, read, query, limits)
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

    @staticmethod
    def _as_judged(inp: SearcherInput, hits: list[Hit], query: str, limits: SearchLimits) -> list[Doc]:
        """The documents as the judge reads them (and the hop role after it): with
        `focused`, each one's excerpt for the query, aspects and question, else its first
        `doc_chars`."""
        about = f"{query} {inp.aspects} {inp.question}" if limits.focused else ""
        return [doc_from_hit(h, limits.doc_chars, about=about) for h in hits]

    @staticmethod
    def _anchored(hit: Hit, j: Judged, anchor: set[str], asked: set[str] | None = None) -> Judged:
        """The verdict, overruled to "not relevant" when a document judged relevant shares
        no topic word with the question, the aspects or the titles found so far (a small
        model's judge calls almost everything relevant; its queries then drift to the
        entities of unrelated documents). With `asked` (the question's content words; the
        `grounded_relevance` limit) a document kept so must also share such a word in its
        title, or have the judge's fact as its own (half its words in it) adding a word
        to the question's: the 1.5B's page judge often copies one verdict to every
        document of a page."""
        if not j.relevant or j.by_rank:
            return j
        keep = bool(topic_words(f"{hit.title} {hit.text}") & anchor)
        if keep and asked is not None and not topic_words(hit.title) & anchor:
            fact = content_words(j.fact)
            own = bool(fact) and len(fact & content_words(f"{hit.title} {hit.text}")) * 2 >= len(fact)
            keep = own and bool(fact - asked)
        return j if keep else j.model_copy(update={"relevant": False, "overruled": True})

    @staticmethod
    def _fresh(new_query: str, query: str, memory: SearchMemory, limits: SearchLimits, usable, repeats) -> bool:
        """A usable new query: not the current one, pages left, on topic, not a repeat."""
        return (
            bool(new_query)
            and new_query != query
            and memory.pages_read(new_query) < limits.query_reuse_limit
            and usable(new_query)
            and not repeats(new_query)
        )

    async def _first_query(self, llm, inp: SearcherInput, memory: SearchMemory, limits, usable, repeats, temperature, seed, retries: int) -> str:
        tried: list[str] = []
        for _ in range(1 + (retries if limits.memory else 0)):
            writer_in = QueryInput(
                question=inp.question, aspects=inp.aspects, known=inp.known, searched=list(memory.queries) + tried
            )
            q = clean_query((await QueryWriter()(llm, writer_in, temperature, seed)).query)
            if not usable(q):
                break
            if not repeats(q):
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
        docs = self._as_judged(inp, hits, query, limits)
        record_read(hits)
        first = bool(ranks) and ranks[0] < limits.docs_per_step
        if not hits:
            verdicts: list[Judgement] = []
        elif limits.judge_pages:
            p_in = PageJudgeInput(
                question=inp.question, aspects=inp.aspects, documents=docs, first_page=first, first_page_rule=limits.heuristic_fallbacks
            )
            verdicts = (await PageJudge(len(docs))(llm, p_in, temperature, seed)).judgements
        else:
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
        read its `query_reuse_limit` pages; `dry`: the page added nothing new and the
        dry-paging guard is on."""
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
