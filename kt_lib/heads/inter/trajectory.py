"""Cluster and KNN heads (seed 000's dual similarity): attention over banks of trajectories.

# B batch, L steps, D model dim, Dh head dim, F bank folds, M memory slots, C clusters
Both heads score their slots by content (the query against projected slot keys, with a
`METRICS` metric) or, under a temporal strategy (`kt_lib.memory.temporal`), by comparing the
current student's states with the slots' complete trajectories, every (row, step, slot) at once.
Causality: a head's output at step t is read by Block 4 only at steps > t.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ...config import require
from ...memory.banks import DEFAULT_SAMPLER, SAMPLERS, ClusterBank, KNNBank
from ...nn.reference import masked_softmax
from ...seed_warnings import warn_outside
from ..simakt_config.schema import HeadConfig
from .base import (
    CONTENT,
    METRICS,
    SIMILARITY_HEADS,
    BankBuild,
    BaseSimilarityHead,
    HeadContext,
)

# seed 000's ranges: memory_size 50-500 (stated); n_clusters 50-200 (its example configs).
# Values outside are allowed (small datasets, tests) and warn once (SeedRangeWarning).
SEED_MEMORY_SIZE = (50, 500)
SEED_N_CLUSTERS = (50, 200)


@dataclass
class ClusterParams:
    """Cluster head settings (seed 000: cluster_config)."""

    n_clusters: int = 100  # K-means clusters per bank
    temperature: float = 0.05  # fixed softmax temperature
    similarity_metric: str = "cosine"  # content scores: a METRICS name

    def validate(self) -> None:
        require(self.n_clusters >= 1, f"n_clusters must be >= 1, got {self.n_clusters}")
        warn_outside(
            "n_clusters",
            self.n_clusters,
            *SEED_N_CLUSTERS,
            "the range of seed 000's example configs",
        )
        require(self.temperature > 0, f"temperature must be > 0, got {self.temperature}")
        require(
            self.similarity_metric in METRICS,
            f"similarity_metric must be one of {', '.join(METRICS.names())}, "
            f"got {self.similarity_metric!r}",
        )


@SIMILARITY_HEADS.register("cluster")
class ClusterHead(BaseSimilarityHead):
    """Attention over the cluster centroids of historical students, with a fixed temperature."""

    params_cls = ClusterParams
    bank_cls = ClusterBank
    reads_trajectories = True
    content_params = {"similarity_metric": "cosine"}

    def __init__(self, d_model: int, d_head: int, spec: HeadConfig, num_c: int):
        super().__init__(d_model, d_head, spec, num_c)
        content = self.strategy == CONTENT  # temporal strategies score with states, not keys
        self.w_k = nn.Linear(d_model, d_head, bias=False) if content else None
        self.w_v = nn.Linear(d_model, d_head, bias=False)
        self.metric = METRICS[self.p.similarity_metric](d_head) if content else None
        self.temporal = self._strategy_module()

    def build_bank(self, build: BankBuild) -> ClusterBank:
        return ClusterBank.build(build.members, self.p.n_clusters, build.seed, build.kmeans_n_init)

    def _install(self, banks: list[ClusterBank]) -> None:
        self._buffer("centroids", [b.centroids for b in banks])  # [F, C, D]
        self._buffer("slot_valid", [b.sizes > 0 for b in banks])  # [F, C]
        if self.temporal is not None:
            self._padded_steps("sequences", [b.sequences for b in banks])  # [F, C, S, D]
            self._padded_steps("seq_valid", [b.seq_valid for b in banks], False)  # [F, C, S]

    def attend(self, query: torch.Tensor, ctx: HeadContext):
        values = self.w_v(self.centroids)[ctx.fold]  # [B, C, Dh]
        slots = self.slot_valid[ctx.fold]  # [B, C]
        if self.temporal is not None:
            scores, readable = self.trajectory_similarity(ctx, self.sequences, self.seq_valid)
            slots = slots & readable  # clusters with a member at the window's first step
        else:
            scores = self.metric(query, self.w_k(self.centroids)[ctx.fold])  # [B, L, C]
        w = masked_softmax(scores / self.p.temperature, slots.unsqueeze(1))
        return w @ values, self.maps(ctx, w)


@dataclass
class KNNParams:
    """KNN head settings (seed 000: knn_config)."""

    memory_size: int = 200  # students kept per bank
    k_neighbors: int = 15  # neighbours attended per step
    temperature: float = 0.1  # softmax temperature (initial value when adaptive)
    adaptive_temperature: bool = True  # learn the temperature
    distance_metric: str = "euclidean"  # content scores: a METRICS name
    sampling: str = DEFAULT_SAMPLER  # how the bank picks its students: a SAMPLERS name

    def validate(self) -> None:
        require(self.memory_size >= 1, f"memory_size must be >= 1, got {self.memory_size}")
        warn_outside("memory_size", self.memory_size, *SEED_MEMORY_SIZE, "seed 000's stated range")
        require(self.k_neighbors >= 1, f"k_neighbors must be >= 1, got {self.k_neighbors}")
        require(
            self.k_neighbors <= self.memory_size,
            f"k_neighbors={self.k_neighbors} is larger than the bank "
            f"(memory_size={self.memory_size})",
        )
        require(self.temperature > 0, f"temperature must be > 0, got {self.temperature}")
        require(
            self.distance_metric in METRICS,
            f"distance_metric must be one of {', '.join(METRICS.names())}, "
            f"got {self.distance_metric!r}",
        )
        require(
            self.sampling in SAMPLERS,
            f"sampling must be one of {', '.join(SAMPLERS.names())}, got {self.sampling!r}",
        )


@SIMILARITY_HEADS.register("knn")
class KNNHead(BaseSimilarityHead):
    """Top-k attention over a bank of historical students, learnable temperature."""

    params_cls = KNNParams
    bank_cls = KNNBank
    reads_trajectories = True
    content_params = {"distance_metric": "euclidean"}

    def __init__(self, d_model: int, d_head: int, spec: HeadConfig, num_c: int):
        super().__init__(d_model, d_head, spec, num_c)
        content = self.strategy == CONTENT  # temporal strategies score with states, not keys
        self.w_k = nn.Linear(d_model, d_head, bias=False) if content else None
        self.w_v = nn.Linear(d_model, d_head, bias=False)
        log_t = torch.tensor(float(self.p.temperature)).log()
        if self.p.adaptive_temperature:
            self.log_temperature = nn.Parameter(log_t)
        else:
            self.register_buffer("log_temperature", log_t)
        self.metric = METRICS[self.p.distance_metric](d_head) if content else None
        self.temporal = self._strategy_module()

    def build_bank(self, build: BankBuild) -> KNNBank:
        return KNNBank.build(
            build.members,
            self.p.memory_size,
            build.seed,
            with_sequences=self.temporal is not None,
            sampling=self.p.sampling,
        )

    def _install(self, banks: list[KNNBank]) -> None:
        self._install_entries(banks, self.p.k_neighbors, "k_neighbors")
        if self.temporal is not None:
            self._padded_steps("sequences", [b.sequences for b in banks])  # [F, M, S, D]
            self._padded_steps("seq_valid", [b.seq_valid for b in banks], False)  # [F, M, S]

    def attend(self, query: torch.Tensor, ctx: HeadContext):
        B, L, Dh = query.shape
        values = self.w_v(self.entries)[ctx.fold]  # [B, M, Dh]
        valid = self.entry_valid[ctx.fold]  # [B, M]
        if ctx.uid is not None:  # a student never reads its own entry
            valid = valid & (self.entry_uids[ctx.fold] != ctx.uid.unsqueeze(1))
        if self.temporal is not None:
            scores, readable = self.trajectory_similarity(ctx, self.sequences, self.seq_valid)
            valid = valid & readable  # entries whose log reaches the window's first step
        else:
            scores = self.metric(query, self.w_k(self.entries)[ctx.fold])
        scores = scores.masked_fill(~valid.unsqueeze(1), -torch.inf)
        k = min(self.p.k_neighbors, values.shape[1])
        top, idx = scores.topk(k, dim=-1)  # [B, L, k]
        ok = torch.isfinite(top)
        top = torch.where(ok, top, 0.0)  # excluded entries: no inf in the temperature gradient
        w = masked_softmax(top / self.log_temperature.exp(), ok)
        picked = values.gather(1, idx.reshape(B, L * k, 1).expand(-1, -1, Dh))
        out = (w.unsqueeze(-1) * picked.view(B, L, k, Dh)).sum(2)
        if not ctx.need_weights:
            return out, {}
        return out, self.maps(ctx, torch.zeros_like(scores).scatter(-1, idx, w))
