"""`python -m marag.index.warm` (run by `make setup`, and by `marag serve` before it
listens) compiles every kernel a search calls from Python: BM25's, exact and HNSW dense
search's and the hybrid fusion's, so no question waits for numba."""

from __future__ import annotations

import json
import subprocess
import sys

# what retrievers call from Python (the kernels these call are compiled inside them)
ENTRY_KERNELS = {"bm25_topk", "term_maxima", "dense_topk", "pool_candidates", "rrf_fuse"}

COMPILED_IN_A_NEW_PROCESS = r"""
import json, numba
from marag.index.warm import warm_kernels
warmed = warm_kernels()
from marag.index import _kernels
compiled = [n for n in dir(_kernels) if isinstance(getattr(_kernels, n), numba.core.registry.CPUDispatcher) and getattr(_kernels, n).signatures]
print(json.dumps({"warmed": warmed, "compiled": compiled}))
"""


def test_warming_compiles_every_kernel_a_search_calls():
    out = subprocess.run([sys.executable, "-c", COMPILED_IN_A_NEW_PROCESS], capture_output=True, text=True, check=True, timeout=900)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["warmed"] == ["bm25", "dense (exact)", "hybrid", "dense (hnsw)"]
    assert ENTRY_KERNELS <= set(got["compiled"]), ENTRY_KERNELS - set(got["compiled"])


def test_every_entry_kernel_is_one_the_retrievers_call():
    # the list above is checked against the retrievers' code, so a new entry kernel is not missed
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src" / "marag" / "index"
    called = {m for f in ("bm25.py", "dense.py", "hybrid.py") for m in re.findall(r"(?:_kernels|kernels\(\))\.(\w+)\(", (src / f).read_text())}
    assert called == ENTRY_KERNELS
