"""Retrieval quality on a shared dataset (`--dataset`, default hotpotqa): indexes its
corpus with marag's own loader and chunker and prints document-level recall@2/5/10 of
BM25, dense (long chunks truncated, and read as windows) and their hybrids (1:1, and
BM25 weighted 2:1).

    nice -n 10 python benchmarks/recall_datasets.py --dataset datamorgana
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import DATASETS, parse, parser

from marag.index.hybrid import HybridRetriever


def recall_at(ranked_docs: list[str], gold: list[str], k: int) -> float:
    return len(set(ranked_docs[:k]) & set(gold)) / len(set(gold))


def doc_ranking(hits) -> list[str]:
    seen: dict[str, None] = {}
    for h in hits:
        seen.setdefault(h.doc_id, None)
    return list(seen)


def recall_systems(work: Path, chunks, corpus, args) -> tuple[dict[str, object], float]:
    """BM25, dense with long chunks truncated and as windows, and their hybrids."""
    from marag.index import IndexConfig, build_index, corpus_hash, open_index

    emb_name = "minilm" if args.embedder == "auto" else args.embedder
    options = {"threads": args.threads} if emb_name == "minilm" else None
    systems: dict[str, object] = {}
    t0 = time.perf_counter()
    for mode in args.long_chunks.split(","):
        parts = ["bm25", "dense"] if not systems else ["dense"]
        config = IndexConfig(embedder=emb_name, retrievers=parts, dense_long_chunks=mode,
                             chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap)
        build_index(list(chunks), work / mode, config, corpus_hash(corpus.documents), progress=args.progress)
        idx = open_index(work / mode, embedder_options=options)
        if "bm25" not in systems:
            systems["bm25"] = idx.retriever("bm25")
        dense = idx.retriever("dense")
        layout = idx.manifest["parts"]["dense"]["layout"]
        label = f"dense {emb_name}, {mode} ({layout['vectors']:,} vectors)"
        systems[label] = dense
        # The hybrid needs members over the same chunk list to fuse arrays; over two
        # index directories they are equal lists, so it fuses their hits instead.
        pair = {"bm25": systems["bm25"], "dense": dense}
        systems[f"hybrid 1:1, {mode}"] = HybridRetriever(pair)
        systems[f"hybrid bm25 2:1, {mode}"] = HybridRetriever(pair, weights={"bm25": 2.0, "dense": 1.0})
    return systems, time.perf_counter() - t0


def recall(args: argparse.Namespace) -> None:
    from marag.config import data_dir
    from marag.corpus import chunk_documents, load_corpus  # the corpus layer's own loader

    corpus = load_corpus(data_dir(args.data_dir) / DATASETS[args.dataset])
    questions = [q for q in corpus.questions if q.gold_doc_ids][: args.limit or None]
    chunks = chunk_documents(corpus.documents, size=args.chunk_size, overlap=args.chunk_overlap)
    print(
        f"{args.dataset}: {len(corpus.documents)} documents, {len(chunks)} chunks of {args.chunk_size} words, "
        f"{len(questions)} questions with gold documents",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="marag-recall-"))
    try:
        systems, build_s = recall_systems(work, chunks, corpus, args)
        texts = [q.question for q in questions]
        ks = (2, 5, 10)
        print(f"\n## Recall on {args.dataset} ({len(questions)} questions; indexes built in {build_s:.0f}s)\n")
        print("| retriever | " + " | ".join(f"R@{k}" for k in ks) + " |")
        print("|---|" + "---:|" * len(ks))
        for name, r in systems.items():
            results = r.search_batch(texts, k=max(ks) * 3)  # chunks; deduplicated to documents below
            ranked = [doc_ranking(hits) for hits in results]
            vals = [np.mean([recall_at(d, q.gold_doc_ids, k) for d, q in zip(ranked, questions)]) for k in ks]
            print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in vals) + " |", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    recall(parse(parser(__doc__, "dataset", dataset="hotpotqa"), argv))


if __name__ == "__main__":
    sys.exit(main())
