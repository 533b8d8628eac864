"""mRAG (Salemi et al., CIIR@LiveRAG 2025): a coordinator runs a team of agents.

Algorithm 1, as implemented: each turn the coordinator reads the question, the history
of agent reports, the current response and the titles of the supporting set S, and
emits `{agent, input, reason}`; that agent runs on that input, its report joins the
history; the answerer and the reviser replace the response; the searcher's relevant
documents join S (deduplicated by chunk id). The run stops when the finisher is chosen
or after `max_agent_calls` agent runs; it returns the response and S.

Every agent that reads documents sees all of S, most relevant first: in retrieval order
(by the query a document was found for, in the order the queries were issued, then its
rank under it, so the first query's top documents, what a retrieve-then-read baseline
reads, come first; with `rank_docs`, below, as the question ranks it), packed into
`context_chars` characters: when S does not fit whole, the longest documents are
clipped to an equal share, so a second-hop document found late still reaches the
answerer.

`paper=True` keeps only the paper's behaviour: it turns off every addition below and
leaves only the fallbacks a run cannot do without (listed in docs/strategies/mrag.md).

Our additions, to keep small models productive (each can be turned off):
- preconditions (`guards`): the validator and the finisher need a response, the
  answerer needs a search to have run (the reviser always needs a response; the paper
  has it refuse). An agent picked too early is recorded as a refusal step (status
  "refused", no model call, one agent call spent); with `guards` the turn then goes to
  the next agent of the fixed sequence planner -> searcher -> answerer -> finisher
  (skipping the planner), without them the coordinator simply chooses again;
- repetition (`guards`): picking the agent that ran the last `max_same_agent_in_row`
  times again is overridden by the fixed sequence's next agent (a "guard" step);
- search memory (`memory`): the searcher reads only documents no search of this
  question returned before, rejects queries that repeat earlier ones and seeds a new
  one from the facts found (see `marag.strategies.mrag.search`);
- no-progress guard (`progress_guard`): an agent run that changes nothing (no new
  document in S, the same response, plan and notes) is a no-op; after `max_noops` in a
  row the next turn is steered, without a coordinator call: to the searcher with the
  newest fact on the question's topic no query has used (the bridge to a second hop),
  else the searcher (if it never ran), neither past `max_searcher_runs`; else the
  planner (if it never ran, there is no response and `plan_first`), else the answerer
  (if S changed since the last answer or there is none), else the finisher. Recorded as
  a "guard" step;
- searcher runs (`max_searcher_runs`, 2): picking the searcher after that many runs is a
  refusal, routed to the answerer when S changed since the last answer, else onward.
  The 0.5B reference model sent the searcher 10-16 times a question;
- anchored relevance (`guards`): a document judged relevant that shares no topic word
  with the question, the coordinator's aspects or the titles already found is
  overruled to not relevant (the reference model's judge called ~90% of documents
  relevant, and its "facts" then pulled queries to pizza chains for a reggae question);
  with `grounded_relevance` (off: it did not measure better) the document's title must
  share such a word, or the judge's fact be the document's own and add a word to the
  question (the 1.5B's page judge copies one verdict to every document of a page);
- echo filter (`guards`): a coordinator input that only names an agent, copies its
  own instructions or has no words is dropped before it reaches the agent, and one
  that only repeats the question is left out of the history's report of the run; the
  searcher does not run queries that share no content word with the question, the
  coordinator's aspects or the titles found, and stops paging a query once a page adds
  nothing new;
- heuristic fallbacks (`guards`): an unusable relevance judgment counts a first-page
  document as relevant, an unusable next move continues after a productive page (the
  paper's mode: not relevant; end);
- the fixed sequence opening with the searcher (`plan_first=False`, off: it did not
  measure equal): what the hint names, the coordinator's fallback follows and the
  repetition guard runs then skips the planner, which still runs when the coordinator
  picks it;
- hints (`hints`): the coordinator's prompt names the fixed sequence's next agent in
  its last line. Without it the default 1.5B model names the searcher in almost every
  state (6 of 12 probe states sensible, 12 of 12 with it), SmolLM2-135M the first
  agent it reads;
- rank floor (`keep_top_ranked`, 2): every searcher run keeps its first query's top
  hits in S, marked `by_rank`, whatever the judge said (small models' judges are close
  to chance; a retrieve-then-read baseline reads exactly these);
- one relevance call per page (`judge_pages`): the page's documents judged together
  (the paper: one call per document);
- the searcher's move by rule (`next_move="rule"`): after each page, the same query's
  next page while its pages add relevant documents (up to `searcher_max_steps`); after a
  page that added nothing, the question itself (if no query of the question was close to
  it; else the newest fact no query used, else the run ends); no next-move call (the
  paper: a model call offering continue, change the query, or end; `next_move="model"`);
- the question first (`question_first`): the question's first searcher run reads the
  question's own first page (what a retrieve-then-read baseline reads, so the rank floor
  keeps its top hits), then, with the move by rule and a page left, the query writer's
  query if it is new (in place of the `hop` query; a writer that repeats the question is
  not asked again), else the rule's move (the paper: the query writer's query first). The
  1.5B query writer dropped the question's names or added a guess, and the rank floor
  then kept that query's hits instead;
- a focused judge (`focused`): it reads each document's first sentence and the
  sentences nearest the query, within `doc_chars` (the paper: the whole document);
- unlabelled documents (`unlabelled_docs`): the agents that read S see each document
  without the query that found it, so a guess the query writer put into a query is not
  shown beside the documents as if it were part of them (a query can still reach the
  coordinator's history in the searcher's report);
- bounded prompts: a `history_window` of recent reports, each clipped to `report_chars`,
  a `searcher_max_steps` page cap per searcher run (2), `doc_chars` of each document for
  the relevance judge, a 200-character coordinator input (`coordinator_input_chars`);
- linked documents (`linked_docs`, 1): after each searcher run, the document not read
  yet that the question or a document of S names by title, the best of them for the
  question, joins S (`marag.agents.search.linked`, as in UniRAG): the second hop's
  article, which the queries of a one-search run do not find;
- S ranked for the question (`rank_docs`, off: it did not measure better): the agents
  that read S read it in the order the question and S's findings rank it, the run's
  retriever searching only S (no model call; a "documents_ranked" step; a remote engine
  keeps retrieval order). The answer's sources are listed in that order;
- the fixed sequence without the coordinator (`routing="sequence"`, off; the variant
  `mrag_sequence`): searcher -> answerer -> finisher, the guards' turns as above, each
  agent on the question, a "sequence" step in the trace for each turn and no coordinator
  or planner call. With the default 1.5B model the coordinator named the agent its prompt
  suggests (`hints`) in 876 of 885 turns, and only the coordinator reads the planner's
  plan; but without it MuSiQue's held-out F1 fell (see `routing`);
- the answerer on the question alone (`answer_guidance=False`): the coordinator's input
  to it, which a small model fills with a relevance judge's invented explanation, is not
  shown to it (the other agents still run on their input);
- finish on an answer (`finish_on_answer`): once the answerer has written a response,
  the run finishes without asking the coordinator, whose hinted turn there names the
  finisher (a "guard" step records the rule);
- the searcher's report by title (`report_titles`): the coordinator's history names the
  documents a searcher run found by title only (its "Documents found" line gives each
  one's fact), not with the relevance judge's explanation of each;
- a late answer (`late_answer`): if the budget ends with no response, the answerer runs
  once on what was collected (outside the budget, `answered_after_budget` in the usage).
The question's hard budget (`max_llm_calls`, 40 for mRAG, `max_tokens`, `deadline_s`,
common to every strategy) ends the loop and any searcher run early; the late answer then
runs in the budget's grace.
The coordinator's own fallback (unusable output) is the fixed sequence, continued after
the furthest of its steps already done. Budgets are config fields (the paper's values
as defaults) and a final "budget" step (also merged into `Answer.usage`) reports what
was spent.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from marag.agents.base import Agent
from marag.agents.mrag import (
    Coordinator,
    CoordinatorInput,
    MRAGAnswerer,
    MRAGAnswerInput,
    Planner,
    PlannerInput,
    Reasoner,
    ReasonerInput,
    Reviser,
    ReviserInput,
    Summarizer,
    SummarizerInput,
    Validator,
    ValidatorInput,
    Doc,
    clip,
    doc_from_hit,
    finish,
    useful_input,
)
from marag.agents.mrag._shared import pack_texts
from marag.agents.queries import topic_words
from marag.agents.search.linked import linked_hits
from marag.agents.search.memory import SearchMemory, query_terms
from marag.agents.search.subset import rank_within
from marag.index.base import Hit, Retriever
from marag.llm.base import LLM
from marag.llm.budget import budget_spent, grace
from marag.llm.factory import LLMConfig, make_llm
from marag.strategies.base import ANSWER_PAPER_SETTINGS, OPERATOR_ONLY, STRATEGIES, AnsweringConfig, PaperSwitch, Strategy, register_variant
from marag.strategies.mrag.search import Judged, Searcher, SearcherInput, SearchLimits
from marag.strategies.mrag.state import State
from marag.trace import current_trace, step

SEQUENCE = ("planner", "searcher", "answerer", "finisher")


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
    # -- our additions (module docstring) --
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
    # (`Searcher._anchored`). Off: it did not measure better. The 1.5B's page judge called
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
    # query, or end), or a rule (ours; module docstring). The default 1.5B model chose
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
        for role in v:
            MRAG.role_name(role, MRAG.roles(nested=False), info.field_name or "role")
        return v


@STRATEGIES.register("mrag")
class MRAG(Strategy):
    name = "mrag"
    paper = "Salemi et al., CIIR@LiveRAG 2025 (mRAG)"
    calls = (8, 14)  # the default 1.5B model, HotpotQA 1-30: median 8, at most 13
    description = (
        "Coordinator + planner/searcher/summarizer/reasoner/validator/answerer/reviser/finisher (Salemi et al. 2025)."
    )
    Config = MRAGConfig
    agents = (Coordinator, Planner, Searcher, Summarizer, Reasoner, Validator, MRAGAnswerer, Reviser)
    trains = (Coordinator, Planner, Searcher, Summarizer, Reasoner, Validator)  # never the answer writers

    def __init__(
        self,
        llm: LLM,
        retriever: Retriever | None = None,
        config: MRAGConfig | dict | None = None,
        llms: dict[str, LLM] | None = None,
    ):
        super().__init__(llm, retriever, config)
        for role in llms or {}:
            self.role_name(role, self.roles(nested=False), "llms")
        self.llms = {role: make_llm(LLMConfig.model_validate(spec)) for role, spec in self.config.role_llms.items()}
        self.llms.update(llms or {})

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        cfg, st = self.config, State(question)
        st.memory = SearchMemory(self.search, unseen_only=cfg.memory)
        while not st.finished and st.calls < cfg.max_agent_calls and not budget_spent():
            before = st.signature()
            if cfg.progress_guard and st.noops >= cfg.max_noops:
                routed: tuple[str, str] | None = self._steer(st)  # no coordinator call: the guard decides
            elif cfg.finish_on_answer and cfg.routing == "coordinator" and self._just_answered(st):
                with step("guard", rule="finish_on_answer") as s:
                    s.outputs = {"agent": "finisher", "input": ""}
                routed = ("finisher", "")  # no coordinator call: it would name the finisher
            elif cfg.routing == "sequence":
                with step("sequence") as s:
                    s.outputs = {"agent": self._next_in_sequence(st, plan=False)}
                routed = self._route(st, s.outputs["agent"], "")
            else:
                st.coordinator_calls += 1
                d = await self._call(
                    Coordinator(cfg.coordinator_input_chars),
                    "coordinator",
                    CoordinatorInput(
                        question=question,
                        history=self._history(st),
                        response=st.response or "",
                        documents=st.facts(),
                        calls_left=cfg.max_agent_calls - st.calls,
                        default_next=self._next_in_sequence(st),
                        hint=cfg.hints,
                    ),
                )
                routed = self._route(st, d.agent, useful_input(d.input) if cfg.guards else d.input)
            if routed is not None and st.calls < cfg.max_agent_calls:
                await self._run(st, *routed)
            st.noops = st.noops + 1 if st.signature() == before else 0
        answered_late = st.response is None and cfg.late_answer
        if answered_late:  # budget spent (or finished without one): answer once from what was collected
            with grace():
                await self._run(st, "answerer", "", count=False)
        trace = current_trace()
        with step("budget") as s:
            s.outputs = {
                "agent_calls": st.calls,
                "max_agent_calls": cfg.max_agent_calls,
                "coordinator_calls": st.coordinator_calls,
                "searcher_steps": st.searcher_steps,
                "query_reuses": st.query_reuses,
                "refusals": st.refusals,
                "guards": st.guards,
                "progress_steers": st.steers,
                "fallbacks": sum(x.status == "fallback" for x in trace.steps) if trace else 0,
                "finished": st.finished,
                "answered_after_budget": answered_late,
                "documents": len(st.docs),
            }
        return st.response or "", [h for h, _ in await self._ordered(st)]

    # -- routing ---------------------------------------------------------------------------
    def _next_in_sequence(self, st: State, plan: bool | None = None) -> str:
        """The fixed sequence's next agent: the one after the furthest step already done;
        it opens with the planner only with `plan` (by default `plan_first`)."""
        done = ("planner" in st.ran, "searcher" in st.ran, st.response is not None)
        last = max((i for i, d in enumerate(done) if d), default=-1)
        plan = self.config.plan_first if plan is None else plan
        return SEQUENCE[max(last + 1, 0 if plan else 1)]

    def _history(self, st: State) -> list[str]:
        """The reports the coordinator reads: the last `history_window`, and in any mode
        only as many of the most recent as fit in `context_chars` (the paper's mode keeps
        all of them until the model's context would overflow)."""
        recent = st.history[-self.config.history_window :] if self.config.history_window else list(st.history)
        budget = self.config.context_chars
        if budget is None:
            return recent
        kept, used = [], 0
        for report in reversed(recent):
            used += len(report) + 4
            if used > budget and kept:
                break
            kept.append(report)
        return kept[::-1]

    @staticmethod
    def _just_answered(st: State) -> bool:
        """The answerer ran last and wrote a response (`finish_on_answer`)."""
        return bool(st.ran) and st.ran[-1] == "answerer" and bool(st.response)

    def _steer(self, st: State) -> tuple[str, str]:
        """The no-progress guard's pick (module docstring), recorded as a guard step."""
        used = set().union(*(query_terms(q) for q in st.memory.queries)) if st.memory and st.memory.queries else set()
        # a bridge fact is one about the question's topic (its words, or a title found):
        # a small model's judge fills `fact` with whatever a document says first
        topic = topic_words(" ".join([st.question, *(h.title for h in st.docs.values())]))
        runs = self.config.max_searcher_runs
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
        elif "planner" not in st.ran and st.response is None and self.config.plan_first:
            pick = ("planner", "")
        elif st.response is None or st.answered_with != len(st.docs):
            pick = ("answerer", "")
        else:
            pick = ("finisher", "")
        st.guards, st.steers, st.noops = st.guards + 1, st.steers + 1, 0
        with step("guard", rule=f"no progress in {self.config.max_noops} agent calls") as s:
            s.outputs = {"agent": pick[0], "input": pick[1]}
        return pick

    def _after_refusal(self, st: State) -> str:
        """Where a refused turn goes (with guards): the answerer when S changed since the
        last answer (or there is none), else the fixed sequence's next agent."""
        if "searcher" in st.ran and (st.response is None or st.answered_with != len(st.docs)):
            return "answerer"
        return self._next_in_sequence(st, plan=False)

    def _unmet(self, st: State, agent: str) -> str | None:
        if agent == "reviser" and st.response is None:
            return "there is no response to revise: the answerer must run first"
        if self.config.guards and agent in ("validator", "finisher") and st.response is None:
            return "there is no response yet: the answerer must run first"
        if self.config.guards and agent == "answerer" and "searcher" not in st.ran:
            return "nothing has been searched yet"
        runs = self.config.max_searcher_runs
        if agent == "searcher" and runs is not None and st.ran.count("searcher") >= runs:
            return f"the searcher has run {runs} times, its limit for a question"
        return None

    def _route(self, st: State, picked: str, text: str) -> tuple[str, str] | None:
        """The agent that runs and its input: the coordinator's pick, unless a guard or a
        precondition intervenes. A refused pick spends an agent call; with guards the
        turn goes to the fixed sequence (whose agent gets no input: the coordinator's
        was meant for another agent), without them nobody runs and the coordinator
        chooses again (None)."""
        k, guards = self.config.max_same_agent_in_row, self.config.guards
        if guards and st.ran[-k:] == [picked] * k:
            st.guards += 1
            with step("guard", picked=picked, rule=f"{picked} ran {k} times in a row") as s:
                s.outputs = {"agent": self._next_in_sequence(st)}
            return s.outputs["agent"], ""
        if why := self._unmet(st, picked):
            st.calls, st.refusals = st.calls + 1, st.refusals + 1
            routed = self._after_refusal(st) if guards else None
            with step(picked, request=text) as s:
                s.status, s.outputs = "refused", {"refused": True, "reason": why, "routed_to": routed}
            st.history.append(f"{picked}: refused, {why}" + (f" (ran {routed} instead)" if routed else ""))
            return (routed, "") if routed else None
        return picked, text

    # -- the agents ------------------------------------------------------------------------
    def _llm(self, role: str) -> LLM:
        return self.role_setting(self.llms, role, self.llm)

    def _temperature(self, role: str) -> float:
        return self.role_setting(self.config.role_temperatures, role, self.config.temperature)

    async def _call(self, agent: Agent, role: str, inp: Any) -> Any:
        return await agent(self._llm(role), inp, self._temperature(role), self.config.seed)

    async def _ordered(self, st: State) -> list[tuple[Hit, Judged | None]]:
        """S, most relevant first: with `rank_docs`, as the question and S's findings
        rank it (ranked again only when S has grown), else in retrieval order
        (`State.ranked_docs`)."""
        ranked = st.ranked_docs()
        if not self.config.rank_docs:
            return ranked
        if st.read_order is None or st.read_order[0] != len(st.docs):
            why = {h.chunk_id: j for h, j in ranked}
            about = " ".join([st.question, *st.facts()])
            order = await rank_within(self.retriever, [h for h, _ in ranked], about, label="documents_ranked")
            st.read_order = (len(st.docs), [(h, why[h.chunk_id]) for h in order])
        return st.read_order[1]

    async def _docs(self, st: State) -> list[Doc]:
        """All of S, most relevant first (`_ordered`), packed into `context_chars` (see
        `pack_texts`)."""
        cfg = self.config
        ranked = await self._ordered(st)
        texts = [" ".join(h.text.split()) for h, _ in ranked]
        allowance = pack_texts([len(t) for t in texts], cfg.context_chars)
        about = " ".join([st.question, *st.facts()]) if cfg.answer_chars else ""
        return [
            doc_from_hit(h, min(n, cfg.answer_chars or n), found_for=j.query if j and not cfg.unlabelled_docs else "", about=about)
            for (h, j), n in zip(ranked, allowance)
            if n > 0
        ]

    def _report(self, text: str) -> str:
        return clip(text, self.config.report_chars)

    async def _run(self, st: State, agent: str, text: str, count: bool = True) -> None:
        st.calls += count
        report = await getattr(self, f"_{agent}")(st, text)
        st.ran.append(agent)
        # with guards, an input that only repeats the question is left out of the report:
        # the coordinator reads the question at the top of its prompt, and the default
        # model's input was the question verbatim in most turns
        shown = "" if self.config.guards and _same_text(text, st.question) else text
        st.history.append(
            f"{agent}({self._report(shown)}): {self._report(report)}" if shown else f"{agent}: {self._report(report)}"
        )

    async def _planner(self, st: State, text: str) -> str:
        # the plan goes to the coordinator (history), not into the notes other agents read:
        # it holds no collected information, and small models copy it into their output
        plan = await self._call(
            Planner(), "planner", PlannerInput(question=st.question, request=text, known=st.facts(last=6) + st.notes[-2:])
        )
        st.plan = "; ".join(plan.steps)
        return st.plan

    async def _searcher(self, st: State, text: str) -> str:
        cfg = self.config
        limits = SearchLimits(
            docs_per_step=cfg.docs_per_step,
            query_reuse_limit=cfg.query_reuse_limit,
            max_steps=cfg.searcher_max_steps,
            doc_chars=cfg.doc_chars,
            focused=cfg.focused,
            keep_top_ranked=cfg.keep_top_ranked,
            on_topic_queries=cfg.guards,
            anchored_relevance=cfg.guards,
            grounded_relevance=cfg.grounded_relevance,
            stop_dry_paging=cfg.guards,
            heuristic_fallbacks=cfg.guards,
            memory=cfg.memory,
            query_retries=cfg.query_retries,
            judge_pages=cfg.judge_pages,
            model_moves=cfg.next_move == "model",
            hop_query=cfg.next_move == "hop",
            question_first=cfg.question_first,
        )
        # what is known: the facts the documents in S gave (notes stay out: a small model
        # copies them into its query); it goes into the query writer's prompt, never
        # into the query itself
        out, hits = await Searcher()(
            self._llm("searcher"),
            st.memory,
            SearcherInput(question=st.question, aspects=text, known=st.facts(last=6)),
            limits,
            self._temperature("searcher"),
            cfg.seed,
        )
        for h, j in zip(hits, out.relevant):
            if h.chunk_id not in st.docs:
                st.docs[h.chunk_id], st.why[h.chunk_id] = h, j
        st.searcher_steps += len(out.steps)
        st.query_reuses += out.query_reuses
        linked = await self._linked(st, "; ".join(out.queries))
        also = f"; linked: {'; '.join(f'[{h.title or h.chunk_id}]' for h in linked)}" if linked else ""
        if not out.relevant:
            return f"no relevant documents for {'; '.join(out.queries)}{also}"
        found = [f"[{j.title or j.chunk_id}]" for j in out.relevant]
        if not cfg.report_titles:  # the paper's report: what each document gives, in the judge's words
            found = [f"{name} {j.explanation}" for name, j in zip(found, out.relevant)]
        return "found " + "; ".join(found) + also

    async def _linked(self, st: State, query: str) -> list[Hit]:
        """`linked_docs`: documents not read yet that the question or a document of S
        names by title join S (after every found one, unjudged), the best for the question
        first (`marag.agents.search.linked`)."""
        if not self.config.linked_docs or st.memory is None:
            return []
        texts = [st.question, *(h.text for h in st.docs.values())]  # (S is read: every page is marked in the memory)
        hits = await linked_hits(self.retriever, st.question, texts, st.memory, self.config.linked_docs, query)
        for h in hits:
            st.docs.setdefault(h.chunk_id, h)
        return hits

    async def _summarizer(self, st: State, text: str) -> str:
        out = await self._call(
            Summarizer(),
            "summarizer",
            SummarizerInput(question=st.question, focus=text, documents=await self._docs(st), notes=st.notes[-2:]),
        )
        st.notes.append("Summary: " + out.summary)
        return out.summary

    async def _reasoner(self, st: State, text: str) -> str:
        out = await self._call(
            Reasoner(),
            "reasoner",
            ReasonerInput(question=st.question, aspect=text, documents=await self._docs(st), notes=st.notes[-2:]),
        )
        st.notes.append("Analysis: " + out.analysis)
        return out.analysis

    async def _answerer(self, st: State, text: str) -> str:
        out = await self._call(
            MRAGAnswerer(self.config.style()),
            "answerer",
            MRAGAnswerInput(
                question=st.question,
                guidance=text if self.config.answer_guidance else "",
                notes=st.notes[-3:],
                documents=await self._docs(st),
            ),
        )
        st.response, st.answered_with = out.answer, len(st.docs)
        return out.answer

    async def _validator(self, st: State, text: str) -> str:
        v = await self._call(
            Validator(),
            "validator",
            ValidatorInput(question=st.question, response=st.response or "", documents=await self._docs(st)),
        )
        if not v.checked:  # no verdict: neither a pass nor a reason to revise
            return "no usable verdict (the validator's output was unusable); nothing was checked"
        report = "; ".join(
            f"{k}: {'yes' if x.ok else 'no'} ({x.feedback})"
            for k, x in (("valid", v.valid), ("grounded", v.grounded), ("correct", v.correct))
        )
        if not v.passed():
            st.notes.append("Feedback: " + report)
        return report

    async def _reviser(self, st: State, text: str) -> str:
        feedback = next((n for n in reversed(st.notes) if n.startswith("Feedback: ")), "")
        out = await self._call(
            Reviser(self.config.style()),
            "reviser",
            ReviserInput(
                question=st.question,
                response=st.response or "",
                suggestion=text or feedback.removeprefix("Feedback: "),
                notes=st.notes[-2:],
                documents=await self._docs(st),
            ),
        )
        st.response = out.answer
        return out.answer

    async def _finisher(self, st: State, text: str) -> str:
        finish(st.response, len(st.docs))
        st.finished = True
        return "done"


def _flat(text: str) -> str:
    return " ".join(text.split()).strip(" .?!\"'").lower()


def _same_text(a: str, b: str) -> bool:
    """The same words, ignoring case, spacing and the punctuation around them."""
    return bool(a.strip()) and _flat(a) == _flat(b)


MRAGPaper = register_variant(
    MRAG, "mrag_paper", "mRAG with only the paper's behaviour (paper=true: no guards, hints, caps or late answer).",
    calls=(12, 25), paper=True,
)
MRAGSequence = register_variant(
    MRAG, "mrag_sequence", "mRAG without the coordinator: searcher, answerer, finisher in a fixed sequence (routing=sequence; half the tokens).",
    calls=(6, 8), routing="sequence",
)
