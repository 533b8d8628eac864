"""UniRAG's small-model aids: our additions to the paper's ReAct loop, each one function
with its setting, what it does, the failure it was added for and where that was measured
(docs/strategies/unirag.md, "Aids", lists them; the numbers are beside each setting in
`marag.strategies.unirag.config` and in benchmarks/RESULTS.md).

The loop (`marag.strategies.unirag.strategy`) calls an `Aids` at each place an aid may
act; `Aids.of(config)` fills each place with the aid its setting turns on, else with the
paper's behaviour there (`PAPER`). `paper=true` turns every setting off, so it composes
none of them and the loop never asks which mode it runs in.

Two aids are a setting where the paper's step is made, not a part of their own: `terse`
(the planner's thought cut at 120 characters, not 200: generated tokens are the slower
half of an agent's seconds on a CPU; `marag.agents.unirag.Planner`) and `answer_chars`
(off: the final answer's sources as excerpts, measured in docs/strategies/unirag.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from marag.agents.answerer import AnswerInput, Passage
from marag.agents.documents import excerpt, named_in
from marag.agents.layout import clip
from marag.agents.queries import QUERY_MAX_CHARS, clean_query, topic_words
from marag.agents.search.linked import linked_hits
from marag.agents.search.memory import SearchMemory, flattened
from marag.agents.unirag import FinalAnswer, FinalInput, PlanInput, PlanStep, SourcesAnswer
from marag.index.base import Hit, Retriever
from marag.strategies.aids import compose
from marag.strategies.unirag.config import DEFAULT_FLOOR, PAPER_SETTINGS, UniRAGConfig
from marag.strategies.unirag.state import Run
from marag.trace import step


# -- searching ----------------------------------------------------------------------------
def unseen_only(cfg: UniRAGConfig, search) -> SearchMemory:
    """`memory`: a search returns only documents no earlier search of the question
    returned (`marag.agents.search.memory`), so the planner's next query brings something
    new. Not measured alone for UniRAG: the search memory's effect was measured with
    mRAG's searcher (benchmarks/RESULTS.md, "Search progress")."""
    return SearchMemory(search, unseen_only=True)


def repeated_query(cfg: UniRAGConfig, run: Run, query: str) -> str | None:
    """`memory`: a query that repeats an earlier one is refused, which ends the search
    (or, with `second_chance`, goes back to the planner once): the reference model's
    planner repeated itself and the loop ended after one search (benchmarks/RESULTS.md,
    "UniRAG after its trajectories were read with the reference model")."""
    return "repeated query" if run.memory.near_duplicate(query) else None


def related_query(cfg: UniRAGConfig, run: Run, query: str) -> str | None:
    """`related_queries`: a query sharing no topic word with the question or the evidence
    so far, or a sentence of the evidence copied as the query, is refused like a repeat.
    The 0.5B reference model's queries included "No information yet", copied from the
    prompt; a copied sentence finds the document it came from, which the search memory no
    longer returns. Measured with `question_first` and `answer_from` (RESULTS.md, as
    `repeated_query`)."""
    evidence = run.evidence()
    if not topic_words(query) & topic_words(" ".join([run.question, *evidence])):
        return "unrelated query"
    words = flattened(query)
    if len(words.split()) >= 5 and any(words in flattened(text) for text in evidence):
        return "query copied from the evidence"
    return None


async def second_chance(cfg: UniRAGConfig, ask: Callable[[PlanInput], Awaitable[PlanStep]], run: Run, plan_in: PlanInput,
                        why: str, query: str) -> PlanStep:  # fmt: skip
    """`second_chance` (off): a refused query is sent back to the planner once, told which
    queries it used, and whatever it decides then stands (a refused query again ends the
    search). The default until 2026-12-07; with the default model it wrote a new query 4
    times of 33 (HotpotQA 51-80; 29 times it repeated itself), so the extra call bought
    nothing on most questions (`marag.strategies.unirag.config`)."""
    with step("guard", rule=why, query=query) as g:
        g.status = "refused"
    return await ask(plan_in.model_copy(update={"used": list(run.memory.queries)}))


def cleaned_query(cfg: UniRAGConfig, text: str) -> str:
    """`clean_queries`: the planner's query without the bookkeeping a small model copies
    into it from the prompt (`marag.agents.queries.clean_query`). Not measured alone."""
    return clean_query(text)


def question_first(cfg: UniRAGConfig, run: Run) -> str | None:
    """`question_first`: the first search is for the question itself, and the planner
    plans from what it found, with no thought of ours in the memory (the reference model
    copied one into its next query). Its first queries had been "No information yet" and
    "godfather of the German musician whose godfather is whom?" (benchmarks/RESULTS.md,
    "UniRAG after its trajectories were read with the reference model": HotpotQA 1-30 F1
    .187 -> .318 with `related_queries` and `answer_from`)."""
    return None if run.steps else clip(run.question, QUERY_MAX_CHARS)


def search_first(cfg: UniRAGConfig, run: Run, searches: int) -> bool:
    """`search_first`: a final answer before any search is turned into a search for the
    question, recorded as a guard step (small models answer at once, from nothing). Not
    measured alone. True when the answer is refused."""
    if searches:
        return False
    with step("guard", rule="search_first: a final answer before any search") as g:
        g.outputs = {"query": clip(run.question, QUERY_MAX_CHARS)}
    return True


# -- reading ------------------------------------------------------------------------------
def focused(cfg: UniRAGConfig, query: str, question: str) -> str:
    """`focused`: what the reflector's documents are excerpted about, the query and the
    question: it reads each document's first sentence and the sentences nearest them
    within `doc_chars=350`, not its first 600 characters. HotpotQA 51-62: F1 .764 -> .848,
    evaluated prompt tokens a question 1,773 -> 1,444 (docs/strategies/unirag.md)."""
    return f"{query} {question}"


def later_docs_shorter(cfg: UniRAGConfig, i: int) -> int | None:
    """`later_doc_chars=175`: how much of a search's `i`-th document (from 0) the
    reflector reads: the first two within `doc_chars`, the rest within 175 characters.
    Tuning: MuSiQue 51-62 F1 .125 -> .275, ~2,005 -> ~1,827 evaluated tokens a question;
    held out it cost answers (HotpotQA 1-30 .767 -> .712): kept as tuning chose it
    (docs/strategies/unirag.md, "Later documents shorter")."""
    if i < 2:
        return cfg.doc_chars
    return cfg.later_doc_chars if cfg.doc_chars is None else min(cfg.later_doc_chars, cfg.doc_chars)


def evidence_floor(cfg: UniRAGConfig, query: str, hits: list[Hit], n: int | None = None) -> list[Hit]:
    """`evidence_floor=2`: a search whose reflection gives no evidence keeps its top `n`
    documents (`evidence_floor`), clipped, as evidence (an "evidence_floor" step). The 0.5B
    reference model's reflector answered "nothing found" to 8 of 8 searches of a question
    whose first search held both gold documents (`marag.strategies.unirag.config`)."""
    floor = hits[: n or cfg.evidence_floor]
    if not floor:
        return []
    with step("evidence_floor", query=query) as g:
        g.outputs = {"chunk_ids": [h.chunk_id for h in floor]}
    return floor


def first_pass_floor(cfg: UniRAGConfig, query: str, hits: list[Hit]) -> list[Hit]:
    """Not an aid: passages no reflector read (a first pass taken over, `solve_from`) get
    the evidence floor in every mode, 2 when the floor is off; without it a first pass
    would leave the working memory empty."""
    return evidence_floor(cfg, query, hits, cfg.evidence_floor or DEFAULT_FLOOR)


def named_docs(cfg: UniRAGConfig, run: Run, query: str) -> list[Hit]:
    """`named_docs=4`: after each search, up to N documents read so far that the question
    or a source document names by title join the sources (a "named_docs" step). The
    reference model's reflector cited no document in 69 searches, and a two-hop question's
    second document is usually named in the first: HotpotQA 51-80, the sources held .617
    of the gold documents, all documents read .933; with it .867 (benchmarks/RESULTS.md,
    "UniRAG: documents the question or its sources name join the sources")."""
    named = [h for h in named_in(run.naming_texts(), run.memory.read.values()) if h.chunk_id not in run.cited][: cfg.named_docs]
    if named:
        with step("named_docs", query=query) as g:
            g.outputs = {"chunk_ids": [h.chunk_id for h in named]}
    return named


async def linked_docs(cfg: UniRAGConfig, retriever: Retriever, run: Run, query: str) -> list[Hit]:
    """`linked_docs=1`: after each search, the N documents not read yet that the question
    or a source names by title, the question's best among them, join the sources
    (`marag.agents.search.linked`; a local index only): the next hop's article is often
    named in the first but ranked by no query the planner writes. MuSiQue 21-100, the top 2
    documents plus the linked one held more gold documents than the top 3
    (benchmarks/RESULTS.md, "UniRAG looks up the documents its sources name")."""
    return await linked_hits(retriever, run.question, run.naming_texts(), run.memory, cfg.linked_docs, query)


def answer_from_sources(cfg: UniRAGConfig, run: Run) -> tuple[Any, Any]:
    """`answer_from="sources"`: the final answer reads the evidence's source documents
    whole (at most `answer_passages`; excerpts with `answer_chars`) with the one-shot
    answerer's prompt, not the working memory, whose first thought a small model fills
    with a guessed answer that the final answer repeats (benchmarks/RESULTS.md, "UniRAG
    after its trajectories were read ..." and "UniRAG's final answer: how many sources it
    reads"). Returns the answering agent and its input."""
    sources = list(run.cited.values())[: cfg.answer_passages]
    passages = [Passage(title=h.title, text=excerpt(h.text, run.question, cfg.answer_chars) if cfg.answer_chars else h.text) for h in sources]
    return SourcesAnswer(cfg.style()), AnswerInput(question=run.question, passages=passages)


# -- the composition ------------------------------------------------------------------------
async def _nothing_linked(cfg: UniRAGConfig, *_: Any) -> list[Hit]:
    return []


# place -> what the paper does there (each takes the config first, as the aids do)
PAPER: dict[str, Callable[..., Any] | None] = {
    "memory": lambda cfg, search: SearchMemory(search, unseen_only=False),  # each query's top k, read or not
    "query": lambda cfg, text: clip(text, QUERY_MAX_CHARS),  # the planner's query as written
    "repeated": lambda cfg, run, query: None,  # no query is refused ...
    "unrelated": lambda cfg, run, query: None,
    "ask_again": None,  # ... (and a refused one, with aids, ends the search)
    "first_query": lambda cfg, run: None,  # the planner writes every query
    "search_first": lambda cfg, run, searches: False,  # a final answer is taken when given
    "about": lambda cfg, query, question: "",  # a clipped document shows its opening ...
    "doc_chars": lambda cfg, i: cfg.doc_chars,  # ... within `doc_chars`, each alike
    "floor": lambda cfg, query, hits: [],  # no evidence when the reflector finds none
    "unread_floor": first_pass_floor,
    "named": lambda cfg, run, query: [],  # the evidence's sources only
    "linked": _nothing_linked,
    "final_answer": lambda cfg, run: (FinalAnswer(cfg.style()), FinalInput(question=run.question, memory=run.steps)),
}

# (setting, the place it fills, its aid), each on when its setting differs from the paper's
AIDS: tuple[tuple[str, str, Callable[..., Any]], ...] = (
    ("memory", "memory", unseen_only),
    ("memory", "repeated", repeated_query),
    ("related_queries", "unrelated", related_query),
    ("second_chance", "ask_again", second_chance),
    ("clean_queries", "query", cleaned_query),
    ("question_first", "first_query", question_first),
    ("search_first", "search_first", search_first),
    ("focused", "about", focused),
    ("later_doc_chars", "doc_chars", later_docs_shorter),
    ("evidence_floor", "floor", evidence_floor),
    ("named_docs", "named", named_docs),
    ("linked_docs", "linked", linked_docs),
    ("answer_from", "final_answer", answer_from_sources),
)


def _on(cfg: UniRAGConfig, setting: str) -> bool:
    # `second_chance` is ours but not among PAPER_SETTINGS: it is off by default and acts
    # only on a query another aid refused
    return getattr(cfg, setting) != PAPER_SETTINGS.get(setting, False)


@dataclass(frozen=True)
class Aids:
    """Each place of the loop where an aid may act, bound to the config: the aid when its
    setting is on, else the paper's behaviour (`ask_again` None: a refusal ends the search)."""

    memory: Callable[..., SearchMemory]
    query: Callable[[str], str]
    repeated: Callable[[Run, str], str | None]
    unrelated: Callable[[Run, str], str | None]
    ask_again: Callable[..., Awaitable[PlanStep]] | None
    first_query: Callable[[Run], str | None]
    search_first: Callable[[Run, int], bool]
    about: Callable[[str, str], str]
    doc_chars: Callable[[int], int | None]
    floor: Callable[[str, list[Hit]], list[Hit]]
    unread_floor: Callable[[str, list[Hit]], list[Hit]]
    named: Callable[[Run, str], list[Hit]]
    linked: Callable[..., Awaitable[list[Hit]]]
    final_answer: Callable[[Run], tuple[Any, Any]]

    @classmethod
    def of(cls, cfg: UniRAGConfig) -> Aids:
        """The aids `cfg` turns on, the paper's behaviour elsewhere."""
        return compose(cls, cfg, PAPER, AIDS, lambda setting: _on(cfg, setting))
