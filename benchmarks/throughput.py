"""Questions per minute for vanilla_rag and mrag: one question at a time in process,
several at once in process (llama.cpp's slots batch them), and several at once against
a llama.cpp HTTP server through the OpenAI-compatible backend; plus the share of wall
time spent outside LLM calls and retrieval (framework overhead).

    python benchmarks/throughput.py --questions 50 --mrag-questions 20

The server is llama.cpp's own (the in-process model's HTTP endpoint on 127.0.0.1, 4
slots), reached over HTTP exactly as a remote llama.cpp or vLLM server would be.
Overhead: each answer's seconds minus the wall time its LLM calls and searches covered
(from its trace; overlapping calls of one question counted once), over its seconds, for
the one-at-a-time rows (with several questions in flight a question also waits for the
others', which is not framework time). Not a timed test: the machine's load changes the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from marag.eval.datasets import load_dataset
from marag.eval.answering import EvalConfig, prepare_retrieval
from marag.llm import make_llm
from marag.llm.llamacpp import LlamaCppLLM
from marag.strategies import make_strategy, run_many
from marag.trace import busy_seconds


def overhead(answers) -> float:
    """Share of the questions' seconds outside every LLM call and search (their
    overlapping intervals counted once, `marag.trace.busy_seconds`)."""
    total = sum(a.seconds for a in answers)
    inside = sum(busy_seconds(a.trace) for a in answers)
    return max(0.0, total - inside) / total if total else 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="hotpotqa_train100")
    ap.add_argument("--questions", type=int, default=50)
    ap.add_argument("--mrag-questions", type=int, default=20)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default="smollm2-135m", help="catalogue name or GGUF file (the framework's overhead shows best on the smallest)")
    args = ap.parse_args()

    ds = load_dataset(args.dataset)
    retriever, _ = prepare_retrieval(EvalConfig(dataset=args.dataset, strategies=["vanilla_rag"]), ds, __import__("pathlib").Path(".marag/indexes"))
    local = LlamaCppLLM(args.model, threads=args.threads, n_parallel=args.slots)
    os.environ["MARAG_BENCH_KEY"] = local.http_api_key
    remote = make_llm("openai:local", base_url=local.http_base_url, api_key_env="MARAG_BENCH_KEY", timeout_s=600)
    print(f"| strategy | mode | questions | q/min | s/question | LLM calls/q | framework overhead |  ({args.dataset}, {local.model}, {args.threads} threads, {args.slots} slots)")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, n in (("vanilla_rag", args.questions), ("mrag", args.mrag_questions)):
        qs = [q.question for q in ds.questions[:n]]
        for mode, llm, conc in (("in process, 1 at a time", local, 1), (f"in process, {args.slots} at once", local, args.slots),
                                (f"HTTP server, {args.slots} at once", remote, args.slots)):  # fmt: skip
            strategy = make_strategy(name, llm, retriever)
            t0 = time.perf_counter()
            answers = asyncio.run(run_many(strategy, qs, concurrency=conc))
            wall = time.perf_counter() - t0
            calls = sum(a.usage.get("llm_calls", 0) for a in answers) / len(answers)
            ov = f"{100 * overhead(answers):.2f}%" if conc == 1 else "–"
            print(f"| {name} | {mode} | {n} | {60 * n / wall:.2f} | {sum(a.seconds for a in answers) / n:.1f} | {calls:.1f} | {ov} |", flush=True)
    local.close()


if __name__ == "__main__":
    main()
