"""How well banks recover known structure: cluster purity and agreement scores, 2-D projections.

# N students, C clusters, A true groups (e.g. the simulator's archetypes), D encoding dim
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.decomposition import PCA
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score


def cluster_purity(labels, truth) -> float:
    """Share of students whose cluster's majority true group is their own (1 = pure clusters)."""
    table = pd.crosstab(np.asarray(labels), np.asarray(truth))
    return float(table.max(axis=1).sum() / table.values.sum())


def cluster_agreement(labels, truth) -> dict[str, float]:
    """Purity, adjusted Rand index and normalised mutual information of a clustering vs truth.

    Purity rises with the number of clusters (one student per cluster is pure); the adjusted
    Rand index is 0 for chance and 1 for the true partition, whatever the cluster count.
    """
    labels, truth = np.asarray(labels), np.asarray(truth)
    return {
        "clusters": int(len(np.unique(labels))),
        "groups": int(len(np.unique(truth))),
        "purity": cluster_purity(labels, truth),
        "adjusted_rand": float(adjusted_rand_score(truth, labels)),
        "nmi": float(normalized_mutual_info_score(truth, labels)),
    }


def fit_projection(x, seed: int = 0) -> PCA:
    """A 2-D PCA fitted on encodings [N, D]; `.transform` places centroids or entries alike."""
    return PCA(n_components=2, random_state=seed).fit(np.asarray(x, dtype=np.float64))
