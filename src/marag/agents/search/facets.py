"""Grouping short texts (GINGER's nuggets) into facets, from their unit embeddings.

Each clusterer is a function `(unit_vectors, texts, threshold, seed) -> labels` in the
`FACET_CLUSTERERS` registry (plug-ins: entry-point group `marag.facet_clusterers`), chosen
by name in GINGER's config (`clusterer=`):

- `agglomerative` (default): average linkage on cosine distance, cut at `threshold`.
  Deterministic, SciPy only.
- `bertopic`: BERTopic (the paper's choice) on the precomputed embeddings, so no model
  is downloaded: UMAP to a few dimensions, HDBSCAN with clusters of at least two
  nuggets. A plain `pip install bertopic` pulls sentence-transformers, torch and CUDA
  wheels; it is not needed here, hence the install command in the error. HDBSCAN calls
  some nuggets outliers (label -1); each outlier becomes a facet of its own, so no
  nugget is dropped. Too few nuggets for UMAP's neighbourhood graph (fewer than 5) fall
  back to `agglomerative`.

Labels are renumbered in order of first appearance, so equal inputs give equal labels
whatever numbering the algorithm used.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from marag.errors import MaragError
from marag.registry import Registry

FacetClusterer = Callable[[np.ndarray, list[str], float, int], np.ndarray]
FACET_CLUSTERERS: Registry[FacetClusterer] = Registry("facet_clusterers")

BERTOPIC_INSTALL = "pip install --no-deps bertopic && pip install hdbscan umap-learn pandas plotly pyyaml"


def _renumber(labels: np.ndarray) -> np.ndarray:
    seen: dict[int, int] = {}
    return np.array([seen.setdefault(int(x), len(seen)) for x in labels], dtype=np.int64)


@FACET_CLUSTERERS.register("agglomerative")
def agglomerative(unit_vectors: np.ndarray, texts: list[str], threshold: float, seed: int = 0) -> np.ndarray:
    """Average-linkage agglomerative clusters on cosine distance, cut at `threshold`."""
    if len(unit_vectors) <= 1:
        return np.zeros(len(unit_vectors), dtype=np.int64)
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import pdist

    tree = linkage(pdist(unit_vectors, metric="cosine").clip(0, None), method="average")
    return _renumber(fcluster(tree, t=threshold, criterion="distance"))


@FACET_CLUSTERERS.register("bertopic")
def bertopic(unit_vectors: np.ndarray, texts: list[str], threshold: float, seed: int = 0) -> np.ndarray:
    """BERTopic over precomputed embeddings (UMAP + HDBSCAN); outliers are singletons."""
    try:
        from bertopic import BERTopic
        from hdbscan import HDBSCAN
        from umap import UMAP
    except ImportError as e:
        raise MaragError(f"clusterer=bertopic needs BERTopic ({e.name} is missing)", hint=BERTOPIC_INSTALL) from None
    n = len(unit_vectors)
    if n < 5:
        return agglomerative(unit_vectors, texts, threshold, seed)
    umap = UMAP(n_neighbors=min(15, n - 1), n_components=min(5, n - 2), metric="cosine", init="random", random_state=seed)
    hdb = HDBSCAN(min_cluster_size=2, min_samples=1, metric="euclidean", prediction_data=False)
    model = BERTopic(umap_model=umap, hdbscan_model=hdb, calculate_probabilities=False, verbose=False)
    labels, _ = model.fit_transform(texts, embeddings=np.asarray(unit_vectors, dtype=np.float32))
    return singletons_for_outliers(np.asarray(labels, dtype=np.int64))


def singletons_for_outliers(labels: np.ndarray) -> np.ndarray:
    """HDBSCAN's outliers (-1) each get a facet of their own, so no nugget is lost."""
    labels = labels.copy()
    outliers = np.flatnonzero(labels < 0)
    labels[outliers] = labels.max(initial=-1) + 1 + np.arange(len(outliers))
    return _renumber(labels)


bertopic.requires = ("bertopic", "hdbscan", "umap")  # checked before a run starts


def check_clusterer(name: str) -> None:
    """Fail before any question is answered: unknown name, or its packages missing."""
    from importlib.util import find_spec

    missing = [m for m in getattr(FACET_CLUSTERERS.get(name), "requires", ()) if find_spec(m) is None]
    if missing:
        raise MaragError(f"clusterer={name} needs {', '.join(missing)}, which is not installed", hint=BERTOPIC_INSTALL)


def cluster_facets(name: str, unit_vectors: np.ndarray, texts: list[str], threshold: float, seed: int = 0) -> np.ndarray:
    return FACET_CLUSTERERS.get(name)(unit_vectors, texts, threshold, seed)
