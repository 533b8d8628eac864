"""`marag serve` keeps glibc to two malloc arenas (marag.serve.memory): eight threads
allocating at once get eight arenas in a process left alone, two in one capped; an
operator's MALLOC_ARENA_MAX is left to rule."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from marag.serve import memory

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="arenas are glibc's")

ARENAS_AFTER_THREADS = r"""
import ctypes, os, sys, tempfile, threading
from marag.serve.memory import cap_malloc_arenas
if sys.argv[1] == "cap":
    assert cap_malloc_arenas()
barrier = threading.Barrier(8)
def work():
    barrier.wait()  # all at once: a thread gets its own arena when the others hold theirs
    kept = [bytes(4000) for _ in range(50)]  # over 512 bytes: malloc's, not Python's small-object pool
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
path = os.path.join(tempfile.mkdtemp(), "malloc.xml")
f = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, ctypes.c_void_p(f))
libc.fclose(ctypes.c_void_p(f))
print(open(path).read().count("<heap nr="))
"""


def _arenas(mode: str, **env: str) -> int:
    import os

    out = subprocess.run([sys.executable, "-c", ARENAS_AFTER_THREADS, mode], env={**os.environ, **env}, capture_output=True,
                         text=True, check=True, timeout=60)  # fmt: skip
    return int(out.stdout.strip())


def test_the_cap_keeps_threads_to_two_arenas():
    assert _arenas("free") >= 8  # the main arena and one per thread
    assert _arenas("cap") <= memory.ARENAS


def test_an_operators_setting_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert memory.cap_malloc_arenas() is False  # glibc read it at start; marag leaves it
    assert _arenas("free", MALLOC_ARENA_MAX="4") <= 4

