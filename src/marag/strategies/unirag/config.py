"""Agent-UniRAG's settings: the paper's loop and ablations first, then our aids (each a
field that `paper=true` turns off, `PAPER_SETTINGS`; what each aid does is in
`marag.strategies.unirag.aids`), each with where it was measured."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from marag.strategies.base import ANSWER_PAPER_SETTINGS, STRATEGIES, AnsweringConfig, PaperSwitch

PAPER_SETTINGS: dict[str, Any] = {
    **ANSWER_PAPER_SETTINGS,
    "memory": False,
    "clean_queries": False,
    "search_first": False,
    "evidence_floor": 0,
    "named_docs": 0,
    "linked_docs": 0,
    "question_first": False,
    "related_queries": False,
    "answer_from": "memory",
    "focused": False,
    "later_doc_chars": None,
    "terse": False,
}
DEFAULT_FLOOR = 2  # the evidence floor's default, also for a first pass taken over in paper mode (floor 0)

# The paper's retrieval, which `paper=true` also selects: not additions, but our defaults
# show fewer documents per search (8, not re-ranked), which a small local model reads better.
# (And the reflector's first 600 characters of each document, our bound before `focused`:
# the paper's reflector reads documents whole, which the model's context does not allow.)
PAPER_DEFAULTS: dict[str, Any] = {"k": 12, "rerank": True, "doc_chars": 600}


class UniRAGConfig(PaperSwitch, AnsweringConfig):
    paper_settings: ClassVar[dict[str, Any]] = PAPER_SETTINGS
    paper_defaults: ClassVar[dict[str, Any]] = PAPER_DEFAULTS
    # documents per search (ours; the paper: 12, re-ranked). 4, with `answer_passages=4`,
    # measured with the default model (Qwen2.5-Coder-1.5B, HotpotQA 51-62, n=12) against
    # 8 and 8: F1 .725 -> .848 (+.123 [+.000, +.317], 3 better, 0 worse), 16% fewer
    # evaluated prompt tokens (the reflector reads half as much); the 0.5B did better with 8
    k: int = Field(default=4, ge=1, le=20)
    max_searches: int | None = Field(default=8, ge=1, le=50)  # cap on searches per question (None: none but the question's budget)
    reflector: bool = True  # False: raw documents are the evidence (ablation)
    planning: bool = True  # False: all queries first, then one answer (ablation)
    max_queries: int = Field(default=3, ge=1, le=4)  # without planning: queries written up front
    rerank: bool = False  # re-rank `rerank_depth` candidates by embedding similarity
    rerank_depth: int = Field(default=30, ge=1, le=200)
    raw_doc_chars: int = Field(default=300, ge=50)  # without the reflector: each document's share of memory
    doc_chars: int | None = Field(default=350, ge=100)  # each document as the reflector reads it (600 in the paper's mode)
    # the reflector reads each document's first sentence and the sentences nearest the
    # query and the question within `doc_chars` (`marag.agents.documents.excerpt`), not
    # its first `doc_chars` (ours, as mRAG's judge; the final answer still reads its
    # sources whole). Tuning, HotpotQA 51-62 (n=12, one LLM cache shared with the run
    # without it): 350 focused against the first 600, F1 .764 -> .848 (+.083, 1 better:
    # "Steely and Clevie", 0 worse), evaluated prompt tokens a question 1,773 -> 1,444
    # (the reflector 867 -> 661; about 1,510 counting the 16 calls replayed from the
    # shared cache at the run's own rate), calls 5.2 -> 5.8
    focused: bool = True
    # each document after a search's first two as the reflector reads it, within N
    # characters (ours; None: `doc_chars` like the first two). Tuning, 51-62 (n=12, on a
    # copy of the runs without it): HotpotQA the same 12 answers (.764), evaluated tokens a
    # question ~1,875 -> ~1,720; MuSiQue .125 -> .275 (2 better, 0 worse), ~2,005 ->
    # ~1,827 (the reflector 728 -> 543). The first sentence, which a shortened excerpt
    # keeps, is what names a lower-ranked page's subject ("Dawn Penn (born in 1952 in
    # Kingston, Jamaica) is a Jamaican reggae singer", 4th for its question). Held out,
    # HotpotQA 1-30 paired (the run without it on a copy of its cache): F1 .767 -> .712
    # (0 better, 2 worse: a 4th document's deciding sentence lay past 175 characters),
    # ~1,828 -> 1,758 evaluated tokens a question; MuSiQue 1-30 the same way .412 -> .373
    # (1 better, 2 worse), ~1,828 -> 1,774. Kept as tuning chose it (RESULTS.md)
    later_doc_chars: int | None = Field(default=175, ge=50)
    paper: bool = False  # only the paper's behaviour: PAPER_SETTINGS
    # the planner's thought cut at 120 characters, not 200 (ours; `Planner` says why):
    # generated tokens are the slower half of an agent's seconds on a CPU
    terse: bool = True
    # a refused query (a repeat, or unrelated) is sent back to the planner once, told
    # which queries it used, before the final answer (ours, the default until 2026-12-07).
    # With the default model it wrote a new query 4 times of 33 (HotpotQA 51-80; 29 times
    # it repeated itself), so the extra planner call, on most questions, bought nothing:
    # off by default, a refused query ends the search (`memory` still refuses repeats)
    second_chance: bool = False
    memory: bool = True
    clean_queries: bool = True
    search_first: bool = True
    # when the reflector finds no evidence in a search, its top N documents (clipped to
    # raw_doc_chars) stand in (ours: the 0.5B reference model's reflector answered "nothing
    # found" to 8 of 8 searches of a question whose first search held both gold documents)
    evidence_floor: int = Field(default=DEFAULT_FLOOR, ge=0, le=20)
    # after each search, up to N documents read so far that the question or a source
    # document names by title join the sources (and the memory, clipped like the floor).
    # Ours: the reference model's reflector cited no document in 69 searches, and the
    # second document of a two-hop question is usually named in the first (HotpotQA
    # 51-80: sources held .62 of the gold documents, all read documents .93)
    named_docs: int = Field(default=4, ge=0, le=20)
    # after each search, the N documents not read yet that the question or a source
    # document names by title and that the question ranks highest among them join the
    # sources (ours; a local index only, `marag.index.links`): the next hop's article is
    # often named in the first but not ranked by any query the planner writes (MuSiQue
    # 21-100: top 2 + 1 linked held .562 of the gold documents, the top 3 .494)
    linked_docs: int = Field(default=1, ge=0, le=10)
    question_first: bool = True  # the first search is for the question itself (ours)
    related_queries: bool = True  # a query must share a topic word with the question or the evidence (ours)
    # what the final answer reads: the working memory (the paper) or the documents the
    # evidence came from, whole, at most `answer_passages` of them (ours). Tuning
    # questions (HotpotQA 51-80 / MuSiQue 21-40, reference model): F1 .282 / .120 reading
    # 6, .316 / .137 reading 8, the same reading 10; reading 2 or 4 of them was worse.
    # With the 1.5B default, 4 (with k=4) measured better than 8 (see `k`).
    answer_from: Literal["memory", "sources"] = "sources"
    answer_passages: int = Field(default=4, ge=1, le=20)
    # each source as the final answer reads it: its `excerpt` for the question within
    # N characters (ours), or (None, the default) whole. Measured with the 1.5B default
    # at 400: tuning (51-62) HotpotQA F1 .848 -> .848, MuSiQue .125 -> .214 (2 better);
    # held out (1-30) HotpotQA .767 -> .767 with 1,904 -> 1,792 evaluated prompt tokens a
    # question, MuSiQue .429 -> .379 fresh / .401 replayed (0 better, 2 worse), 2,022 ->
    # 1,692. Not the default: offline, the gold answer that the whole sources showed was
    # cut out of the excerpts in 3 of 7 MuSiQue tuning questions and 5 of 23 held out (an
    # answer in a table or in a sentence sharing no word with the question); at 600 and
    # 800 still 2 of 23. Before `excerpt` kept an infobox's field with its value, 400 and
    # 500 also lost Kansas's population
    answer_chars: int | None = Field(default=None, ge=100)
    temperature: float = 0.0
    # per role, e.g. self-training samples the planner and reflector at 0.7 and the final answer at 0.1
    role_temperatures: dict[str, float] = Field(default_factory=dict)
    seed: int | None = None

    @field_validator("role_temperatures")
    @classmethod
    def _known_roles(cls, v: dict[str, float]) -> dict[str, float]:
        unirag = STRATEGIES.get("unirag")  # the strategy declares the roles (looked up: it imports this module)
        for role in v:  # `unirag.planner` (the bare `planner` still works), kept as given
            unirag.role_name(role, setting="role_temperatures")
        return v
