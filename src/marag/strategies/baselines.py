"""The baselines every evaluation runs beside the agent strategies: closed book
(`llm_only`), chain-of-thought without retrieval (`cot`, RopMura's baseline), and
retrieve-then-read (`vanilla_rag` with mRAG's k=2; `vanilla_rag_k10`, KAIR's naive RAG
at k=10)."""

from __future__ import annotations

from pydantic import Field

from marag.agents.answerer import Answerer, AnswerInput, AnswerOutput, AnswerStyle, Passage
from marag.agents.cot import REASONING_MAX_CHARS, ChainOfThought
from marag.index.base import Hit
from marag.strategies.base import STRATEGIES, AnsweringConfig, Strategy, register_variant
from marag.trace import record_read


class LLMOnlyConfig(AnsweringConfig):
    temperature: float = 0.0


@STRATEGIES.register("llm_only")
class LLMOnly(Strategy):
    """Closed book: the model answers from its own knowledge, no retrieval."""

    name = "llm_only"
    paper = "baseline"
    description = "No retrieval: the LLM answers from its own knowledge."
    needs_retriever = False
    Config = LLMOnlyConfig
    agents = (Answerer,)

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        out = await Answerer(self.config.style())(
            self.llm, AnswerInput(question=question), temperature=self.config.temperature
        )
        return out.answer, []


class CoTConfig(AnsweringConfig):
    reasoning_chars: int = Field(default=REASONING_MAX_CHARS, ge=100, le=4000)  # ours: the reasoning's length cap
    temperature: float = 0.0


@STRATEGIES.register("cot")
class CoT(Strategy):
    """Closed book with chain-of-thought: the model reasons step by step, then answers
    (RopMura's baseline without retrieval)."""

    name = "cot"
    paper = "baseline (RopMura's closed-book chain of thought)"
    description = "No retrieval: the LLM reasons step by step from its own knowledge, then answers."
    needs_retriever = False
    Config = CoTConfig
    agents = (ChainOfThought,)

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        cfg = self.config
        out = await ChainOfThought(cfg.style(), cfg.reasoning_chars)(self.llm, AnswerInput(question=question), temperature=cfg.temperature)
        return out.answer, []


class VanillaRAGConfig(AnsweringConfig):
    # mRAG's retrieve-then-read baseline reads 2 documents.
    k: int = Field(default=2, ge=1, le=50)
    temperature: float = 0.0


@STRATEGIES.register("vanilla_rag")
class VanillaRAG(Strategy):
    """Retrieve k passages once, then answer from them; the passages are the sources."""

    name = "vanilla_rag"
    paper = "baseline (retrieve-then-read, mRAG's k=2)"
    description = "Retrieve k passages (default 2), answer from them, cite them."
    Config = VanillaRAGConfig
    agents = (Answerer,)

    async def solve(self, question: str) -> tuple[str, list[Hit]]:
        out, hits = await read_once(self, question, self.config.k, self.config.style(), self.config.temperature)
        return out.answer, hits


async def read_once(strategy: Strategy, question: str, k: int, style: AnswerStyle, temperature: float = 0.0) -> tuple[AnswerOutput, list[Hit]]:
    """Retrieve-then-read: the question's top `k` passages, read once by the answerer
    (in its own trace step, `answerer`, which asks for the tokens' log-probabilities).
    `vanilla_rag` is this; `auto`'s first pass is this."""
    hits = await strategy.search(question, k)
    record_read(hits)
    passages = [Passage(title=h.title, text=h.text) for h in hits]
    out = await Answerer(style)(strategy.llm, AnswerInput(question=question, passages=passages), temperature=temperature)
    return out, hits


# More passages for the same single retrieval: an agent's gain over k=2 should be more
# than what reading five passages instead of two buys.
register_variant(VanillaRAG, "vanilla_rag_k5", "Retrieve 5 passages, answer from them (vanilla_rag with k=5).", k=5)
register_variant(VanillaRAG, "vanilla_rag_k10", "Naive RAG at k=10 (KAIR's baseline): retrieve 10 passages, answer from them.", k=10)
