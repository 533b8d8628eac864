"""Keeping Python's cyclic garbage collector off the hot paths.

CPython runs a collection whenever enough container objects (lists, dicts, class
instances such as pydantic models) have been allocated, in three generations; a full
(generation 2) collection walks every tracked object in the process. With numba,
pydantic and an index loaded that is ~300,000 objects and 0.1-0.4 s, and a search
batch that builds thousands of hits set one off every few batches: a user saw every
second or third batch of 700 queries take ~8x as long as the others (issue 28).

Two tools:

- `CollectionsHeld`/`held_collections()`: no automatic collection while a block runs.
  A search builds hits that all stay alive (they are the result) and makes no
  reference cycles, so collecting in the middle of it finds nothing to free; the young
  collection the allocations call for (generation 0, or 1 when that is due) is run when
  the block ends (it walks only young objects), so the search, not whoever allocates
  next, pays for it; a full collection never starts inside the block.
  Reentrant and safe across threads: the collector is switched back on when the last
  holder leaves, and only if it was on when the first one came in.
- `freeze_long_lived()`: objects alive now (a loaded index, dataset, models, the
  imported libraries) move to the permanent generation (`gc.freeze`), which no
  collection walks: later full collections look only at what was allocated since. Call
  it when loading is done and a long run starts (`marag eval` does). What was frozen by
  an earlier call and is garbage now is freed first, so calling it at the start of
  every run does not keep old runs' data alive; `thaw()` when the run ends hands the
  frozen objects back to the collector (a process that runs many evaluations, such as
  `marag serve`, then frees each run's data as usual).
"""

from __future__ import annotations

import gc
import threading

__all__ = ["CollectionsHeld", "freeze_long_lived", "held_collections", "thaw"]


class CollectionsHeld:
    """Context manager: no automatic garbage collection inside (see the module)."""

    __slots__ = ()
    _lock = threading.Lock()
    _holders = 0
    _resume = False  # whether the first holder found the collector on

    def __enter__(self) -> "CollectionsHeld":
        # acquire()/release() rather than `with`: a `with` allocates a bound method, and
        # at the collector's threshold that allocation starts a collection (a full one,
        # when the young collections run at earlier exits made one due) right here
        cls = CollectionsHeld
        cls._lock.acquire()
        try:
            if cls._holders == 0:
                cls._resume = gc.isenabled()
                if cls._resume:
                    gc.disable()
            cls._holders += 1
        finally:
            cls._lock.release()
        return self

    def __exit__(self, *exc: object) -> None:
        cls = CollectionsHeld
        with cls._lock:
            if cls._holders > 1 or not cls._resume:
                cls._holders -= 1
                return
        # The last holder, and the collector was on: the young collections the block's
        # allocations made due run now (rather than at the caller's next allocation), as
        # the collector would choose them but never a full one; survivors (the hits) move
        # to an older generation. Still switched off here, so reading the counts (which
        # allocates) cannot start a collection of its own; the lock is not held, so a
        # finalizer that searches can enter (it then leaves the switching on to us).
        count0, count1, _ = gc.get_count()
        threshold0, threshold1, _ = gc.get_threshold()
        if count0 > threshold0:
            gc.collect(1 if count1 > threshold1 else 0)
        with cls._lock:
            cls._holders -= 1
            if cls._holders == 0:
                gc.enable()


_HELD = CollectionsHeld()


def held_collections() -> CollectionsHeld:
    """`with held_collections(): ...` runs the block without automatic collections."""
    return _HELD


# The collector's permanent generation is one per process, so freezes are counted: in
# `marag serve` two evaluations can overlap, and the first to end must not hand the
# other's objects back (nor collect the frozen ones in the middle of its run).
_freezes = 0
_freeze_lock = threading.Lock()


def freeze_long_lived() -> int:
    """Freeze every object alive now, so that no later collection walks it; the first
    freeze (no run holding one) first frees what is garbage now, including objects an
    earlier run froze, at the cost of one full collection (~0.1-0.4 s). Pair each call
    with `thaw()`. Returns how many objects are frozen."""
    global _freezes
    with _freeze_lock:
        if _freezes == 0:
            gc.unfreeze()
            gc.collect()
        _freezes += 1
        gc.freeze()
        return gc.get_freeze_count()


def thaw() -> None:
    """End one `freeze_long_lived()`: when no other run holds a freeze, hand every frozen
    object back to the collector (`gc.unfreeze`); what was dropped since is freed by the
    next full collection."""
    global _freezes
    with _freeze_lock:
        _freezes = max(0, _freezes - 1)
        if _freezes == 0:
            gc.unfreeze()
