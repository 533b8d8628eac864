"""IRCoT (Trivedi et al., ACL 2023): retrieval interleaved with chain-of-thought, the
standard iterative multi-hop baseline (FlashRAG reports it; Agent-UniRAG compares with
it).

1. Retrieve `k` paragraphs for the question.
2. Reason: the model writes the next sentence of a chain of thought from all paragraphs
   collected so far (`agents.ircot.Thinker`). When it gives an answer, retrieval stops.
3. Retrieve: the new sentence is the next query; its top `k` paragraphs join the
   collection (at most `max_paragraphs`, earliest kept, as in the paper). Back to 2,
   at most `max_steps` reasoning steps.
4. A reader answers from the collected paragraphs, as in the paper (its "IRCoT QA":
   the chain decides what to retrieve, a reader answers). `chain_answers=true` keeps
   the chain's own answer when it gave one (one call fewer). When the chain ended
   without an answer (steps or budget spent, an unusable step), the reader gets the
   chain as a note.

The paper tunes K (paragraphs per step) among 2-8 and caps the collection at 15
paragraphs; `k=4`, `max_paragraphs=15` and `max_steps=5` are our defaults for a small
local model. Every paragraph collected is shown to the model (read), and the answer's
sources are the collected paragraphs.
"""

from __future__ import annotations

from pydantic import Field

from marag.agents.answerer import Answerer, AnswerInput, Passage
from marag.agents.documents import doc_from_hit
from marag.agents.ircot import Thinker, ThinkInput, render_chain
from marag.agents.layout import clip
from marag.agents.queries import QUERY_MAX_CHARS, clean_query
from marag.index.base import Hit
from marag.llm.budget import budget_spent, grace
from marag.strategies.base import STRATEGIES, AnsweringConfig, Strategy
from marag.trace import record_read, step


class IRCoTConfig(AnsweringConfig):
    k: int = Field(default=4, ge=1, le=20)  # paragraphs retrieved per step (the paper: tuned in 2-8)
    max_steps: int = Field(default=5, ge=1, le=15)  # reasoning sentences at most
    max_paragraphs: int = Field(default=15, ge=1, le=50)  # the collection's cap (the paper: 15)
    doc_chars: int | None = Field(default=600, ge=100)  # each paragraph as the model reads it
    # The chain's answer is final (no reader call). Off by default, measured with the
    # default model (Qwen2.5-Coder-1.5B, HotpotQA train 51-62): its chain concluded in its
    # first sentence on every question, often against its paragraphs ("No, Medici and
    # Senet are not both board games"); see benchmarks/RESULTS.md.
    chain_answers: bool = False
    temperature: float = 0.0
    seed: int | None = None


@STRATEGIES.register("ircot")
class IRCoT(Strategy):
    name = "ircot"
    paper = "Trivedi et al. 2023 (IRCoT)"
    calls = (2, 6)
    description = "Retrieval interleaved with chain-of-thought: each reasoning sentence is the next query (Trivedi et al. 2023)."
    Config = IRCoTConfig
    agents = (Thinker, Answerer)

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        cfg = self.config
        collected: dict[str, Hit] = {}
        chain: list[str] = []
        answer = ""
        await self._retrieve(clip(question, QUERY_MAX_CHARS), collected)
        for _ in range(cfg.max_steps):
            if budget_spent():
                break
            docs = [doc_from_hit(h, cfg.doc_chars) for h in collected.values()]
            out = await Thinker(cfg.style())(self.llm, ThinkInput(question=question, documents=docs, chain=chain), cfg.temperature, cfg.seed)
            sentence = " ".join(out.sentence.split())
            new = bool(sentence) and sentence not in chain
            if new:
                chain.append(sentence)
            if out.answer.strip():  # the chain reached the answer
                answer = out.answer.strip()
                break
            if not new:  # no new step: reasoning is stuck
                break
            await self._retrieve(clean_query(sentence), collected)
        by_chain = bool(answer) and cfg.chain_answers
        if not by_chain:
            with grace(), step("reader", chain=render_chain(chain)):
                passages = [Passage(title=h.title, text=h.text) for h in collected.values()]
                # an unfinished chain is a note for the reader; a finished one already
                # made its claim, which the reader is to check, not repeat
                note = f"{question}\n(Reasoning so far: {render_chain(chain)})" if chain and not answer else question
                answer = (await Answerer(cfg.style())(self.llm, AnswerInput(question=note, passages=passages), cfg.temperature, cfg.seed)).answer
        with step("budget") as s:
            s.outputs = {"reasoning_steps": len(chain), "paragraphs": len(collected), "answered_by_chain": by_chain}
        return answer, list(collected.values())

    async def _retrieve(self, query: str, collected: dict[str, Hit]) -> None:
        room = self.config.max_paragraphs - len(collected)
        if room <= 0 or not query:
            return
        with step("retrieve", query=query) as s:
            # ask for k beyond what is already collected, so each step can add k new ones
            hits = [h for h in await self.search(query, self.config.k + len(collected)) if h.chunk_id not in collected]
            new = hits[: min(self.config.k, room)]
            collected.update((h.chunk_id, h) for h in new)
            s.outputs = {"added": [h.chunk_id for h in new]}
        record_read(new)
