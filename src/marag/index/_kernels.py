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
def swap(keys, pos, a, b):
    keys[a], keys[b] = keys[b], keys[a]
    pos[a], pos[b] = pos[b], pos[a]


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
        if not worse(keys[child], pos[child], keys[i], pos[i]):
            return
        swap(keys, pos, i, child)
        i = child


@jit
def sift_up(keys, pos, i):
    while i > 0:
        parent = (i - 1) // 2
        if not worse(keys[i], pos[i], keys[parent], pos[parent]):
            return
        swap(keys, pos, i, parent)
        i = parent


@jit
def replace_root(keys, pos, size, key, p):
    """Put (key, p) in place of the worst entry of a full heap."""
    keys[0] = key
    pos[0] = p
    sift_down(keys, pos, size, 0)


@jit
def offer(keys, pos, size, want, key, p):
    """Offer (key, p) to a bounded heap holding `size` entries; returns the new size."""
    if size < want:
        keys[size] = key
        pos[size] = p
        sift_up(keys, pos, size)
        return size + 1
    if worse(keys[0], pos[0], key, p):
        replace_root(keys, pos, size, key, p)
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


# -- BM25 ---------------------------------------------------------------------------------
#
# Dynamic pruning (MaxScore): a query's terms are read in decreasing order of their best
# score in any chunk. Once the `want`-th best partial sum exceeds what all remaining terms
# could add together, chunks not seen yet cannot reach the top: the remaining terms, the
# common low-idf ones with the longest posting lists, then only add to the few candidates
# left (binary searches, or one pass with the candidates flagged).
#
# Partial sums in that order may differ from bm25s's sums (query order, float32) in the
# last bits, so the final candidates near the cut are re-scored term by term in query
# order, which reproduces bm25s's scores bit for bit; the order and the ties by position
# are decided on those. A chunk is only pruned when its bound is below the threshold by a
# relative margin (`slack`) of four times the rounding error float32 sums of the query's
# terms can have in any order, so nothing that could tie the last kept chunk is lost.


@jit
def term_maxima(data, indptr):
    """Each term's largest score over its postings (0 for a term without any)."""
    out = np.zeros(len(indptr) - 1, np.float64)
    for t in range(len(out)):
        for j in range(indptr[t], indptr[t + 1]):
            if data[j] > out[t]:
                out[t] = data[j]
    return out


@jit
def add_term(term, data, indptr, indices, allowed, acc, touched, n_touched):
    """Add a term's scores to every chunk it occurs in (that may be returned); chunks
    seen for the first time are appended to `touched`. Scores are > 0, so a zero sum
    means "first time"; appending unconditionally and advancing the count by that test
    avoids a branch the CPU would mispredict half the time. Returns (count, best sum)."""
    best = 0.0
    for j in range(indptr[term], indptr[term + 1]):
        d = indices[j]
        if allowed[d]:
            v = acc[d]
            touched[n_touched] = d
            n_touched += v == 0
            v += data[j]
            acc[d] = v
            best = max(best, v)
    return n_touched, best


@jit
def kth_of(acc, items, n_items, want, heap_keys, heap_pos):
    """The `want`-th largest of acc[items[:n_items]] (0 when there are fewer)."""
    if n_items < want:
        return 0.0
    size = 0
    for i in range(n_items):
        v = acc[items[i]]
        if size < want:
            size = offer(heap_keys, heap_pos, size, want, v, items[i])
        elif v > heap_keys[0]:
            replace_root(heap_keys, heap_pos, size, v, items[i])
    return heap_keys[0]


@jit
def keep_at_least(items, n_items, acc, floor, kept):
    """Copy, in order, the items whose partial sum is >= floor into `kept` (which may be
    `items` itself); returns how many."""
    n = 0
    for i in range(n_items):
        if acc[items[i]] >= floor:
            kept[n] = items[i]
            n += 1
    return n


@jit
def add_term_to(term, cand, n_cand, data, indptr, indices, acc, is_cand):
    """Add a term's scores to the candidates only. Few candidates: sort them (they stay
    sorted) and binary-search each in the posting list; many: flag them and pass along
    the list once. Returns the postings read."""
    lo, hi = indptr[term], indptr[term + 1]
    if n_cand * np.log2(hi - lo + 2) < hi - lo:
        cand[:n_cand] = np.sort(cand[:n_cand])
        postings = indices[lo:hi]
        found = np.searchsorted(postings, cand[:n_cand])
        for i in range(n_cand):
            j = found[i]
            if j < hi - lo and postings[j] == cand[i]:
                acc[cand[i]] += data[lo + j]
        return n_cand
    for i in range(n_cand):
        is_cand[cand[i]] = True
    for j in range(lo, hi):
        if is_cand[indices[j]]:
            acc[indices[j]] += data[j]
    for i in range(n_cand):
        is_cand[cand[i]] = False
    return hi - lo


@jit
def bm25s_scores(terms, docs, n_docs, data, indptr, indices, exact, is_cand):
    """exact[d] for each of docs[:n_docs]: its score as bm25s computes it, float32 with
    the terms added in query order. Per term, binary searches when the docs are few,
    else one pass along the posting list with the docs flagged."""
    for i in range(n_docs):
        is_cand[docs[i]] = True
    for t in terms:
        lo, hi = indptr[t], indptr[t + 1]
        if n_docs * np.log2(hi - lo + 2) < hi - lo:
            for i in range(n_docs):
                j = lo + np.searchsorted(indices[lo:hi], docs[i])
                if j < hi and indices[j] == docs[i]:
                    exact[docs[i]] += data[j]
        else:
            for j in range(lo, hi):
                if is_cand[indices[j]]:
                    exact[indices[j]] += data[j]
    for i in range(n_docs):
        is_cand[docs[i]] = False


@jit
def best_by(items, n_items, values, want, out_pos, out_scores):
    """The best `want` of items[:n_items] by values[item], ties by position, into
    out_pos/out_scores; then zeroes those items' values. Returns how many."""
    keys, pos = np.empty(want, values.dtype), np.empty(want, np.int64)
    size = 0
    for i in range(n_items):
        v, p = values[items[i]], items[i]
        # Most items lose to the worst one kept: rejecting them here, without calling
        # offer (numba does not inline it), halves the cost of a small BM25 search.
        if size == want and (v < keys[0] or (v == keys[0] and p > pos[0])):
            continue
        size = offer(keys, pos, size, want, v, p)
    drain(keys, pos, size, out_pos)
    for j in range(size):
        out_scores[j] = values[out_pos[j]]
    for i in range(n_items):
        values[items[i]] = 0
    return size


@jit
def finish(terms, cand, n_cand, acc, want, slack, data, indptr, indices, near, exact, is_cand, out_pos, out_scores):
    """The best `want` candidates: those near or above the cut (copied into `near`) are
    re-scored as bm25s scores them, then ranked by that score and position."""
    keys, pos = np.empty(want, acc.dtype), np.empty(want, np.int64)
    cut = kth_of(acc, cand, n_cand, want, keys, pos) * (1 - slack)
    n_near = keep_at_least(cand, n_cand, acc, cut, near)
    bm25s_scores(terms, near, n_near, data, indptr, indices, exact, is_cand)
    return best_by(near, n_near, exact, want, out_pos, out_scores)


@jit
def bm25_plain(terms, want, data, indptr, indices, allowed, acc, touched, out_pos, out_scores):
    """One query without pruning: terms added in query order, so the sums are bm25s's
    own; the best `want` of the touched chunks. Returns how many. `acc` is left zero."""
    n_touched = 0
    for t in terms:
        n_touched = add_term(t, data, indptr, indices, allowed, acc, touched, n_touched)[0]
    return best_by(touched, n_touched, acc, want, out_pos, out_scores)


@jit
def bm25_query(
    terms, want, data, indptr, indices, allowed, term_max, acc, touched, cand, exact, is_cand, out_pos, out_scores
):
    """One query's best `want` chunks into out_pos/out_scores; returns (how many,
    postings read). `acc`, `exact` and `is_cand` come in all zero and are left so."""
    m = len(terms)
    order = np.argsort(-term_max[terms], kind="mergesort")
    remaining = np.zeros(m + 1)  # remaining[i]: the most that terms order[i:] can add
    for i in range(m - 1, -1, -1):
        remaining[i] = remaining[i + 1] + term_max[terms[order[i]]]
    slack = 4 * (m + 1) * 2.0**-24
    keys, pos = np.empty(want, acc.dtype), np.empty(want, np.int64)
    n_touched, best, theta, read, n_full = 0, 0.0, 0.0, 0, 0
    while n_full < m:
        # The want-th best partial sum can only beat the rest once the best one does.
        if best > remaining[n_full] * (1 + slack):
            theta = kth_of(acc, touched, n_touched, want, keys, pos)
            if theta > remaining[n_full] * (1 + slack):
                break  # chunks not seen yet cannot reach the top any more
        term = terms[order[n_full]]
        n_touched, term_best = add_term(term, data, indptr, indices, allowed, acc, touched, n_touched)
        best = max(best, term_best)
        read += indptr[term + 1] - indptr[term]
        n_full += 1
    if n_full == m:
        size = finish(
            terms, touched, n_touched, acc, want, slack, data, indptr, indices, cand, exact, is_cand, out_pos, out_scores
        )
    else:
        # `touched` stays as it is: it says what to reset.
        n = keep_at_least(touched, n_touched, acc, theta * (1 - slack) - remaining[n_full], cand)
        for i in range(n_full, m):
            read += add_term_to(terms[order[i]], cand, n, data, indptr, indices, acc, is_cand)
            theta = max(theta, kth_of(acc, cand, n, want, keys, pos))
            n = keep_at_least(cand, n, acc, theta * (1 - slack) - remaining[i + 1], cand)
        size = finish(
            terms, cand, n, acc, want, slack, data, indptr, indices, cand, exact, is_cand, out_pos, out_scores
        )
    for i in range(n_touched):
        acc[touched[i]] = 0
    return size, read


@jit
def bm25_topk(flat_ids, pointers, want, data, indptr, indices, num_docs, allowed, term_max, prune_from):
    """Each query's best `want` chunks with a score > 0, and per query (postings read,
    postings its terms have). Queries whose terms have fewer than `prune_from` postings
    in all are cheap already: they skip the bookkeeping that pruning needs."""
    n_queries = len(pointers) - 1
    out_pos = np.full((n_queries, want), -1, np.int64)
    out_scores = np.zeros((n_queries, want), np.float32)
    counts = np.zeros(n_queries, np.int64)
    work = np.zeros((n_queries, 2), np.int64)
    acc = np.zeros(num_docs, data.dtype)
    touched = np.empty(num_docs + 1, np.int64)  # + 1: add_term writes one past the count
    cand = np.empty(num_docs, np.int64)
    is_cand = np.zeros(num_docs, np.bool_)
    exact = np.zeros(num_docs, data.dtype)
    for q in range(n_queries):
        terms = flat_ids[pointers[q] : pointers[q + 1]]
        for t in terms:
            work[q, 1] += indptr[t + 1] - indptr[t]
        if 0 < work[q, 1] < prune_from:
            counts[q] = bm25_plain(terms, want, data, indptr, indices, allowed, acc, touched, out_pos[q], out_scores[q])
            work[q, 0] = work[q, 1]
        elif len(terms) > 0:
            counts[q], work[q, 0] = bm25_query(
                terms, want, data, indptr, indices, allowed, term_max, acc, touched, cand, exact, is_cand, out_pos[q], out_scores[q]
            )
    return out_pos, out_scores, counts, work


# -- dense ----------------------------------------------------------------------------------
#
# Vectors belong to distinct chunk texts, a text to one or more windows: text u's vectors
# are rows windows[u] .. windows[u+1]-1, and chunk c's text is texts[c]. A text scores
# the best of its windows; chunks with the same text share that very score, so copies of
# a passage tie exactly and are ordered by position.


@jit
def text_scores(row, windows, out):
    """Each text's best window score in one row of window scores."""
    for u in range(len(windows) - 1):
        best = row[windows[u]]
        for w in range(windows[u] + 1, windows[u + 1]):
            if row[w] > best:
                best = row[w]
        out[u] = best
    return out


@jit
def above_cut(src, texts, want, cut, out_pos, out_scores):
    """The best `want` chunks by src[texts[c]] when every one of them scores >= `cut`
    (finite): the chunks at or above it, visited in position order, then a stable sort
    by score, so equal scores keep position order. Returns how many."""
    n = 0
    for c in range(len(texts)):
        v = src[texts[c]]
        if v >= cut and np.isfinite(v):
            n += 1
    pos = np.empty(n, np.int64)
    vals = np.empty(n, src.dtype)
    n = 0
    for c in range(len(texts)):
        v = src[texts[c]]
        if v >= cut and np.isfinite(v):
            pos[n] = c
            vals[n] = -v
            n += 1
    order = np.argsort(vals, kind="mergesort")
    size = min(want, n)
    for j in range(size):
        out_pos[j] = pos[order[j]]
        out_scores[j] = -vals[order[j]]
    return size


@jit
def dense_topk(scores, windows, texts, want, cuts):
    """For each row of `scores` (one column per vector), the best `want` chunks by their
    text's score, ties by position. Non-finite scores are never returned. `cuts[r]`, when
    finite, is a score every one of row r's best chunks reaches (the caller's partition:
    a deep page of a small corpus is cheaper sorted above it than kept in a heap)."""
    n_rows, n_chunks = scores.shape[0], len(texts)
    want = min(want, n_chunks)
    one_each = scores.shape[1] == len(windows) - 1  # then column u is text u's score
    by_text = np.empty(len(windows) - 1, scores.dtype)
    out_pos = np.full((n_rows, want), -1, np.int64)
    out_scores = np.zeros((n_rows, want), scores.dtype)
    counts = np.zeros(n_rows, np.int64)
    heap_keys = np.empty(want, scores.dtype)
    heap_pos = np.empty(want, np.int64)
    for r in range(n_rows):
        src = scores[r] if one_each else text_scores(scores[r], windows, by_text)
        if np.isfinite(cuts[r]):
            counts[r] = above_cut(src, texts, want, cuts[r], out_pos[r], out_scores[r])
            continue
        size = 0
        for c in range(n_chunks):
            v = src[texts[c]]
            if size == want:
                # Chunks come in position order, so an equal score never displaces a
                # kept one: one comparison rejects almost every chunk.
                if v > heap_keys[0] and v < np.inf:
                    replace_root(heap_keys, heap_pos, size, v, c)
            elif np.isfinite(v):
                size = offer(heap_keys, heap_pos, size, want, v, c)
        drain(heap_keys, heap_pos, size, out_pos[r])
        for j in range(size):
            out_scores[r, j] = src[texts[out_pos[r, j]]]
        counts[r] = size
    return out_pos, out_scores, counts


@jit
def pool_candidates(ids, dists, row_text, texts, text_chunks_ptr, text_chunks, want, best):
    """Approximate-search candidates (vector rows, -1 = none) -> the best `want` chunks:
    a text scores its best row among the candidates, every chunk with that text gets its
    score, ties by position. `best` (one entry per text, all -inf) is scratch space,
    left all -inf again: filling one per call cost more than the search on 200k texts."""
    n_rows = ids.shape[0]
    out_pos = np.full((n_rows, want), -1, np.int64)
    out_scores = np.zeros((n_rows, want), dists.dtype)
    counts = np.zeros(n_rows, np.int64)
    touched = np.empty(ids.shape[1], np.int64)
    heap_keys = np.empty(want, dists.dtype)
    heap_pos = np.empty(want, np.int64)
    for r in range(n_rows):
        n_touched = 0
        for j in range(ids.shape[1]):
            if ids[r, j] < 0:
                continue
            u = row_text[ids[r, j]]
            if best[u] == -np.inf:
                touched[n_touched] = u
                n_touched += 1
            if dists[r, j] > best[u]:
                best[u] = dists[r, j]
        size = 0
        for i in range(n_touched):
            u = touched[i]
            v = best[u]
            if np.isfinite(v):
                for c in text_chunks[text_chunks_ptr[u] : text_chunks_ptr[u + 1]]:
                    if size == want and (v < heap_keys[0] or (v == heap_keys[0] and c > heap_pos[0])):
                        break  # (see best_by) a text's chunks come in position order
                    size = offer(heap_keys, heap_pos, size, want, v, c)
        drain(heap_keys, heap_pos, size, out_pos[r])
        for j in range(size):
            out_scores[r, j] = best[texts[out_pos[r, j]]]
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
            if acc[p] > 0:
                v = np.round(acc[p], decimals)
                if n == want and (v < heap_keys[0] or (v == heap_keys[0] and p > heap_pos[0])):
                    continue  # (see best_by)
                n = offer(heap_keys, heap_pos, n, want, v, p)
        drain(heap_keys, heap_pos, n, out_pos[q])
        for j in range(n):
            out_scores[q, j] = acc[out_pos[q, j]]
        out_counts[q] = n
        for i in range(n_touched):
            acc[touched[i]] = 0.0
            seen[touched[i]] = False
    return out_pos, out_scores, out_counts
