"""Retrieval speed against the raw engines, and retrieval quality on real benchmark data.

Runs the retrieval benchmarks together, with all their options:

- speed (default): marag's retrievers against the engines they wrap, on the same texts
  and the same vectors, corpus by corpus, in one table: speed_bm25.py (bm25s),
  speed_dense.py (numpy exact search; faiss IndexFlatIP noted), speed_hnsw.py (a faiss
  graph), speed_hybrid.py (the sum of both raw engines). Corpora, rounds, garbage
  collections and the table: _speed.py and _corpora.py.
- `--hnsw-ef 16,32,64,128`: then recall_hnsw.py, HNSW recall@10 against exact search
  per efSearch on the MiniLM vectors of the four shared pools.
- `--dataset hotpotqa|musique|nq|datamorgana`: instead, recall_datasets.py,
  document-level recall@2/5/10 of BM25, dense and hybrid on that dataset.

    nice -n 10 python benchmarks/retrieval.py                      # all real-text corpora
    python benchmarks/retrieval.py --corpora pools,pools-dup --hnsw-ef 16,32,64,128
    nice -n 10 python benchmarks/retrieval.py --dataset datamorgana
"""

from __future__ import annotations

import sys

import recall_datasets
import recall_hnsw
import speed_bm25
import speed_dense
import speed_hnsw
import speed_hybrid
from _common import parse, parser
from _speed import run


def main(argv: list[str] | None = None) -> None:
    args = parse(parser(__doc__, "speed", "bm25", "hnsw", "sweep", "dataset"), argv)
    if args.dataset:
        recall_datasets.recall(args)
        return
    run(args, [speed_bm25.rows, speed_dense.rows, speed_hnsw.rows, speed_hybrid.rows])
    if args.hnsw_ef:
        recall_hnsw.sweep(args)


if __name__ == "__main__":
    sys.exit(main())
