"""Memory banks of historical (training) students for SimAKT's inter-student heads.

- `banks`: cluster / KNN / graph banks, bank samplers (farthest-first, random), cross-fitting
  folds, save/load.
- `encoders`: trajectory encoders (seed heuristic, the model's Block 2) and `encode_dataset`.
- `temporal`: the seed's four temporal-mismatch strategies (prefix-aligned, position-weighted,
  multi-scale, trajectory completion), vectorised and registered.
- `analysis`: cluster purity / agreement with known groups, 2-D projections.
- `kt memory build ...` (`__main__`): prebuild a configuration's banks per dataset.
"""

from .analysis import cluster_agreement, cluster_purity, fit_projection
from .banks import (
    BANKS,
    KMEANS_N_INIT,
    SAMPLERS,
    Bank,
    ClusterBank,
    FoldAssignment,
    GraphBank,
    KNNBank,
    bank_table,
    farthest_first,
    random_sample,
)
from .encoders import ENCODERS, EncodedSet, TrajectoryEncoder, build_encoder, encode_dataset
from .temporal import (
    TEMPORAL_STRATEGIES,
    build_strategy,
    position_weighted_similarity,
    position_weights,
    prefix_aligned_similarity,
    self_consistency,
)

__all__ = [
    "BANKS",
    "ENCODERS",
    "KMEANS_N_INIT",
    "SAMPLERS",
    "TEMPORAL_STRATEGIES",
    "Bank",
    "ClusterBank",
    "EncodedSet",
    "FoldAssignment",
    "GraphBank",
    "KNNBank",
    "TrajectoryEncoder",
    "bank_table",
    "cluster_agreement",
    "cluster_purity",
    "fit_projection",
    "build_encoder",
    "build_strategy",
    "encode_dataset",
    "farthest_first",
    "position_weighted_similarity",
    "position_weights",
    "prefix_aligned_similarity",
    "random_sample",
    "self_consistency",
]
