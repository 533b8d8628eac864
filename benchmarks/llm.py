"""Throughput of the local model: prompt and generation tokens per second, one request
at a time vs all at once, for each number of parallel slots.

    python benchmarks/llm.py --threads 2 --parallel 1,4 --n 8

Two workloads, so the two rates are measured separately:
- prompt:     a passage + question per request, 1 output token  -> prompt tokens / wall s
- generation: a one-line request, --gen-tokens output tokens      -> output tokens / wall s
Every request has distinct text so llama.cpp's prompt cache cannot help. Each cell is
the best of --repeat runs (on a shared machine, other processes only ever slow a run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from marag.config import data_dir
from marag.llm import Message
from marag.llm.llamacpp import LlamaCppLLM


def passages(count: int) -> list[tuple[str, str]]:
    """(passage, question) pairs: NQ gold passages when the shared data is present."""
    d = data_dir(required=False)
    path = d / "nq_open_oracle" / "nq_open_oracle_dev600.jsonl" if d else None
    if path and path.exists():
        out = []
        with path.open(encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                gold = next(c for c in row["ctxs"] if c.get("isgold"))
                out.append((gold["text"], row["question"]))
                if len(out) == count:
                    return out
    return [(" ".join(f"fact {i}.{j} is {i * j}." for j in range(60)), f"what is fact {i}.7?") for i in range(count)]


async def timed(
    llm: LlamaCppLLM, requests: list[list[Message]], max_tokens: int, concurrent: bool
) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    if concurrent:
        rs = await asyncio.gather(*(llm.generate(m, max_tokens=max_tokens) for m in requests))
    else:
        rs = [await llm.generate(m, max_tokens=max_tokens) for m in requests]
    wall = time.perf_counter() - t0
    return wall, sum(r.usage.prompt_tokens for r in rs), sum(r.usage.completion_tokens for r in rs)


async def bench(args: argparse.Namespace) -> None:
    n, reps = args.n, args.repeat
    pool = iter(passages(4 * n * reps * len(args.parallel)))  # never the same text twice

    def take() -> list[tuple[str, str]]:
        return [next(pool) for _ in range(n)]

    print(f"threads={args.threads} n={n} gen_tokens={args.gen_tokens} best of {reps}")
    print(f"{'parallel':>8} {'mode':>10} {'prompt tok':>10} {'prompt tok/s':>12} {'gen tok':>8} {'gen tok/s':>10}")
    for parallel in args.parallel:
        llm = LlamaCppLLM(args.model, threads=args.threads, n_ctx=args.ctx_per_slot * parallel, n_parallel=parallel)
        await llm.generate([Message(role="user", content="warm up")], max_tokens=4)  # loads the model
        for concurrent in (False, True):
            p_rate = g_rate = 0.0
            for _ in range(reps):
                prompt_reqs = [[Message(role="user", content=f"{p}\n\nQuestion: {q}?")] for p, q in take()]
                gen_reqs = [[Message(role="user", content=f"Tell a long story about: {q}")] for _, q in take()]
                p_wall, p_tok, _ = await timed(llm, prompt_reqs, 1, concurrent)
                g_wall, _, g_tok = await timed(llm, gen_reqs, args.gen_tokens, concurrent)
                p_rate, g_rate = max(p_rate, p_tok / p_wall), max(g_rate, g_tok / g_wall)
            mode = "concurrent" if concurrent else "sequential"
            print(f"{parallel:>8} {mode:>10} {p_tok:>10} {p_rate:>12.1f} {g_tok:>8} {g_rate:>10.1f}")
        llm.close()
    print("(tok columns: tokens of the cell's last run; tok/s: best run)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF file or catalogue name (default: the default model, qwen2.5-1.5b)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4], help="e.g. 1,4")
    ap.add_argument("--n", type=int, default=8, help="requests per measurement")
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--ctx-per-slot", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=2, help="runs per cell; the best is shown")
    asyncio.run(bench(ap.parse_args()))


if __name__ == "__main__":
    main()
