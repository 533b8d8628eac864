"""What mRAG's searcher (`marag.strategies.mrag.search`) takes and gives: its input from
the coordinator, the limits the strategy's config sets (the paper's bounds and the
switches of our aids, `marag.strategies.mrag.search_aids`), each document's judgment,
each page read, the run's output; and the documents as its judge reads them."""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.mrag._shared import Doc, doc_from_hit
from marag.index.base import Hit


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
    # adding a word to the question's (ours, `search_aids.anchored`)
    grounded_relevance: bool = False
    stop_dry_paging: bool = False  # "continue" after a page that added nothing becomes change/end
    heuristic_fallbacks: bool = False  # judge: first page relevant; next move: continue if productive
    memory: bool = False  # unseen documents only, repeated queries rejected (`search_aids.repeated`)
    query_retries: int = 1  # with memory: new queries asked for after a repeated one
    judge_pages: bool = False  # one judge call per page instead of per document (ours)
    # the move after each page: a next-move model call (the paper), or (False, ours)
    # `rule_move`: the same query's next page while pages add relevant documents, then
    # the question itself
    model_moves: bool = True
    # with `model_moves=False`: the move after the first page is a query for the entity
    # that page's relevant documents give (`search_aids.hop_query`, ours), when there is one
    hop_query: bool = False
    # the first searcher run of a question opens with the question itself (what a
    # retrieve-then-read baseline searches, so the rank floor keeps its top hits), and the
    # query writer's query runs second, after that first page (ours; `search_aids.opens_with_question`)
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


def as_judged(inp: SearcherInput, hits: list[Hit], query: str, limits: SearchLimits) -> list[Doc]:
    """The documents as the judge reads them (and the hop role after it): with `focused`,
    each one's excerpt for the query, aspects and question, else its first `doc_chars`."""
    about = f"{query} {inp.aspects} {inp.question}" if limits.focused else ""
    return [doc_from_hit(h, limits.doc_chars, about=about) for h in hits]
