"""How an index directory is built; stored verbatim in its manifest."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class IndexConfig(BaseModel):
    """Everything that decides an index's contents. JSON-serialisable, so the manifest
    records exactly what was built and a rebuild can reproduce it."""

    model_config = ConfigDict(extra="forbid")

    # Chunking parameters the caller used (recorded for provenance; chunking itself is
    # the corpus layer's job, `build_index` receives the chunks).
    chunk_size: int = Field(512, ge=1)
    chunk_overlap: int = Field(80, ge=0)
    # Parts to build, by RETRIEVERS name (marag.index.kinds). "hybrid" needs no files of its own: it is
    # available whenever two or more of its members are built.
    retrievers: list[str] = Field(default_factory=lambda: ["bm25", "dense"])
    # BM25 (Lucene variant: idf = ln(1 + (N - df + 0.5) / (df + 0.5))).
    bm25_k1: float = Field(1.5, gt=0)
    bm25_b: float = Field(0.75, ge=0, le=1)
    # Dense: EMBEDDERS name; exact search or an HNSW graph (needs faiss).
    embedder: str = "minilm"
    # Chunks longer than the embedder reads (MiniLM: 256 tokens, ~190 words; a 512-word
    # chunk is ~700): "windows" embeds each as windows the model reads whole, overlapping
    # by `dense_window_overlap` tokens, and scores a chunk by its best window;
    # "truncate" embeds only its beginning. Embedders without a limit read whole texts
    # either way. Measured with benchmarks/retrieval.py --dataset (MiniLM, 512/80-word
    # chunks), dense recall@2/5/10 truncate -> windows: DataMorgana (long web pages)
    # .880/.958/.976 -> .914/.976/.989, hybrid 1:1 .915/.977/.991 -> .934/.980/.993;
    # MuSiQue .472/.615/.695 -> .475/.618/.690; HotpotQA .625/.785/.845 either way.
    # The price: 2.8x the vectors (and embedding time) on DataMorgana.
    dense_long_chunks: Literal["windows", "truncate"] = "windows"
    dense_window_overlap: int = Field(32, ge=0)
    ann: Literal["exact", "hnsw"] = "exact"
    hnsw_m: int = Field(32, ge=4)
    hnsw_ef_construction: int = Field(100, ge=8)
    # efSearch: measured with benchmarks/retrieval.py --hnsw-ef on MiniLM vectors of the four
    # shared pools (5,182 chunks as 8,349 windows, 1,171 questions), recall@10 against exact
    # search is .954 at 16, .983 at 32, .996 at 64, .999 at 128. Recall falls as corpora
    # grow, so the default keeps that margin.
    hnsw_ef_search: int = Field(128, ge=1)
    # Hybrid: weighted reciprocal rank fusion of the members named here.
    hybrid_weights: dict[str, float] = Field(default_factory=lambda: {"bm25": 1.0, "dense": 1.0})
    rrf_k: int = Field(60, ge=0)
    hybrid_depth: int = Field(100, ge=1)
    # Chunk metadata field naming each chunk's collection (RopMura's knowledge agents
    # each own one); None = a single unnamed collection.
    collection_field: str | None = None
    # "kmeans:N": group the documents into N topical collections by their embeddings
    # (`marag.index.cluster.kmeans`, fixed seed), written to each document's metadata
    # under `collection_field` (default "topic") before chunking.
    split: str | None = Field(default=None, pattern=r"^kmeans:[1-9][0-9]*$")

    @field_validator("retrievers")
    @classmethod
    def _retrievers_nonempty(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("retrievers must name at least one part to build, e.g. ['bm25']")
        if len(set(v)) != len(v):
            raise ValueError(f"retrievers lists a name twice: {v}")
        return v

    @field_validator("hybrid_weights")
    @classmethod
    def _weights_nonnegative(cls, v: dict[str, float]) -> dict[str, float]:
        if any(w < 0 for w in v.values()):
            raise ValueError(f"hybrid weights must be >= 0, got {v}")
        return v

    @model_validator(mode="after")
    def _split_needs_a_field(self) -> "IndexConfig":
        if self.split and self.collection_field is None:
            self.collection_field = "topic"
        return self

    @property
    def split_n(self) -> int | None:
        return int(self.split.split(":", 1)[1]) if self.split else None

    @model_validator(mode="after")
    def _overlap_below_size(self) -> "IndexConfig":
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError("chunk_overlap must be smaller than chunk_size")
        return self
