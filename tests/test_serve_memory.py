"""`marag serve` fixes glibc's mmap threshold (marag.serve.memory): after a 1 MiB block is
freed, a 512 KiB block still gets its own mapping (glibc's default had raised the
threshold past it, and the block came from the arena); an operator's
MALLOC_MMAP_THRESHOLD_ is left to rule."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from marag.serve import memory

LIBC, VERSION = platform.libc_ver()
pytestmark = pytest.mark.skipif(LIBC != "glibc" or tuple(int(x) for x in VERSION.split(".")[:2]) < (2, 33),
                                reason="the threshold is glibc's; mallinfo2, which counts mappings, is from 2.33")  # fmt: skip

MAPPED_AFTER_A_LARGE_FREE = r"""
import ctypes, sys
from marag.serve.memory import fix_mmap_threshold
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "fixed":
    assert fix_mmap_threshold()
libc.free(libc.malloc(1 << 20))  # freeing a mapped 1 MiB block raises a moving threshold to 1 MiB
before = libc.mallinfo2().hblks
block = libc.malloc(512 << 10)
print(libc.mallinfo2().hblks - before)  # 1: the block has its own mapping; 0: it came from the arena
"""


def _mapped(mode: str, **env: str) -> int:
    out = subprocess.run([sys.executable, "-c", MAPPED_AFTER_A_LARGE_FREE, mode], env={**os.environ, **env},
                         capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    return int(out.stdout.strip())


def test_a_large_block_keeps_its_own_mapping_once_the_threshold_is_fixed():
    assert _mapped("moving") == 0  # glibc's default: the threshold moved past 512 KiB
    assert _mapped("fixed") == 1


def test_an_operators_setting_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert memory.fix_mmap_threshold() is False  # glibc read it at start; marag leaves it
    assert _mapped("moving", MALLOC_MMAP_THRESHOLD_="131072") == 1
