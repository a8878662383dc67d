"""Shared by the SimAKT tests: tiny sizes, simulated students, configs and batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from kt_lib.data.dataset import KTDataset, StudentSeq, Window, collate
from kt_lib.memory import EncodedSet, encode_dataset
from kt_lib.models import build_model

NUM_C, NUM_PID, L = 8, 24, 16
DATA = Path(__file__).parent / "data"
SEED_EXAMPLES = sorted((DATA / "seed000").glob("*.json"))
SIZES = dict(d=32, n_heads=8, n_know=4, d_fc=32, max_len=L)
PRESETS = [
    "none",
    "position_weighted_dual",
    "strict_causal",
    "full_collaborative",
    "cluster_dominant",
    "knn_dominant",
    "adaptive_influence",
    "cluster_only",
    "knn_only",
    "no_inter_student",
    "minimal_modular",
    "dual_modular",
    "multi_similarity",
]


def dual(future_weight: float = 0.3, strategy: str = "position_weighted", **memory) -> dict:
    """Small Step 2 dual config (cluster + KNN) for tests."""
    temporal = {"strategy": strategy, "future_weight": future_weight}
    if strategy == "content":  # content scores read no temporal setting (one would be refused)
        temporal = {"strategy": strategy}
    return {
        "intra_heads": 6,
        "memory": {"kmeans_n_init": 1, **memory},
        "inter_heads": [
            {"type": "cluster", "n_clusters": 4, "temporal_config": temporal},
            {"type": "knn", "memory_size": 8, "k_neighbors": 3, "temporal_config": temporal},
        ],
    }


def students(n: int = 60, seed: int = 0, num_pid: int = NUM_PID) -> KTDataset:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        m = int(rng.integers(L // 2, L + 1))
        pid = rng.integers(0, num_pid, m) if num_pid else None
        out.append(StudentSeq(i, rng.integers(0, NUM_C, m), rng.integers(0, 2, m), pid))
    return KTDataset(out, num_c=NUM_C, num_pid=num_pid, name="t")


def batch_of(train: KTDataset, index, pad_to: int | None = L) -> object:
    """Complete logs of training students as one batch (window = whole log)."""
    return collate(train, [Window(int(i), 0, len(train.students[int(i)])) for i in index], pad_to)


def simakt(similarity, train: KTDataset | None = None, seed: int = 0, **kw):
    torch.manual_seed(seed)
    model = build_model(
        "simakt",
        similarity=similarity,
        num_c=NUM_C,
        num_pid=train.num_pid if train else NUM_PID,
        **{**SIZES, **kw},
    )
    if train is not None:
        model.prepare(train)
    return model.eval()


def one_fold_batch(model, train: KTDataset, n: int = 6, fold: int = 0):
    """Training students of one fold: their banks are built from the other folds only.

    (A batch mixing folds would let student A's bank change when student B's future changes:
    B's complete log is legitimate collaborative information for A. The audit's contract is per
    student, and students of one fold are independent of each other's banks.)
    """
    own = model.folds.fold_of(torch.as_tensor(train.uids))
    return batch_of(train, (own == fold).nonzero().squeeze(1)[:n].tolist())


def encoded(n: int = 30, d: int = 6) -> EncodedSet:
    """Students encoded by a fixed random table of questions and responses."""
    data = students(n)
    torch.manual_seed(0)
    table_q, table_r = torch.randn(NUM_C, d), torch.randn(2, d)
    fn = lambda b: table_q[b.q] + table_r[b.r]  # noqa: E731
    return encode_dataset(fn, data, max_len=5, batch_size=7)


CLUSTER = {"type": "cluster", "n_clusters": 4}
KNN = {"type": "knn", "memory_size": 8, "k_neighbors": 3}

OTHER_HEADS = {  # graph, cross-student prototypes and the custom DeepSet head (with a bank)
    "intra_heads": 5,
    "memory": {"kmeans_n_init": 1, "folds": 3},
    "inter_heads": [
        {"type": "graph", "graph_type": "transition"},
        {"type": "attention", "n_prototypes": 3},
        {
            "type": "custom",
            "module_path": "kt_lib.heads.inter.DeepSetSimilarity",
            "params": {"set_size": 5, "invariant_layers": 2},
        },
    ],
}
