"""Our aids around mRAG's coordinator loop, for small models: each one function with its
setting, what it does, the failure it was added for and where that was measured
(docs/strategies/mrag.md, "Aids", lists every aid with its measured effect). `Aids.of`
composes the ones a config turns on into the slots the loop in `marag.strategies.mrag`
calls; each slot's default is the paper's behaviour, so `paper=True` composes none and
the loop does not ask which mode it runs in.

The searcher's own aids are in `marag.strategies.mrag.search_aids`. A few aids are a
setting where the paper's step is made, not a part of their own: the hints (`hints`,
the coordinator's prompt names the fixed sequence's next agent in its last line; without
it the 1.5B default named the searcher in almost every state, 6 of 12 probe states
sensible, 12 of 12 with it), the fixed sequence's opening (`plan_first`), the late
answer (`late_answer`, in `MRAG.solve`), the sequence instead of the coordinator
(`routing`), the searcher's report by title (`report_titles`), the answerer on the
question alone (`answer_guidance=False`), unlabelled documents (`unlabelled_docs`),
excerpts for the readers (`answer_chars`) and the bounded prompts (`history_window`,
`report_chars`, `coordinator_input_chars`); their measurements are beside their fields
in `marag.strategies.mrag.config`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

from marag.agents.mrag import useful_input
from marag.agents.queries import topic_words
from marag.agents.search.linked import linked_hits
from marag.agents.search.memory import query_terms
from marag.agents.search.subset import rank_within
from marag.index.base import Hit, Retriever
from marag.strategies.mrag.config import MRAGConfig
from marag.strategies.mrag.search_aids import used_terms
from marag.strategies.mrag.search_io import Judged
from marag.strategies.mrag.state import State
from marag.trace import step

Pick = tuple[str, str]  # the agent that runs and its input


# -- turns an aid takes from the coordinator (no coordinator call) ----------------------------
def no_progress_guard(cfg: MRAGConfig, st: State) -> Pick | None:
    """The no-progress guard (`progress_guard`): after `max_noops` agent runs in a row
    that changed nothing (no new document in S, the same response, plan and notes) the
    turn is steered (`steer`), with no coordinator call. Part of the search-progress
    work that took SmolLM2-135M's mRAG from 25.8 to 19.1 calls a question with no
    repeated search (benchmarks/RESULTS.md, "Search progress"; docs/research-notes.md)."""
    return steer(cfg, st) if st.noops >= cfg.max_noops else None


def steer(cfg: MRAGConfig, st: State) -> Pick:
    """The no-progress guard's pick, recorded as a "guard" step: the searcher with the
    newest fact on the question's topic no query has used (the bridge to a second hop),
    else the searcher if it never ran, neither past `max_searcher_runs`; else the planner
    (if it never ran, there is no response and `plan_first`), else the answerer (if S
    changed since the last answer or there is none), else the finisher."""
    used = used_terms(st.memory)
    # a bridge fact is one about the question's topic (its words, or a title found):
    # a small model's judge fills `fact` with whatever a document says first
    topic = topic_words(" ".join([st.question, *(h.title for h in st.docs.values())]))
    runs = cfg.max_searcher_runs
    can_search = runs is None or st.ran.count("searcher") < runs
    bridge = next(
        (
            j.fact
            for j in reversed(list(st.why.values()))
            if j.fact and query_terms(j.fact) and not query_terms(j.fact) <= used and topic_words(j.fact) & topic
        ),
        None,
    )
    if bridge and can_search:
        pick = ("searcher", bridge)
    elif "searcher" not in st.ran and can_search:
        pick = ("searcher", "")
    elif "planner" not in st.ran and st.response is None and cfg.plan_first:
        pick = ("planner", "")
    elif st.response is None or st.answered_with != len(st.docs):
        pick = ("answerer", "")
    else:
        pick = ("finisher", "")
    st.guards, st.steers, st.noops = st.guards + 1, st.steers + 1, 0
    with step("guard", rule=f"no progress in {cfg.max_noops} agent calls") as s:
        s.outputs = {"agent": pick[0], "input": pick[1]}
    return pick


def finish_on_answer(cfg: MRAGConfig, st: State) -> Pick | None:
    """The run's end after an answer (`finish_on_answer`, with the coordinator): once the
    answerer has written a response, the finisher runs without a coordinator turn (a
    "guard" step, rule "finish_on_answer"). With the hints the 1.5B's turn there named the
    finisher after all 30 answers of HotpotQA 51-80, at ~120 evaluated prompt and ~50
    generated tokens a question; replayed with it, the same 30 answers, median calls 9 -> 8."""
    if not (st.ran and st.ran[-1] == "answerer" and st.response):
        return None
    with step("guard", rule="finish_on_answer") as s:
        s.outputs = {"agent": "finisher", "input": ""}
    return ("finisher", "")


# each turn-taking aid and the settings it acts under, asked in this order
TURN_AIDS: tuple[tuple[Callable[[MRAGConfig, State], Pick | None], Callable[[MRAGConfig], bool]], ...] = (
    (no_progress_guard, lambda cfg: cfg.progress_guard),
    (finish_on_answer, lambda cfg: cfg.finish_on_answer and cfg.routing == "coordinator"),
)


# -- overrides of the coordinator's pick ----------------------------------------------------
def repetition_guard(cfg: MRAGConfig, st: State, picked: str) -> str | None:
    """Repetition (`guards`): picking the agent that ran the last `max_same_agent_in_row`
    times again is overridden by the fixed sequence's next agent (a "guard" step). In
    the paper's mode (no hints, no guards) SmolLM2-135M's coordinator went from the
    planner to the answerer or repeated itself until the 80-call budget
    (benchmarks/RESULTS.md, "mRAG vs vanilla_rag vs mRAG `paper=true`")."""
    k = cfg.max_same_agent_in_row
    if st.ran[-k:] != [picked] * k:
        return None
    st.guards += 1
    with step("guard", picked=picked, rule=f"{picked} ran {k} times in a row") as s:
        s.outputs = {"agent": st.next_in_sequence(cfg.plan_first)}
    return s.outputs["agent"]


def needs_a_response(st: State, agent: str) -> str | None:
    """Preconditions (`guards`): the validator and the finisher need a response (the
    reviser always does: the paper has it refuse). A pick too early is a refusal step
    (status "refused", no model call, one agent call spent). In the paper's mode
    SmolLM2-135M's coordinator went from the planner to the answerer, with nothing
    searched (benchmarks/RESULTS.md, "mRAG vs vanilla_rag vs mRAG `paper=true`")."""
    if agent in ("validator", "finisher") and st.response is None:
        return "there is no response yet: the answerer must run first"
    return None


def needs_a_search(st: State, agent: str) -> str | None:
    """Preconditions (`guards`): the answerer needs a search to have run (as
    `needs_a_response`)."""
    return "nothing has been searched yet" if agent == "answerer" and "searcher" not in st.ran else None


def searcher_cap(runs: int, st: State, agent: str) -> str | None:
    """Searcher runs (`max_searcher_runs`, 2): picking the searcher after that many runs
    is a refusal. The 0.5B reference model sent the searcher 10-16 times a question."""
    if agent == "searcher" and st.ran.count("searcher") >= runs:
        return f"the searcher has run {runs} times, its limit for a question"
    return None


def after_refusal(st: State) -> str:
    """Where a refused turn goes (`guards`; without them the coordinator chooses again):
    the answerer when a search ran and S changed since the last answer (or there is
    none), else the fixed sequence's next agent (skipping the planner). Its agent gets no
    input: the coordinator's was meant for another agent."""
    if "searcher" in st.ran and (st.response is None or st.answered_with != len(st.docs)):
        return "answerer"
    return st.next_in_sequence(plan=False)


def question_echo(text: str, question: str) -> str:
    """Echo filter (`guards`), in the history: an input that only repeats the question is
    left out of the report of the run (the coordinator reads the question at the top of
    its prompt; the default model's input was the question verbatim in most turns). Its
    other half, `useful_input`, drops a coordinator input that only names an agent, copies
    its own instructions or has no words, before it reaches the agent."""
    return "" if _same_text(text, question) else text


def _same_text(a: str, b: str) -> bool:
    """The same words, ignoring case, spacing and the punctuation around them."""
    return bool(a.strip()) and _flat(a) == _flat(b)


def _flat(text: str) -> str:
    return " ".join(text.split()).strip(" .?!\"'").lower()


# -- what S holds and how it is read -------------------------------------------------------
async def linked_docs(retriever: Retriever, n: int, st: State, query: str) -> list[Hit]:
    """Linked documents (`linked_docs`, 1): after each searcher run, the `n` documents not
    read yet that the question or a document of S names by title, the best for the
    question first, join S unjudged (`marag.agents.search.linked`, as in UniRAG): the
    second hop's article, which a one-search run's queries do not find. HotpotQA 51-62
    (n=12, the 1.5B): F1 .479 -> .529, gold recall in sources .792 -> .875."""
    if st.memory is None:
        return []
    texts = [st.question, *(h.text for h in st.docs.values())]  # (S is read: every page is marked in the memory)
    hits = await linked_hits(retriever, st.question, texts, st.memory, n, query)
    for h in hits:
        st.docs.setdefault(h.chunk_id, h)
    return hits


async def rank_for_question(retriever: Retriever, st: State) -> list[tuple[Hit, Judged | None]]:
    """S ranked for the question (`rank_docs`, off: it did not measure better): S in the
    order the question and S's findings rank it, the run's retriever searching only S (no
    model call; a "documents_ranked" step; a remote engine keeps retrieval order), ranked
    again only when S has grown. Tuning HotpotQA 51-62 .529 -> .647; held out MuSiQue
    1-30 .354 -> .333, HotpotQA 31-50 .452 -> .392."""
    ranked = st.ranked_docs()
    if st.read_order is None or st.read_order[0] != len(st.docs):
        why = {h.chunk_id: j for h, j in ranked}
        about = " ".join([st.question, *st.facts()])
        order = await rank_within(retriever, [h for h, _ in ranked], about, label="documents_ranked")
        st.read_order = (len(st.docs), [(h, why[h.chunk_id]) for h in order])
    return st.read_order[1]


# -- the composition ------------------------------------------------------------------------
def _no_pick(st: State, picked: str) -> str | None:
    return None


def _no_route(st: State) -> str | None:
    return None


def _as_written(text: str, *_: str) -> str:
    return text


async def _none_linked(st: State, query: str) -> list[Hit]:
    return []


async def _retrieval_order(st: State) -> list[tuple[Hit, Judged | None]]:
    return st.ranked_docs()


@dataclass(frozen=True)
class Aids:
    """The aids a config turns on, in the slots the loop calls; each default is the
    paper's behaviour: no turn taken, no pick overridden, no precondition but the
    paper's, a refused turn routed nowhere, the coordinator's input as written, nothing
    linked, S in retrieval order."""

    take_turn: tuple[Callable[[State], Pick | None], ...] = ()
    instead_of: Callable[[State, str], str | None] = _no_pick  # the repetition guard
    preconditions: tuple[Callable[[State, str], str | None], ...] = ()
    after_refusal: Callable[[State], str | None] = _no_route
    agent_input: Callable[[str], str] = _as_written  # what reaches the agent of the coordinator's input
    reported_input: Callable[[str, str], str] = _as_written  # the input as the history shows it
    linked: Callable[[State, str], Awaitable[list[Hit]]] = _none_linked
    order: Callable[[State], Awaitable[list[tuple[Hit, Judged | None]]]] = _retrieval_order

    @classmethod
    def of(cls, cfg: MRAGConfig, retriever: Retriever | None) -> Aids:
        """The aids `cfg` turns on."""
        aids: dict = {"take_turn": tuple(partial(aid, cfg) for aid, on in TURN_AIDS if on(cfg))}
        cap = (partial(searcher_cap, cfg.max_searcher_runs),) if cfg.max_searcher_runs is not None else ()
        guards = (needs_a_response, needs_a_search) if cfg.guards else ()
        aids["preconditions"] = guards + cap
        if cfg.guards:
            aids |= {
                "instead_of": partial(repetition_guard, cfg),
                "after_refusal": after_refusal,
                "agent_input": useful_input,
                "reported_input": question_echo,
            }
        if cfg.linked_docs:
            aids["linked"] = partial(linked_docs, retriever, cfg.linked_docs)
        if cfg.rank_docs:
            aids["order"] = partial(rank_for_question, retriever)
        return cls(**aids)
