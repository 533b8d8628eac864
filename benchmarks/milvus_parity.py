"""Retrieval parity: a Milvus index against the local index of the same corpus.

For each dataset, the corpus is chunked once and indexed twice with the same settings
(`IndexConfig()`: 512/80-word chunks, MiniLM int8 with long chunks as windows, BM25
k1=1.5 b=0.75, hybrid = RRF 1:1, k=60, depth 100): as an index directory, and as an
index URI (`milvus://127.0.0.1:PORT/NAME`, what `marag index --out` builds) in a
`milvus-lite server` this script starts on 127.0.0.1. It prints, per retriever (BM25,
dense, hybrid), document-level recall@2/5/10 on the dataset's questions for both, and
queries/s single (one `search` per query) and batched (one `search_batch` over all
questions) for both; dense and hybrid q/s include embedding the queries with MiniLM on
both sides.

    nice -n 10 python benchmarks/milvus_parity.py
    python benchmarks/milvus_parity.py --datasets hotpotqa_train100 --max-docs 200   # a quick look
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

from marag.eval.datasets import load_dataset
from marag.index.pipeline import index_documents
from marag.index.store import IndexConfig

KS = (2, 5, 10)
KINDS = ("bm25", "dense", "hybrid")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(data_dir: Path) -> tuple[subprocess.Popen, str]:
    exe = shutil.which("milvus-lite") or str(Path(sys.executable).parent / "milvus-lite")
    port = free_port()
    proc = subprocess.Popen([exe, "server", "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    for _ in range(600):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"127.0.0.1:{port}"
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("milvus-lite server did not start")


def recall(retriever, questions) -> list[float]:
    results = retriever.search_batch([q.question for q in questions], k=max(KS) * 3)  # chunks, deduplicated to documents
    out = []
    for k in KS:
        vals = []
        for q, hits in zip(questions, results):
            docs = list(dict.fromkeys(h.doc_id for h in hits))[:k]
            vals.append(len(set(docs) & set(q.gold_doc_ids)) / len(set(q.gold_doc_ids)))
        out.append(float(np.mean(vals)))
    return out


def speed(retriever, queries: list[str], n_single: int, repeats: int) -> tuple[float, float]:
    retriever.search_batch(queries[:4], k=10)  # warm: the embedder loads, connections open
    single = batched = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for q in queries[:n_single]:
            retriever.search(q, k=10)
        single = min(single, time.perf_counter() - t0)
        t0 = time.perf_counter()
        retriever.search_batch(queries, k=10)
        batched = min(batched, time.perf_counter() - t0)
    return min(n_single, len(queries)) / single, len(queries) / batched


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="hotpotqa_train100,musique_train100")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--single-queries", type=int, default=100, help="queries timed one per call")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per measurement (the best counts)")
    ap.add_argument("--max-docs", type=int, default=0, help="index only the first N documents (0: all; for a quick look)")
    ap.add_argument("--batch-size", type=int, default=256, help="chunks per Milvus insert")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="marag-parity-"))
    proc, address = start_server(work / "milvus")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows: list[str] = []
    try:
        for name in args.datasets.split(","):
            ds = load_dataset(name, args.data_dir)
            docs = ds.documents[: args.max_docs or None]
            ids = {d.id for d in docs}
            questions = [q for q in ds.questions if q.gold_doc_ids and set(q.gold_doc_ids) <= ids]
            config = IndexConfig()
            t0 = time.perf_counter()
            local = index_documents(docs, work / name, config, progress=False)
            t_local = time.perf_counter() - t0
            t0 = time.perf_counter()
            remote = index_documents(docs, f"milvus://{address}/{name}", config, progress=False, batch_size=args.batch_size)
            t_remote = time.perf_counter() - t0
            chunks = local.manifest["counts"]["chunks"]
            print(f"{name}: {len(docs)} documents, {chunks} chunks, {len(questions)} questions; "
                  f"built locally in {t_local:.0f}s, in Milvus in {t_remote:.0f}s", flush=True)  # fmt: skip
            queries = [q.question for q in questions]
            for kind in KINDS:
                a, b = local.retriever(kind), remote.retriever(kind)
                ra, rb = recall(a, questions), recall(b, questions)
                sa, sb = speed(a, queries, args.single_queries, args.repeats), speed(b, queries, args.single_queries, args.repeats)
                row = (f"| {name} | {kind} | " + "/".join(f"{v:.3f}" for v in ra) + " | " + "/".join(f"{v:.3f}" for v in rb)
                       + f" | {sa[0]:,.0f} | {sb[0]:,.0f} | {sa[1]:,.0f} | {sb[1]:,.0f} |")  # fmt: skip
                rows.append(row)
                print(row, flush=True)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)

    print("\n| dataset | retriever | local R@2/5/10 | Milvus R@2/5/10 | local q/s single | Milvus q/s single | local q/s batched | Milvus q/s batched |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    print("\n".join(rows))
    print(
        f"\nSettings: IndexConfig() defaults on both sides (chunks 512/80 words; MiniLM int8 ONNX, long chunks as "
        f"256-token windows overlapping 32, exact inner product; BM25 k1=1.5, b=0.75; hybrid RRF 1:1, k=60, depth 100). "
        f"BM25 terms on both sides from marag's analyzer (title + text, lower-cased words, Lucene stop words, Snowball stems): "
        f"scored by bm25s locally, by Milvus's BM25 function in Milvus. Milvus: milvus-lite {version('milvus-lite')} server "
        f"on 127.0.0.1 (one process, pure Python), "
        f"pymilvus {version('pymilvus')}, dense search grouped by chunk over the windows (FLAT, IP). Recall: document-level, "
        f"over the top 30 chunks. q/s: k=10, best of {args.repeats}; single: {args.single_queries} queries one per call; "
        f"batched: all questions in one call; queries embedded with MiniLM (1 thread) on both sides. "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load:.1f} at the start."
    )


if __name__ == "__main__":
    main()
