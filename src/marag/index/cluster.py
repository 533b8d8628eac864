"""Clustering of embedding vectors: topical collections (k-means) and knowledge
boundaries (complete-linkage hierarchical clustering), both deterministic.

`kmeans` groups documents into N topics (`marag index --split kmeans:N`): spherical
k-means (cosine), k-means++ seeding from a fixed seed, Lloyd iterations until no
assignment changes.

`boundary` partitions one collection's chunk vectors into n = floor(sqrt(m)) clusters
by complete linkage (the distance of two clusters is the largest cosine distance
between their members) and returns the unit-length cluster centroids. Complete linkage
needs all m x m distances, so it runs exactly only up to `max_exact` vectors (2,000:
a 16 MB distance matrix). A larger collection is clustered through a sample: the
linkage runs on `max_exact` vectors drawn with a fixed seed, every vector is then
assigned to the nearest of the sample clusters' centroids (in blocks, so memory stays
O(block x n)), and the centroids are recomputed from all members. A 100,000-chunk
collection thus needs a 2,000 x 2,000 matrix and 100,000 x 316 scores in blocks, never
100,000 x 100,000.
"""

from __future__ import annotations

import math

import numpy as np


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-12)


def nearest(vectors: np.ndarray, centroids: np.ndarray, block: int = 4096) -> np.ndarray:
    """Index of the most similar centroid for each vector (ties: the lower index)."""
    out = np.empty(len(vectors), dtype=np.int64)
    for start in range(0, len(vectors), block):
        out[start : start + block] = np.argmax(vectors[start : start + block] @ centroids.T, axis=1)
    return out


def centroids_of(vectors: np.ndarray, labels: np.ndarray, n: int) -> np.ndarray:
    """Unit-length mean of each cluster's members (an empty cluster gets a zero row)."""
    sums = np.zeros((n, vectors.shape[1]), dtype=np.float32)
    np.add.at(sums, labels, vectors)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    return np.where(norms > 0, sums / norms.clip(1e-12), 0.0).astype(np.float32)


def kmeans(vectors: np.ndarray, n: int, seed: int = 0, max_iter: int = 100, n_init: int = 8) -> np.ndarray:
    """Spherical k-means labels (0..n-1) for each row of `vectors`: the best of `n_init`
    seeded runs (highest total similarity of members to their centroids)."""
    x = _unit(vectors)
    m = len(x)
    if not 1 <= n <= m:
        raise ValueError(f"cannot make {n} clusters of {m} vectors: choose 1 <= N <= {m}")
    best_labels, best_fit = None, -np.inf
    for run in range(n_init):
        labels = _kmeans_once(x, n, np.random.default_rng([seed, run]), max_iter)
        fit = float(np.sum(x * centroids_of(x, labels, n)[labels]))
        if fit > best_fit + 1e-6:
            best_labels, best_fit = labels, fit
    return best_labels


def _kmeans_once(x: np.ndarray, n: int, rng: np.random.Generator, max_iter: int) -> np.ndarray:
    m = len(x)
    chosen = [int(rng.integers(m))]
    best = 1.0 - x @ x[chosen[0]]  # cosine distance to the nearest chosen centre
    for _ in range(1, n):
        weights = np.clip(best, 0, None) ** 2
        total = float(weights.sum())
        pick = int(rng.choice(m, p=weights / total)) if total > 0 else int(np.argmax(best))
        chosen.append(pick)
        best = np.minimum(best, 1.0 - x @ x[pick])
    centres = x[chosen].copy()
    labels = nearest(x, centres)
    for _ in range(max_iter):
        centres = centroids_of(x, labels, n)
        empty = ~centres.any(axis=1)
        if empty.any():  # an emptied cluster restarts at the vectors farthest from their centres
            far = np.argsort(np.sum(x * centres[labels], axis=1), kind="stable")[: int(empty.sum())]
            centres[empty] = x[far]
        new = nearest(x, centres)
        if np.array_equal(new, labels):
            break
        labels = new
    return labels


def complete_linkage(vectors: np.ndarray, n: int) -> np.ndarray:
    """Labels (0..n-1) cutting a complete-linkage tree on cosine distance into n clusters."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import pdist

    x = _unit(vectors)
    if len(x) == 1:
        return np.zeros(1, dtype=np.int64)
    tree = linkage(pdist(x, metric="cosine").clip(0, None), method="complete")
    labels = fcluster(tree, t=n, criterion="maxclust") - 1
    # fcluster numbers clusters arbitrarily: renumber by first member, for stable output
    order = {lab: i for i, lab in enumerate(dict.fromkeys(labels.tolist()))}
    return np.array([order[lab] for lab in labels.tolist()], dtype=np.int64)


def boundary(vectors: np.ndarray, max_exact: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(centroids, labels): a collection's knowledge boundary, floor(sqrt(m)) clusters
    by complete linkage (through a sample above `max_exact` vectors; module docstring)."""
    x = _unit(vectors)
    m = len(x)
    if m == 0:
        return np.zeros((0, vectors.shape[1] if vectors.ndim == 2 else 0), dtype=np.float32), np.zeros(0, dtype=np.int64)
    n = max(1, math.isqrt(m))
    if m <= max_exact:
        labels = complete_linkage(x, n)
    else:
        sample = np.sort(np.random.default_rng(seed).choice(m, size=max_exact, replace=False))
        sample_labels = complete_linkage(x[sample], n)
        labels = nearest(x, centroids_of(x[sample], sample_labels, int(sample_labels.max()) + 1))
    k = int(labels.max()) + 1
    return centroids_of(x, labels, k), labels
