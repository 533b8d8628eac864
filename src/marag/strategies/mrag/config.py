"""mRAG's settings: the paper's values where the paper gives them, and a named field for
each of our aids (`marag.strategies.mrag.aids`, `marag.strategies.mrag.search_aids`),
with what it was measured to do beside it; `paper=True` (PAPER_SETTINGS) turns every aid
off. docs/strategies/mrag.md lists them ("Aids")."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from marag.strategies.base import ANSWER_PAPER_SETTINGS, OPERATOR_ONLY, STRATEGIES, AnsweringConfig, PaperSwitch
from marag.strategies.mrag.search_io import SearchLimits

# What `paper=True` sets: every addition off, every bound the paper does not have lifted.
PAPER_SETTINGS: dict[str, Any] = {
    **ANSWER_PAPER_SETTINGS,
    "guards": False,
    "hints": False,
    "keep_top_ranked": 0,
    "searcher_max_steps": None,
    "history_window": None,
    "report_chars": None,
    "doc_chars": None,
    "focused": False,
    "coordinator_input_chars": 1000,
    "answer_chars": None,
    "late_answer": False,
    "answer_guidance": True,
    "memory": False,
    "progress_guard": False,
    "judge_pages": False,
    "grounded_relevance": False,
    "max_searcher_runs": None,
    "unlabelled_docs": False,
    "linked_docs": 0,
    "rank_docs": False,
    "routing": "coordinator",
    "next_move": "model",
    "plan_first": True,
    "finish_on_answer": False,
    "report_titles": False,
    "question_first": False,
}


class MRAGConfig(PaperSwitch, AnsweringConfig):
    paper_settings: ClassVar[dict[str, Any]] = PAPER_SETTINGS
    # what only the coordinator reads
    acts_only_with: ClassVar[dict[str, tuple[str, Any]]] = {
        **{k: ("routing", "coordinator") for k in ("hints", "history_window", "report_chars", "coordinator_input_chars", "finish_on_answer", "report_titles")},
        "grounded_relevance": ("guards", True),  # it narrows the anchored relevance guard
    }
    # the question's hard cap on model calls (every strategy has one): mRAG's own budgets
    # below finish a question well inside it; the paper's mode keeps the same cap
    max_llm_calls: int | None = Field(default=40, ge=1)
    max_agent_calls: int = Field(default=30, ge=1)  # agents the coordinator may run per question
    docs_per_step: int = Field(default=2, ge=1)  # documents per searcher page
    query_reuse_limit: int = Field(default=5, ge=1)  # pages one query may read
    paper: bool = False  # only the paper's behaviour (PAPER_SETTINGS); overrides the fields below
    # -- our additions (`aids`, `search_aids`; docs/strategies/mrag.md, "Aids") --
    guards: bool = True
    hints: bool = True
    keep_top_ranked: int = Field(default=2, ge=0)
    max_same_agent_in_row: int = Field(default=3, ge=1)
    # pages per searcher run (None: no cap). 2 (was 3) with the default 1.5B model, 2026-12-02:
    # tuning HotpotQA 51-80 F1 .516 -> .582 (2 better, 0 worse), MuSiQue 51-62 .042 -> .042,
    # MuSiQue 63-80 .109 -> .035 (0 better, 2 worse: the reader flipped with one distractor
    # page fewer); held out (the 3-page runs' LLM caches copied) HotpotQA 1-30
    # .606 -> .706 (+.100 [.000, +.233], 3 better, 0 worse), MuSiQue 1-30 .303 -> .272
    # (-.031 [-.105, +.033], 3, 3); 13-18% fewer evaluated tokens (the answerer reads ~4.8
    # documents instead of ~6.6, the judge one page fewer). Fresh runs with it: HotpotQA
    # 1-30 .582 (1,786 tokens), 4 answers below the replay's .706 with the same settings
    # (llama.cpp with parallel slots is not deterministic); MuSiQue 1-30 .253 (1,619
    # tokens; fresh with 3 pages: .606, .303): F1 about equal, the tokens ~15% fewer
    searcher_max_steps: int | None = Field(default=2, ge=1)
    max_searcher_runs: int | None = Field(default=2, ge=1)  # searcher runs per question (None: no cap)
    history_window: int | None = Field(default=6, ge=1)  # agent reports the coordinator sees (None: all)
    report_chars: int | None = Field(default=200, ge=20)  # each report as the coordinator sees it
    # a document's text for the relevance judge: with `focused`, its first sentence and the
    # sentences nearest the query, aspects and question (`marag.agents.documents.excerpt`),
    # else its first doc_chars. 300 focused (was the first 800): the judge read 29% of
    # mRAG's evaluated prompt tokens with the default model; the answerer reads S whole
    doc_chars: int | None = Field(default=300, ge=50)
    focused: bool = True
    coordinator_input_chars: int = Field(default=200, ge=20, le=4000)
    late_answer: bool = True
    memory: bool = True  # search memory: unseen documents only, repeated queries rejected
    query_retries: int = Field(default=1, ge=0)  # with memory: new queries asked for after a repeat
    progress_guard: bool = True
    max_noops: int = Field(default=2, ge=1)  # agent runs in a row that change nothing before a steer
    # with `guards` (anchored relevance): a document kept by it must also share a topic
    # word in its title with the question, the aspects or the titles found, or have the
    # judge's fact as its own (half its words in it) adding a word to the question's
    # (`search_aids.anchored`). Off: it did not measure better. The 1.5B's page judge called
    # 98 of 131 distractor judgements on HotpotQA 1-30 relevant, often one verdict copied
    # to both documents of a page ("Christopher Nolan" as the fact of a Stanley Kubrick
    # page); the answerer read ~5.6 documents, 1.7 of them gold. Replayed on earlier runs
    # (only calls whose prompts changed ran fresh), 2026-11-29: tuning HotpotQA 51-62 F1
    # .433 -> .433 (every answer the same), S at the answerer 6.0 -> 5.0 documents;
    # MuSiQue 51-62 .083 -> .083 (2 wrong answers changed, still wrong), S 5.2 -> 4.8;
    # held out HotpotQA 1-30 .582 -> .582 (every answer the same), S 5.6 -> 4.9, ~5% fewer
    # evaluated tokens; MuSiQue 1-30 .342 -> .290 (-.052 [-.133, +.001], 1 better, 3
    # worse: the reader flipped when distractors left S, and "Guyana", the bridge for
    # "the country where Clonbrook is located", left with them)
    grounded_relevance: bool = False
    judge_pages: bool = True  # one relevance call per page of documents (the paper: one per document)
    # the searcher's move after each page: a model call (the paper: continue, change the
    # query, or end), or a rule (ours; `search.Searcher`). The default 1.5B model chose
    # "continue" in all 47 of its moves on HotpotQA and MuSiQue 51-62, so only a page that
    # added nothing changed anything (the guard then took the query the move carried,
    # or ended); the call cost 260-320 evaluated tokens a question. With the rule,
    # replaying those runs: F1 .446 -> .446 and .167 -> .083 (Greenfield's "3 a.m.":
    # the model's reworded query found Indiana's alcohol laws, the question verbatim
    # did not), ~9-14% fewer tokens; held out, MuSiQue 1-30: .342 (vanilla_rag_k5 .311
    # in the same run), 9.7 calls, ~1,900-2,050 evaluated tokens a question
    # "hop" (ours, not the default): the rule, except that after the first page a
    # `searcher.hop` call names the entity that page's documents give and the question
    # depends on, and its query runs next. The 1.5B's searcher read the first query's
    # three pages while its judge called nearly everything relevant, so second-hop pages
    # were rarely searched. Tuning, 2026-11-29 (12 each, the earlier fresh runs' LLM
    # caches copied): HotpotQA 51-62 F1 .562 -> .562, MuSiQue 51-62 .083 -> .083 (the
    # same answers), gold recall in sources equal / 1 worse; hops taken in 5 and 7 of 12,
    # often toward an entity of a distractor the judge had called relevant ("Utah" for an
    # Indiana school); +1 call and ~200 evaluated tokens a question
    next_move: Literal["model", "rule", "hop"] = "rule"
    # the question's first searcher run opens with the question itself; with the move by
    # rule (`next_move="rule"` or "hop"), the query writer's query, if it is new, follows
    # its first page instead of the next-hop query (ours; the paper: the query writer's
    # query first; with `next_move="model"` the model's move follows). The 1.5B
    # query writer drops the question's names or adds a guess ("painter known for his
    # precisionist depictions of nature" for a question on the Brisbane Institute), and
    # the rank floor then keeps that query's top hits, not the ones a retrieve-then-read
    # baseline reads
    question_first: bool = True
    # S shown without "(found for: <query>)" beside each document. Labelled before (and
    # in the paper's mode, which keeps the earlier behaviour): the 1.5B query writer put
    # the answer it expected into queries ("... an NFL team based in Texas"), and the
    # answerer read the label as evidence (6 of 30 held-out HotpotQA answers were words
    # of our own queries, 3 of them wrong).
    unlabelled_docs: bool = True
    # after each searcher run, the N documents not read yet that the question or a
    # document of S names by title join S (ours, as UniRAG's `linked_docs`; a local index
    # only). With the default 1.5B model mRAG runs one searcher run and answers; the
    # second hop's article is then missing from S. HotpotQA 51-62 (n=12, the 1.5B, one LLM
    # cache shared with the run without it): F1 .479 -> .529 (+.050 [-.100, +.250], 1
    # better: Hebron Academy, linked from Charles Andrews's page; 1 worse: the extra page
    # turned "Richard Bach" into "Richard Wright"), gold recall in sources .792 -> .875
    linked_docs: int = Field(default=1, ge=0, le=10)
    # S read in the order the question and S's findings rank it (the run's retriever
    # searching only S, no model call), not in the order of the queries that found it.
    # Off: it did not measure better. The 1.5B answers from the page it reads nearest the
    # question, and that is the first query's top hit, not always the page that says
    # what is asked. Tuning, n=12 each: HotpotQA 51-62 (the answerer's last read replayed
    # over run hp51-12-mrag-linked) F1 .529 -> .647, 2 better, 0 worse; end to end, one
    # LLM cache shared with the run without it: HotpotQA 63-74 .417 -> .444 (1 better),
    # MuSiQue 51-62 .083 -> .042 (1 worse). Held out, the same way: MuSiQue 1-30 .354 ->
    # .333 (3 better, 2 worse), HotpotQA 31-50 .452 -> .392 (0 better, 2 worse: "1924" ->
    # "1961"). KAIR, whose C holds 10-36 passages, gains from the same ranking
    # (`answer_passages`); mRAG's S holds 2-7.
    rank_docs: bool = False
    # who picks the next agent: the coordinator (the paper: a call a turn; a planner whose
    # plan only the coordinator reads), or the fixed sequence searcher -> answerer ->
    # finisher with the guards' turns (ours: no call, each agent reads the question). The
    # sequence with the 1.5B default: tuning (n=12 each, one LLM cache shared with the
    # coordinator's run) HotpotQA 51-62 F1 .529 -> .563 (2 better, 0 worse), MuSiQue 51-62
    # .083 -> .158 (2, 1); held out HotpotQA 31-50 .452 -> .465 (2, 3), MuSiQue 1-30 .354
    # -> .278 (-.076 [-.183, +.019], 3, 6; read: the coordinator handed the searcher the
    # question, which the query writer searched verbatim, where with no input it wrote
    # "Signmark predated the Euro in the country Signmark is from"; the sequence handing
    # the searcher the question, on MuSiQue 51-62: .075, 1 worse); 11.5 -> 6.7 calls,
    # ~1,560-1,610 evaluated prompt tokens a question (the coordinator's: ~2,270)
    routing: Literal["coordinator", "sequence"] = "coordinator"
    # the fixed sequence (the coordinator's hint, its fallback, the repetition guard's
    # turn) opens with the planner (the paper's Algorithm 1 names it first), or with the
    # searcher (ours, `plan_first=False`; not the default: it did not measure equal). With
    # the default 1.5B model and `hints`, every run of 54 questions went coordinator ->
    # planner -> coordinator -> searcher -> ...: the plan reached only the coordinator,
    # and the two calls cost ~180 evaluated prompt tokens a question. Opening with the
    # searcher (2026-11-29, one run each; the MuSiQue runs replayed the earlier runs'
    # replies where prompts matched): HotpotQA 51-62 F1 .562 -> .562 (every answer the
    # same), 10.0 -> 8.0 calls, 1,975 -> 1,779 tokens (fresh); MuSiQue 51-62 .083 -> .042
    # (1 worse), ~1,930 -> ~1,630; held out MuSiQue 1-30 .342 -> .299 (-.043 [-.133,
    # +.026], 1 better, 2 worse), ~2,050 -> ~1,870. Read: the losses follow what the
    # coordinator wrote (a statement as the searcher's input, which the query writer
    # filled with a guessed state; the earlier run's answerer guidance that already held
    # the answer), not a missing plan: it passed the question verbatim to the searcher
    # as often with the plan as without (benchmarks/RESULTS.md)
    plan_first: bool = True
    # once the answerer has written a response, the run finishes without the
    # coordinator's turn (a "guard" step, rule "finish_on_answer"). With the default 1.5B
    # model that turn named the finisher after all 30 answers of HotpotQA 51-80, at ~120
    # evaluated prompt and ~50 generated tokens a question (7% of mRAG's 1,636); the same
    # run replayed with it: the same 30 answers, 9 -> 8 calls (median). Off, the
    # coordinator may still send a response to the validator or the reviser
    finish_on_answer: bool = True
    # the searcher's report in the coordinator's history names the documents it found
    # by title only (ours), not with the relevance judge's explanation of each (the
    # paper's report): the coordinator's prompt lists every document of S with the fact
    # it gives on its own line ("Documents found"), so the explanations said it twice,
    # and a small model's judge explains distractors with claims of its own ("Yes,
    # Sathish Kalathil is a film director." for a page on The Prestige). HotpotQA 1-30
    # held out (2026-12-03): a fresh run's LLM cache replayed with it, the same 30
    # answers; fresh, 1,685 -> 1,544 evaluated tokens a question (the coordinator's 381
    # -> 306), F1 .608 -> .582 (1 better, 3 worse, the same agents: run-to-run noise)
    report_titles: bool = True
    # -- needed in every mode: prompts must fit the model's context --
    context_chars: int | None = Field(default=6000, ge=200)  # all of S, packed (None: no limit)
    # each document of S as the agents that read S see it (answerer, summarizer, reasoner,
    # validator, finisher): its `excerpt` for the question and S's findings within N
    # characters (ours), or (None) whole while S fits `context_chars`. 400 with the 1.5B
    # default (earlier replies replayed where prompts matched): held out HotpotQA 31-50 F1
    # .452 -> .459, MuSiQue 1-30 .354 -> .318 (1 better, 2 worse), ~10-14% fewer tokens:
    # not the default
    answer_chars: int | None = Field(default=None, ge=100)
    # the answerer reads the coordinator's input beside the question (the paper: every
    # agent runs on its input), or (False, ours) the question alone. With the default
    # 1.5B model the coordinator's input to the answerer was the question verbatim in 17
    # of 21 questions read, and otherwise a relevance judge's explanation, sometimes
    # invented ("Charles Andrews graduated from Worksop College Preparatory School.",
    # "... was the second wife of Yoko Ono."), which the answerer then answered from.
    # Tuning, HotpotQA 51-80 (n=30, the run with it replayed from its LLM cache, only
    # the answerer's calls and what followed them fresh): F1 .449 -> .516 (+.067 [.000,
    # +.167], 2 better: "Hebron Academy", "New York City"; 0 worse), evaluated tokens a
    # question 1,948 -> ~1,923; MuSiQue 51-62 (n=12, the same way) .083 -> .042 (0
    # better, 1 worse). Held out (2026-12-02, fresh runs with it, the answerer replayed
    # with answer_guidance=true on copies of their LLM caches): HotpotQA 1-30 .582 -> .606
    # (+.024 [-.086, +.138], 2 better, 1 worse), MuSiQue 1-30 .308 -> .303 (1 better, 3
    # worse): neutral over all 102 questions (5 better, 5 worse); kept, as it keeps the
    # judge's claims out of the reader at no cost
    answer_guidance: bool = False
    temperature: float = 0.0
    # per role, e.g. self-training samples trainable roles at 0.7 and the answerer at 0.1
    role_temperatures: dict[str, float] = Field(default_factory=dict)
    seed: int | None = None
    role_llms: dict[str, dict[str, Any]] = Field(default_factory=dict, json_schema_extra=OPERATOR_ONLY)  # role -> LLMConfig fields

    @field_validator("role_llms", "role_temperatures")
    @classmethod
    def _known_roles(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        # keys: the roles mRAG calls (`mrag.searcher`; the bare `searcher` still works), as given
        mrag = STRATEGIES.get("mrag")  # the strategy declares the roles (looked up: it imports this module)
        for role in v:
            mrag.role_name(role, mrag.roles(nested=False), info.field_name or "role")
        return v

    def search_limits(self) -> SearchLimits:
        """The searcher's limits and aids (`search_aids`) under these settings: `guards`
        switches the on-topic queries, anchored relevance, the dry-paging stop and the
        heuristic fallbacks."""
        return SearchLimits(
            docs_per_step=self.docs_per_step,
            query_reuse_limit=self.query_reuse_limit,
            max_steps=self.searcher_max_steps,
            doc_chars=self.doc_chars,
            focused=self.focused,
            keep_top_ranked=self.keep_top_ranked,
            on_topic_queries=self.guards,
            anchored_relevance=self.guards,
            grounded_relevance=self.grounded_relevance,
            stop_dry_paging=self.guards,
            heuristic_fallbacks=self.guards,
            memory=self.memory,
            query_retries=self.query_retries,
            judge_pages=self.judge_pages,
            model_moves=self.next_move == "model",
            hop_query=self.next_move == "hop",
            question_first=self.question_first,
        )
