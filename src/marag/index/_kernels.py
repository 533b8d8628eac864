"""Compiled inner loops of the retrievers (numba, cached on disk).

Every retriever ends the same way: among some candidate chunks with scores, keep the
`want` best, ordered by score descending and, among equal scores, by position in the
index. Doing that selection here, in one pass with the position as part of the heap key,
is what keeps duplicated text cheap: a run of equal scores across the page boundary
needs no second pass over the whole corpus.

The kernels take and return plain arrays; `positions`/`scores` outputs are
(n_queries, want) with `counts[i]` valid entries in row i (the rest is -1 / 0).

Compilation happens on first use and is cached on disk (numba's `cache=True`), so
only the first process on a machine pays the few seconds. Import this module lazily:
importing numba costs a few hundred milliseconds that BM25-free callers need not pay.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# nogil: a batch split across Python threads runs truly in parallel.
jit = njit(cache=True, nogil=True)


@jit
def worse(key_a, pos_a, key_b, pos_b):
    # (key, position) order: a lower key is worse; an equal key at a later position
    # is worse, so the earlier chunk wins a tie.
    return key_a < key_b or (key_a == key_b and pos_a > pos_b)


@jit
def sift_down(keys, pos, size, i):
    # Restore the min-heap below slot i (root = the worst entry kept so far).
    while True:
        left = 2 * i + 1
        if left >= size:
            return
        child = left
        right = left + 1
        if right < size and worse(keys[right], pos[right], keys[left], pos[left]):
            child = right
        if worse(keys[child], pos[child], keys[i], pos[i]):
            keys[i], keys[child] = keys[child], keys[i]
            pos[i], pos[child] = pos[child], pos[i]
            i = child
        else:
            return


@jit
def sift_up(keys, pos, i):
    while i > 0:
        parent = (i - 1) // 2
        if worse(keys[i], pos[i], keys[parent], pos[parent]):
            keys[i], keys[parent] = keys[parent], keys[i]
            pos[i], pos[parent] = pos[parent], pos[i]
            i = parent
        else:
            return


@jit
def offer(keys, pos, size, want, key, p):
    """Offer (key, p) to a bounded heap holding `size` entries; returns the new size."""
    if size < want:
        keys[size] = key
        pos[size] = p
        sift_up(keys, pos, size)
        return size + 1
    if worse(keys[0], pos[0], key, p):
        keys[0] = key
        pos[0] = p
        sift_down(keys, pos, size, 0)
    return size


@jit
def drain(keys, pos, size, out_pos):
    """Empty the heap into out_pos best first (pops come out worst first)."""
    for slot in range(size - 1, -1, -1):
        out_pos[slot] = pos[0]
        keys[0] = keys[size - 1]
        pos[0] = pos[size - 1]
        size -= 1
        sift_down(keys, pos, size, 0)


@jit
def select_touched(touched, n_touched, values, allowed, want, heap_keys, heap_pos, out_pos, out_scores):
    """Best `want` of the chunks touched[:n_touched] by values[c] (> 0 only)."""
    size = 0
    for i in range(n_touched):
        c = touched[i]
        v = values[c]
        if v > 0 and allowed[c]:
            size = offer(heap_keys, heap_pos, size, want, v, c)
    drain(heap_keys, heap_pos, size, out_pos)
    for j in range(size):
        out_scores[j] = values[out_pos[j]]
    return size


@jit
def select_all(values, allowed, want, heap_keys, heap_pos, out_pos, out_scores):
    """Best `want` of all chunks by values[c] (> 0 only). Scanning in position order, a
    later equal score never displaces a kept one, so most chunks cost one comparison."""
    size = 0
    for c in range(len(values)):
        v = values[c]
        if size == want:
            # Kept scores are > 0, so this one comparison also rejects zeros.
            if v > heap_keys[0] and allowed[c]:
                heap_keys[0] = v
                heap_pos[0] = c
                sift_down(heap_keys, heap_pos, size, 0)
        elif v > 0 and allowed[c]:
            size = offer(heap_keys, heap_pos, size, want, v, c)
    drain(heap_keys, heap_pos, size, out_pos)
    for j in range(size):
        out_scores[j] = values[out_pos[j]]
    return size


@jit
def bm25_topk(flat_ids, pointers, want, data, indptr, indices, num_docs, allowed):
    """BM25 scores summed term by term in float32 exactly as bm25s sums them (same
    order, same precision, so the same bits); then the best `want` with a score > 0."""
    n_queries = len(pointers) - 1
    out_pos = np.full((n_queries, want), -1, np.int64)
    out_scores = np.zeros((n_queries, want), data.dtype)
    counts = np.zeros(n_queries, np.int64)
    acc = np.zeros(num_docs, data.dtype)
    seen = np.zeros(num_docs, np.bool_)
    touched = np.empty(num_docs, np.int64)
    heap_keys = np.empty(want, data.dtype)
    heap_pos = np.empty(want, np.int64)
    for q in range(n_queries):
        postings = 0
        for t in range(pointers[q], pointers[q + 1]):
            postings += indptr[flat_ids[t] + 1] - indptr[flat_ids[t]]
        if postings * 4 > num_docs:
            # Common terms touch much of the corpus: a plain pass over every chunk is
            # cheaper than tracking which ones were touched.
            for t in range(pointers[q], pointers[q + 1]):
                term = flat_ids[t]
                for j in range(indptr[term], indptr[term + 1]):
                    acc[indices[j]] += data[j]
            counts[q] = select_all(acc, allowed, want, heap_keys, heap_pos, out_pos[q], out_scores[q])
            acc[:] = 0
            continue
        # Rare terms on a large corpus: touch, score and reset only their chunks.
        n_touched = 0
        for t in range(pointers[q], pointers[q + 1]):
            term = flat_ids[t]
            for j in range(indptr[term], indptr[term + 1]):
                d = indices[j]
                if not seen[d]:
                    seen[d] = True
                    touched[n_touched] = d
                    n_touched += 1
                acc[d] += data[j]
        counts[q] = select_touched(
            touched, n_touched, acc, allowed, want, heap_keys, heap_pos, out_pos[q], out_scores[q]
        )
        for i in range(n_touched):
            acc[touched[i]] = 0
            seen[touched[i]] = False
    return out_pos, out_scores, counts


@jit
def dense_topk(scores, starts, want):
    """Per row of `scores` (one column per window), chunk c scores the max over its
    windows starts[c]..starts[c+1]-1; returns the best `want` chunks, ties by
    position. Non-finite scores are never returned."""
    n_rows = scores.shape[0]
    n_chunks = len(starts) - 1
    want = min(want, n_chunks)
    out_pos = np.full((n_rows, want), -1, np.int64)
    out_scores = np.zeros((n_rows, want), scores.dtype)
    counts = np.zeros(n_rows, np.int64)
    heap_keys = np.empty(want, scores.dtype)
    heap_pos = np.empty(want, np.int64)
    for r in range(n_rows):
        row = scores[r]
        size = 0
        for c in range(n_chunks):
            best = row[starts[c]]
            for w in range(starts[c] + 1, starts[c + 1]):
                if row[w] > best:
                    best = row[w]
            if np.isfinite(best):
                size = offer(heap_keys, heap_pos, size, want, best, c)
        drain(heap_keys, heap_pos, size, out_pos[r])
        for j in range(size):
            p = out_pos[r, j]
            best = row[starts[p]]
            for w in range(starts[p] + 1, starts[p + 1]):
                if row[w] > best:
                    best = row[w]
            out_scores[r, j] = best
        counts[r] = size
    return out_pos, out_scores, counts


@jit
def pool_candidates(ids, dists, owner, n_chunks, want):
    """Approximate-search candidates (window ids, -1 = none) -> the best `want`
    chunks, each scored by its best window among the candidates, ties by position."""
    n_rows = ids.shape[0]
    out_pos = np.full((n_rows, want), -1, np.int64)
    out_scores = np.zeros((n_rows, want), dists.dtype)
    counts = np.zeros(n_rows, np.int64)
    best = np.full(n_chunks, -np.inf, dists.dtype)
    touched = np.empty(ids.shape[1], np.int64)
    heap_keys = np.empty(want, dists.dtype)
    heap_pos = np.empty(want, np.int64)
    for r in range(n_rows):
        n_touched = 0
        for j in range(ids.shape[1]):
            w = ids[r, j]
            if w < 0:
                continue
            c = owner[w]
            if best[c] == -np.inf:
                touched[n_touched] = c
                n_touched += 1
            if dists[r, j] > best[c]:
                best[c] = dists[r, j]
        size = 0
        for i in range(n_touched):
            c = touched[i]
            if np.isfinite(best[c]):
                size = offer(heap_keys, heap_pos, size, want, best[c], c)
        drain(heap_keys, heap_pos, size, out_pos[r])
        for j in range(size):
            out_scores[r, j] = best[out_pos[r, j]]
        counts[r] = size
        for i in range(n_touched):
            best[touched[i]] = -np.inf
    return out_pos, out_scores, counts


@jit
def rrf_fuse(positions, counts, weights, rrf_k, size, want, decimals):
    """Weighted reciprocal rank fusion. positions: (members, queries, width) ranked
    lists; a chunk's score is the sum over members of w / (rrf_k + rank), added in
    member order (float64). Ties are judged on scores rounded to `decimals`, since
    the same terms summed in another order can differ in the last bits."""
    n_members, n_queries, width = positions.shape
    out_pos = np.full((n_queries, want), -1, np.int64)
    out_scores = np.zeros((n_queries, want), np.float64)
    out_counts = np.zeros(n_queries, np.int64)
    acc = np.zeros(size, np.float64)
    key = np.zeros(size, np.float64)
    seen = np.zeros(size, np.bool_)
    touched = np.empty(n_members * width, np.int64)
    heap_keys = np.empty(want, np.float64)
    heap_pos = np.empty(want, np.int64)
    for q in range(n_queries):
        n_touched = 0
        for m in range(n_members):
            for r in range(counts[m, q]):
                p = positions[m, q, r]
                if not seen[p]:
                    seen[p] = True
                    touched[n_touched] = p
                    n_touched += 1
                acc[p] += weights[m] / (rrf_k + r + 1)
        n = 0
        for i in range(n_touched):
            p = touched[i]
            key[p] = np.round(acc[p], decimals)
            if acc[p] > 0:
                n = offer(heap_keys, heap_pos, n, want, key[p], p)
        drain(heap_keys, heap_pos, n, out_pos[q])
        for j in range(n):
            out_scores[q, j] = acc[out_pos[q, j]]
        out_counts[q] = n
        for i in range(n_touched):
            acc[touched[i]] = 0.0
            seen[touched[i]] = False
    return out_pos, out_scores, out_counts
