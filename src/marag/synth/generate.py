"""`marag synth`: questions generated from an index, in the evaluation format.

Two styles:
- `datamorgana`: each question draws its categories (`marag.synth.categories`), takes
  as many documents as the categories need (random chunks of distinct documents, from
  a seeded generator), and asks the question writer for a question with those
  properties and its answer. The record carries the categories as metadata (the real
  DataMorgana field names) and the documents as gold evidence.
- `synagent`: single-hop questions from one passage, and multi-hop ones from two
  passages linked by an entity (the second passage's title appears in the first's
  text); a teacher annotates a solution (thought, search query, evidence per step,
  final answer); a verifier scores it 0-5 and only questions scoring at least
  `min_score` (4) are kept.

Records: {"id", "question", "answers": [answer], "gold_doc_ids", "reference_answer",
categories..., "hops", "solution", "verification"}: `marag eval FILE --index IDX` reads
them. Writing is incremental and resumable: rerunning continues up to `n`.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from marag.agents.documents import doc_from_hit
from marag.errors import MaragError
from marag.index.base import Hit
from marag.synth.agents import QuestionWriter, SolutionAnnotator, SolveInput, Verifier, VerifyInput, WriteInput
from marag.synth.categories import CategorySpec


class DocumentPool:
    """Random chunks of an index, one per document, and the entity links between them."""

    def __init__(self, index, seed: int = 0, doc_chars: int = 1500):
        self.rng = random.Random(seed)
        self.doc_chars = doc_chars
        first: dict[str, int] = {}
        for i, c in enumerate(index.chunks):
            first.setdefault(c.doc_id, i)
        self.chunks = index.chunks
        self.positions = list(first.values())
        if not self.positions:
            raise MaragError("the index holds no documents to generate questions from")
        self._titles: dict[str, list[int]] | None = None

    def hit(self, pos: int) -> Hit:
        c = self.chunks[pos]
        return Hit(doc_id=c.doc_id, chunk_id=c.id, score=0.0, text=c.text, title=c.title)

    def draw(self, n: int) -> list[Hit]:
        picked = self.rng.sample(self.positions, min(n, len(self.positions)))
        return [self.hit(p) for p in picked]

    def linked_pair(self, tries: int = 200) -> list[Hit] | None:
        """Two chunks where the second's title occurs in the first's text."""
        if self._titles is None:
            self._titles = defaultdict(list)
            for p in self.positions:
                title = self.chunks[p].title.strip()
                if len(title) >= 4:
                    self._titles[title.lower()].append(p)
        for _ in range(tries):
            a = self.rng.choice(self.positions)
            text = self.chunks[a].text.lower()
            links = [p for t, ps in self._titles.items() if t in text for p in ps if self.chunks[p].doc_id != self.chunks[a].doc_id]
            if links:
                return [self.hit(a), self.hit(self.rng.choice(sorted(links)))]
        return None


async def generate(
    llm, index, n: int, out: str | Path, style: str = "datamorgana", spec: CategorySpec | None = None, seed: int = 0,
    min_score: int = 4, multi_hop_share: float = 0.5, concurrency: int = 4, progress: bool = True,
) -> Path:  # fmt: skip
    from tqdm.auto import tqdm

    from marag.synth.categories import DEFAULT_SPEC

    if style not in ("datamorgana", "synagent"):
        raise MaragError(f"unknown synthesis style {style!r}", hint="choose datamorgana or synagent")
    out = Path(out)
    done = _existing(out)
    spec = spec or DEFAULT_SPEC
    pool = DocumentPool(index, seed=seed + len(done))
    rng = random.Random(seed + 7919 * len(done))
    gate = asyncio.Semaphore(concurrency)
    lock = asyncio.Lock()
    bar = tqdm(total=n, initial=len(done), desc=f"synth {style}", unit="q", disable=not progress)
    attempts = {"left": max(4 * n, 20)}  # draws the writer or the verifier rejects are retried, within reason

    async def one(number: int) -> None:
        while True:
            async with lock:
                if len(done) >= n or attempts["left"] <= 0:
                    return
                attempts["left"] -= 1
                plan = _plan(style, spec, pool, rng, multi_hop_share)
            if plan is None:
                continue
            async with gate:
                record = await _make(llm, plan, style, min_score)
            if record is None:
                continue
            async with lock:
                if len(done) >= n:
                    return
                record["id"] = f"synth-{len(done) + 1:05d}"
                with out.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
                done.append(record["id"])
                bar.update(1)
            return

    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        await asyncio.gather(*(one(i) for i in range(n - len(done))))
    finally:
        bar.close()
    if len(done) < n:
        raise MaragError(f"generated {len(done)} of {n} questions: the writer or the verifier rejected the rest",
                         hint="rerun to continue, lower --min-score, or use a stronger --llm")  # fmt: skip
    return out


def _existing(out: Path) -> list[str]:
    if not out.exists():
        return []
    ids = []
    for line in out.read_text(encoding="utf-8").splitlines():
        try:
            ids.append(json.loads(line)["id"])
        except (ValueError, KeyError):
            continue
    return ids


def _plan(style: str, spec: CategorySpec, pool: DocumentPool, rng: random.Random, multi_hop_share: float) -> dict[str, Any] | None:
    if style == "datamorgana":
        cats = spec.sample(rng)
        return {"categories": cats, "hits": pool.draw(spec.documents_needed(cats)), "described": spec.describe(cats)}
    if rng.random() < multi_hop_share:
        pair = pool.linked_pair()
        if pair is not None:
            return {"hops": 2, "hits": pair}
    return {"hops": 1, "hits": pool.draw(1)}


async def _make(llm, plan: dict[str, Any], style: str, min_score: int) -> dict[str, Any] | None:
    hits: list[Hit] = plan["hits"]
    docs = [doc_from_hit(h, 1500) for h in hits]
    qa = await QuestionWriter()(llm, WriteInput(documents=docs, categories=plan.get("described", []), hops=plan.get("hops", 1)))
    question, answer = " ".join(qa.question.split()), " ".join(qa.answer.split())
    if len(re.findall(r"\w+", question)) < 2 or not answer:
        return None
    record: dict[str, Any] = {
        "question": question,
        "answers": [answer],
        "reference_answer": answer,
        "gold_doc_ids": list(dict.fromkeys(h.doc_id for h in hits)),
    }
    if style == "datamorgana":
        return record | plan["categories"]
    solution = await SolutionAnnotator()(llm, SolveInput(question=question, answer=answer, documents=docs))
    steps = [s.model_dump() for s in solution.steps]
    verdict = await Verifier()(
        llm, VerifyInput(question=question, answer=answer, documents=docs, solution=json.dumps(steps, ensure_ascii=False))
    )
    if verdict.score < min_score:
        return None
    return record | {"hops": plan["hops"], "solution": {"steps": steps, "final_answer": solution.final_answer},
                     "verification": {"score": verdict.score, "reason": verdict.reason}}  # fmt: skip
