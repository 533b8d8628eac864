"""Do retrieval's threads fight llama.cpp's? Generation speed of the local model alone,
then while another thread embeds queries with MiniLM (onnxruntime) and scans dense
vectors (numpy), as an agent's searches do between its LLM calls, for several
onnxruntime settings.

    python benchmarks/threads.py [--seconds 20]

Prints generated tokens/s of the model and query embeddings/s of the background thread.
Not a timed test: compare rows of one run (another process on the machine changes all
rows alike).
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time

import numpy as np

from marag.index.embed import MiniLMEmbedder
from marag.llm import Message
from marag.llm.llamacpp import LlamaCppLLM


def generate(llm: LlamaCppLLM, seconds: float) -> float:
    prompt = [Message(role="user", content="Write a long story about a lighthouse keeper and the sea.")]

    async def run() -> float:
        tokens, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            r = await llm.generate(prompt, max_tokens=64, temperature=0.8, seed=int(t0 * 1000) % 10_000)
            tokens += r.usage.completion_tokens
        return tokens / (time.perf_counter() - t0)

    return asyncio.run(run())


def searching(embedder: MiniLMEmbedder, stop: threading.Event, counter: list[int], pause_s: float) -> None:
    vectors = np.random.default_rng(0).normal(size=(20_000, 384)).astype(np.float32)
    i = 0
    while not stop.is_set():
        q = embedder.embed([f"who wrote the novel number {i} about the sea"])
        np.argpartition(-(vectors @ q[0]), 10)[:10]
        counter[0] += 1
        i += 1
        time.sleep(pause_s)  # an agent searches between LLM calls, not back to back


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    ap.add_argument("--pause", type=float, default=0.05, help="seconds between the background thread's searches")
    args = ap.parse_args()
    llm = LlamaCppLLM(threads=args.threads, n_parallel=1)
    generate(llm, 3)  # warm up
    rows = [("LLM alone", None)]
    rows += [(f"+ search, onnxruntime {t} thread(s), spinning {'on' if s else 'off'}", (t, s)) for t, s in ((2, True), (1, True), (2, False), (1, False))]
    print(f"| background | LLM gen tok/s | searches/s |  (llama.cpp {args.threads} threads, {args.seconds:.0f} s per row)")
    print("|---|---:|---:|")
    for label, setting in rows:
        stop, counter = threading.Event(), [0]
        worker = None
        if setting is not None:
            emb = MiniLMEmbedder(threads=setting[0], spin=setting[1])
            worker = threading.Thread(target=searching, args=(emb, stop, counter, args.pause))
            worker.start()
        t0 = time.perf_counter()
        rate = generate(llm, args.seconds)
        elapsed = time.perf_counter() - t0
        stop.set()
        if worker:
            worker.join()
        print(f"| {label} | {rate:.1f} | {counter[0] / elapsed:.1f} |", flush=True)
    llm.close()


if __name__ == "__main__":
    main()
