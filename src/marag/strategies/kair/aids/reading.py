"""KAIR's aids to step 4, the refined context C, and to the generator's read (ours;
`paper=true` turns each off). Each takes the config first and fills one place of the
loop (`aids.Aids`)."""

from __future__ import annotations

from marag.agents.answerer import Passage
from marag.agents.kair import KnowledgeState
from marag.agents.layout import clip
from marag.agents.search.subset import rank_within, with_named
from marag.index.base import Hit
from marag.strategies.kair.aids.knowledge import answers
from marag.strategies.kair.config import KAIRConfig
from marag.strategies.kair.context import tightest
from marag.trace import step


def keep_cited(cfg: KAIRConfig, st: KnowledgeState, hits: list[Hit], i: int, known_before: int) -> bool:
    """`context=cited`: C refined without the filter call. C gains the passages the facts
    just learned cite, the search's `keep_top` best new passages (a bridge page may state
    nothing the update picked up) and the documents a title link joined (`linked_docs`:
    the next hop, whether or not the update stated anything from it yet). Nothing leaves
    C, and no model reads the passages a second time. Why: the 1.5B's filter kept 88% of
    what it was shown, and with the generator reading the `answer_passages` of C, its
    main effect was its cost, 37-38% of KAIR's evaluated prompt tokens. Measured: docs/
    strategies/kair.md, "C without the filter call" (held out 6,698 -> 4,388 and 5,481 ->
    3,622 evaluated tokens a question, F1 −.008 and −.011); benchmarks/RESULTS.md,
    "UniRAG's focused reflector held out; KAIR's C without the filter call"."""
    cited = {f.source for f in st.known[known_before:]}
    new = [h for h in hits if h.chunk_id not in st.context]
    top = {h.chunk_id for h in new[: cfg.keep_top]} | set(st.linked)
    chosen = [h for h in new if h.chunk_id in cited] + [h for h in new if h.chunk_id in top and h.chunk_id not in cited]
    st.context.update((h.chunk_id, h) for h in chosen)
    with step("context_applied", by_agent=i) as s:
        s.outputs = {"refiltered": False, "kept": [h.chunk_id for h in chosen], "dropped": [], "context": list(st.context)}
    return bool(chosen)


def filter_openings(cfg: KAIRConfig, hit: Hit, new: bool) -> Hit:
    """`filter_chars` (with `context=filter`): the filter reads each passage's first that
    many characters (the paper's: as the other roles read it). Why: whether a passage
    belongs in C shows in its title and opening; the filter read every new passage whole
    after the update had, and C again whenever K changed, 41% of KAIR's evaluated prompt
    tokens with the default model. Measured: benchmarks/RESULTS.md, "Fewer prompt tokens
    for KAIR, mRAG and UniRAG: what each role reads"; docs/strategies/kair.md, "Reading less"."""
    return hit.model_copy(update={"text": clip(hit.text, tightest(cfg.filter_chars, cfg.doc_chars if new else None))})


def drop_claims(cfg: KAIRConfig, question: str, known: list[str], final: KnowledgeState) -> list[str]:
    """`drop_claims`: the known facts the generator does not read when C has passages,
    those that restate the question with an answer added (the update's guess at the final
    answer; their passages still come first in C). Why: the generator repeated them as
    read ("The country of Izgoy's performer invaded Manchuria in 1941"; 9 of 24 MuSiQue
    tuning questions had one, none right). Measured: MuSiQue 63-86 .193 -> .243 (final
    reads replayed), benchmarks/RESULTS.md, "KAIR's reader: claims left out, the five
    passages that matter"."""
    return [k for k in known if answers(k, question)] if final.context else []


def known_first(cfg: KAIRConfig, known: list[str]) -> list[Passage]:
    """`known_first`: the generator reads the known facts, as one passage, before C (the
    paper's generator reads C only); also when C is empty, since K is what was found.
    Why: K carries the bridge the question does not name ("born in Young, New South
    Wales"), which C's clipped passages need not show. Measured: the generator without K
    was +.020 on tuning and −.045 held out (2 better, 4 worse), and on MuSiQue tuning .201
    against .243 with it: benchmarks/RESULTS.md, "KAIR: a passage's title as a pointer to
    its words"."""
    return [Passage(title="What is known", text="\n".join(known))] if known else []


async def answer_passages(cfg: KAIRConfig, retriever, context: list[Hit], question: str, asked: str) -> tuple[list[Hit], list[str]]:
    """`answer_passages` N: the generator reads the N passages of C that `asked` (the
    question and the known facts) ranks highest, the run's retriever searching only C (one
    that cannot keeps C's first N), not all of C clipped; and no chunk kept by name. Why: C
    held 10-36 passages, each cut short to fit, and KAIR with recall .92 answered worse
    than one-shot top 5 (HotpotQA 75-86: F1 .367 against .567); ranked by the question and
    K, .817. Measured: benchmarks/RESULTS.md, "KAIR's reader: claims left out, the five
    passages that matter"."""
    n = cfg.answer_passages
    if not n or len(context) <= n:
        return context, []
    return await rank_within(retriever, context, asked, n, label="answer_passages"), []


async def named_passages(cfg: KAIRConfig, retriever, context: list[Hit], question: str, asked: str) -> tuple[list[Hit], list[str]]:
    """`named_passages` (with `answer_passages`): among the N always the passages of C
    whose title the question names and, for each, the best-ranked passage below the N that
    its text names by title, the next hop (`marag.agents.search.subset.with_named`); also
    the chunk ids kept only by name. Why: 8 of 30 tuning questions had a gold page in C
    that the ranking left out ("Hebron Academy", named on the page of the Charles Andrews
    the question names, ranked below "T.M. Landry College Preparatory"). Measured: tuning
    HotpotQA 51-80 .408 -> .580, held out HotpotQA 1-30 .532 -> .615, MuSiQue neutral:
    docs/strategies/kair.md and benchmarks/RESULTS.md, "`named_passages`"."""
    n = cfg.answer_passages
    if not n or len(context) <= n:
        return context, []
    ranked = await rank_within(retriever, context, asked, None, label="answer_passages")
    chosen = with_named(ranked, question, n)
    top = {h.chunk_id for h in ranked[:n]}
    return chosen, [h.chunk_id for h in chosen if h.chunk_id not in top]


def answer_excerpts(cfg: KAIRConfig, asked: str) -> str:
    """`answer_excerpts`: what a passage of C clipped for the generator shows its
    sentences nearest to (the question and the known facts), not its opening (the
    paper's: ""). Why: C held ~10 passages, each cut to ~300 characters, and the sentence
    with the answer was often gone. Measured with `linked_docs`: docs/strategies/kair.md,
    "Linked documents and excerpts for the generator"."""
    return asked
