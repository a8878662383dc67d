"""Memory banks of historical (training) students for SimAKT's inter-student heads.

- `banks`: cluster / KNN / graph banks, farthest-first selection, cross-fitting folds, save/load.
- `encoders`: trajectory encoders (seed heuristic, the model's Block 2) and `encode_dataset`.
- `similarity`: the seed's position-weighted similarity, vectorised.
- `analysis`: cluster purity / agreement with known groups, 2-D projections.
"""

from .analysis import cluster_agreement, cluster_purity, fit_projection
from .banks import (
    BANKS,
    Bank,
    ClusterBank,
    FoldAssignment,
    GraphBank,
    KNNBank,
    bank_table,
    farthest_first,
)
from .encoders import ENCODERS, EncodedSet, TrajectoryEncoder, build_encoder, encode_dataset
from .similarity import position_weighted_similarity, position_weights, self_consistency

__all__ = [
    "BANKS",
    "ENCODERS",
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
    "encode_dataset",
    "farthest_first",
    "position_weighted_similarity",
    "position_weights",
    "self_consistency",
]
