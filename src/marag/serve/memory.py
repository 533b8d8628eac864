"""What a long-running server does so its memory stays level: glibc's allocator is told to
keep few arenas, and an evaluation's memory is handed back when it ends.

glibc gives a thread that allocates while another holds an arena an arena of its own, up
to 8 per core, and memory freed in one arena serves only the threads that use it. The
server's threads (the event loop, the worker threads `asyncio.to_thread` hands work to,
an evaluation's) change over a day, so each new evaluation's index and answers landed in
arenas the last one had not filled, and the server's peak stepped up by evaluations
(scripted soak: 500 MB while the first evaluation ran, 625 MB while the second did, the
extra in 64 MB arena blocks; benchmarks/soak.py). Python's own objects did not grow
(tracemalloc: 114-121 MB throughout). Two arenas are what Python servers usually run
with: the GIL lets one thread allocate at a time anyway.
"""

from __future__ import annotations

import ctypes
import gc
import os

ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter number in glibc's malloc.h


def _libc():
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def cap_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Limit glibc's arenas for the rest of the process (arenas already made stay; call it
    early). An operator's MALLOC_ARENA_MAX wins. False where the C library is not glibc."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt") or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


def give_memory_back() -> None:
    """Free what an evaluation left behind and hand the freed pages back to the system.
    Its index, dataset and strategies are garbage when it ends, but in reference cycles
    that only a full collection frees (`marag.collector.thaw`: the next one, whenever
    that comes), and glibc keeps freed memory in its arenas. A server that ran 15
    evaluations (4 strategies over hotpotqa_dev488's index) one after another held 900 MB
    and growing; with this, 330 MB (benchmarks/soak.py)."""
    gc.collect()
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):  # glibc's; other C libraries have none (nothing to do)
        libc.malloc_trim(0)
