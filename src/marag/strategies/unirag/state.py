"""What one UniRAG question carries through its loop: the working memory (the paper's
(thought, action, evidence) steps), the documents the evidence came from (the answer's
sources) and the search memory (the queries issued and the documents read)."""

from __future__ import annotations

from dataclasses import dataclass, field

from marag.agents.documents import doc_from_hit
from marag.agents.search.memory import SearchMemory
from marag.agents.unirag import Evidence, MemoryStep
from marag.index.base import Hit


@dataclass
class Run:
    question: str
    memory: SearchMemory
    raw_doc_chars: int  # each document's share of the memory when it is evidence whole
    steps: list[MemoryStep] = field(default_factory=list)  # the working memory
    cited: dict[str, Hit] = field(default_factory=dict)  # the sources, in the order they were cited

    def whole(self, hits: list[Hit]) -> list[Evidence]:
        """`hits` as evidence, each document clipped to `raw_doc_chars`, and cited as
        sources (the no-reflector ablation, the evidence floor, named and linked documents)."""
        self.cited.update((h.chunk_id, h) for h in hits)
        return [Evidence(source=h.chunk_id, text=doc_from_hit(h, self.raw_doc_chars).text) for h in hits]

    def naming_texts(self) -> list[str]:
        """Where a document's title is looked for: the question and the sources so far."""
        return [self.question, *(h.text for h in self.cited.values())]

    def evidence(self) -> list[str]:
        """The evidence in the working memory, in order."""
        return [e.text for s in self.steps for e in s.evidence]
