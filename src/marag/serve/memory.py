"""What a long-running server does so its memory stays level: glibc's allocator is told to
give large blocks back at once, and an evaluation's memory is handed back when it ends.

glibc serves a block of 128 KiB or more with its own mapping, returned to the system when
freed, but each time such a block is freed it raises that threshold to the block's size
(up to 32 MiB), so from then on blocks that large come from its arenas, where freed memory
stays with the process and fragments. A server reads whole results files, indexes and
traces again and again: the threshold climbed, and each new evaluation's blocks landed in
arena memory the last one had left in pieces. Scripted soak (benchmarks/soak.py, 16
clients, evaluations of 4 strategies over hotpotqa_dev488 one after another): with
glibc's defaults the server held ~500 MB while the first evaluation ran and ~625 MB while
the second did, the extra in fresh 64 MB arena blocks; with the threshold fixed at 128 KiB,
~400 MB and then ~514 MB, level over the next evaluations. Python's own objects did not
grow (tracemalloc: 114-121 MB throughout). Two arenas instead of glibc's 8 a core were
tried too: level as well, but at ~800 MB, and 17 asks timed out in that soak (none in
the others).
"""

from __future__ import annotations

import ctypes
import gc
import os

MMAP_THRESHOLD = 128 * 1024  # glibc's own starting value, kept from moving
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h


def _libc():
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def fix_mmap_threshold(size: int = MMAP_THRESHOLD) -> bool:
    """Serve blocks of `size` or more with their own mappings for the rest of the process
    (a threshold set this way no longer moves). An operator's MALLOC_MMAP_THRESHOLD_ wins.
    False where the C library is not glibc."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt") or os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, size))


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
