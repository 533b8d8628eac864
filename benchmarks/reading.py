"""How well each answer step reads the same documents: does an agent that holds the
gold documents answer at least as well as one retrieval with them?

    python benchmarks/reading.py --llm llamacpp:MODEL.gguf --skip 50 --n 40 --distractors 2,6
    python benchmarks/reading.py --skip 50 --n 50 --type comparison --steps vanilla_rag,compare_then_answer

For each question (a dataset's questions `skip+1 .. skip+n`), the documents are its
gold documents plus D distractors (the question's own top BM25 hits that are not gold,
so they look relevant), in retrieval order. Every answer step registered below reads
exactly those documents (the answer step of vanilla_rag, mRAG's answerer, IRCoT's
reader, KAIR's generator, ...), one call each; the table gives EM, F1 and accuracy per
step and per D, and the paired difference of each step from vanilla_rag's answerer.
No retrieval happens inside a step and nothing else differs, so a gap is the prompt's.
Not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from pathlib import Path
from collections.abc import Awaitable, Callable
from typing import Annotated

from marag.agents.answerer import ANSWER_STYLES, Answerer, AnswerInput, Passage
from marag.agents.base import Agent
from marag.agents.documents import doc_from_hit
from marag.agents.layout import numbered_passages
from marag.agents.mrag import MRAGAnswerer, MRAGAnswerInput
from marag.eval.datasets import load_dataset
from marag.eval.indexes import ensure_index
from marag.eval.metrics.lexical import contains_answer, exact_match, max_token_f1
from marag.eval.stats import paired_diff_ci
from marag.index.base import Hit
from marag.index.store import IndexConfig
from marag.llm import LLMConfig, make_llm
from marag.llm.base import Message
from pydantic import BaseModel, Field, StringConstraints

Step = Callable[[object, str, list[Hit]], Awaitable[str]]
STYLE = ANSWER_STYLES["short"]


def passages_of(hits: list[Hit]) -> list[Passage]:
    return [Passage(title=h.title, text=h.text) for h in hits]


async def vanilla(llm, question: str, hits: list[Hit]) -> str:
    return (await Answerer(STYLE)(llm, AnswerInput(question=question, passages=passages_of(hits)))).answer


async def mrag(llm, question: str, hits: list[Hit]) -> str:
    docs = [doc_from_hit(h, None, found_for=question) for h in hits]
    return (await MRAGAnswerer(STYLE)(llm, MRAGAnswerInput(question=question, documents=docs))).answer


class Quoted(BaseModel):
    quote: str = Field(max_length=300)
    answer: str = Field(max_length=STYLE.max_chars)


class QuoteThenAnswer(Answerer):
    """Candidate: copy the sentence that answers, then the answer (one call)."""

    Output = Quoted

    def __init__(self):
        self.style, self.max_tokens = STYLE, 200

    def messages(self, inp: AnswerInput):
        msgs = super().messages(inp)
        msgs[0].content = (
            "You answer questions using only the numbered passages you are given. First copy, word for word, the "
            "sentence of the passages that answers the question (quote), then give the answer: a name, number, date "
            "or yes/no, as short as possible. If no passage answers it, quote nothing and say that you do not know."
        )
        return msgs


class Compared(BaseModel):
    facts: list[Annotated[str, StringConstraints(max_length=160)]] = Field(min_length=2, max_length=2)
    answer: str = Field(max_length=STYLE.max_chars)


class CompareThenAnswer(Answerer):
    """Candidate for questions comparing two things: one fact about each, then the
    answer (one call; the facts come first in the schema, so constrained decoding writes
    them first). Measured with `--type comparison`: not kept (benchmarks/RESULTS.md)."""

    Output = Compared

    def __init__(self):
        self.style, self.max_tokens = STYLE, 300

    def messages(self, inp: AnswerInput):
        msgs = super().messages(inp)
        msgs[0].content += (
            " The question compares two things. First write two facts, one about each of the two things, each "
            "starting with that thing's name and saying what decides the question; then the answer, read off those two facts."
        )
        return msgs


class Chosen(BaseModel):
    passages: list[int] = Field(max_length=3)


class Selector(Agent[AnswerInput, Chosen]):
    """Candidate: which passages are needed (then the usual answer from those)."""

    name, Input, Output, max_tokens = "select", AnswerInput, Chosen, 30

    def messages(self, inp: AnswerInput):
        docs = numbered_passages([p.model_copy(update={"text": p.text[:1500]}) for p in inp.passages])
        system = "You pick the passages needed to answer a question: the numbers of at most 3 passages that state the facts it asks for."
        return [Message(role="system", content=system), Message(role="user", content=f"Passages:\n\n{docs}\n\nQuestion: {inp.question}\nPassage numbers as JSON.")]

    def fallback(self, inp, error):
        return Chosen(passages=[])


async def quote(llm, question: str, hits: list[Hit]) -> str:
    return (await QuoteThenAnswer()(llm, AnswerInput(question=question, passages=passages_of(hits)))).answer


async def compare(llm, question: str, hits: list[Hit]) -> str:
    return (await CompareThenAnswer()(llm, AnswerInput(question=question, passages=passages_of(hits)))).answer


async def select(llm, question: str, hits: list[Hit]) -> str:
    passages = passages_of(hits)
    chosen = (await Selector()(llm, AnswerInput(question=question, passages=passages))).passages
    kept = [passages[i - 1] for i in dict.fromkeys(chosen) if 1 <= i <= len(passages)] or passages
    return (await Answerer(STYLE)(llm, AnswerInput(question=question, passages=kept))).answer


STEPS: dict[str, Step] = {
    "vanilla_rag": vanilla,
    "mrag.answerer": mrag,
    "quote_then_answer": quote,
    "select_then_answer": select,
    "compare_then_answer": compare,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="hotpotqa_train100")
    ap.add_argument("--skip", type=int, default=50)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--distractors", default="2,6", help="comma-separated numbers of distractors")
    ap.add_argument("--llm", default="llamacpp")
    ap.add_argument("--steps", default=",".join(STEPS))
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--type", help="only questions of this type (the dataset's metadata, e.g. HotpotQA's comparison)")
    args = ap.parse_args()

    ds = load_dataset(args.dataset)
    questions = [q for q in ds.questions[args.skip : args.skip + args.n] if q.gold_doc_ids]
    if args.type:
        questions = [q for q in questions if (q.metadata or {}).get("type") == args.type]
    idx = ensure_index(ds, IndexConfig(), Path(".marag/indexes"))  # the index `marag eval` builds and caches
    bm25 = idx.retriever("bm25")
    by_doc = {c.doc_id: c for c in idx.chunks}
    llm = make_llm(LLMConfig.from_spec(args.llm))
    steps = {name: STEPS[name] for name in args.steps.split(",")}
    gate = asyncio.Semaphore(args.concurrency)

    async def one(step: Step, q, hits: list[Hit]) -> str:
        async with gate:
            return await step(llm, q.question, hits)

    async def run() -> dict:
        out: dict = {}
        for d in [int(x) for x in args.distractors.split(",")]:
            sets = []
            for q in questions:
                ranking = bm25.search(q.question, 200)
                others = [h for h in ranking if h.doc_id not in q.gold_doc_ids][:d]
                chosen = {h.chunk_id for h in others} | {c.id for g in q.gold_doc_ids if (c := by_doc.get(g))}
                ranked = [h for h in ranking if h.chunk_id in chosen]  # in BM25 order; gold ranked below 200 last
                ranked += [Hit(doc_id=c.doc_id, chunk_id=c.id, score=0.0, text=c.text, title=c.title)
                           for c in (by_doc[g] for g in q.gold_doc_ids if g in by_doc) if c.id not in {h.chunk_id for h in ranked}]  # fmt: skip
                sets.append(ranked)
            for name, step in steps.items():
                answers = await asyncio.gather(*(one(step, q, hits) for q, hits in zip(questions, sets)))
                out[(name, d)] = [
                    (exact_match(a, q.answers), max_token_f1(a, q.answers), contains_answer(a, q.answers)) for a, q in zip(answers, questions)
                ]
        return out

    res = asyncio.run(run())
    print(f"## Reading the same documents: {args.dataset} questions {args.skip + 1}-{args.skip + args.n} "
          f"(n={len(questions)}), gold documents + D BM25 distractors; model {getattr(llm, 'model', args.llm)}\n")  # fmt: skip
    print("| answer step | D | EM | F1 | accuracy | F1 vs vanilla_rag (paired) |\n|---|---|---|---|---|---|")
    for (name, d), rows in res.items():
        base = res.get(("vanilla_rag", d))
        diff = "–"
        if base and name != "vanilla_rag":
            m, lo, hi = paired_diff_ci([r[1] for r in rows], [b[1] for b in base])
            diff = f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}]"
        means = [statistics.fmean(r[i] for r in rows) for i in range(3)]
        print(f"| {name} | {d} | {means[0]:.3f} | {means[1]:.3f} | {means[2]:.3f} | {diff} |")


if __name__ == "__main__":
    main()
