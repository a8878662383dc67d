"""Inter-student similarity heads for SimAKT's Block 3 (seed 000, Step 2), with their registries.

# B batch, L steps, D model dim, Dh head dim, F bank folds, M memory slots, S memory steps,
# C concepts, P prototypes
A head receives its slice of Block 3's query projection (Q = W_Q hq) [B, L, Dh] and a
`HeadContext`, and returns [B, L, Dh]; Block 3 scales it by the head's influence weight (0: the
head is off and outputs zeros), concatenates it after the intra-student heads, then applies W_O.
Heads are configured by `kt_lib.heads.simakt_config.HeadConfig` (parsed and validated there).

Registered types (`SIMILARITY_HEADS`): `cluster` (attention over K-means centroids, fixed
temperature), `knn` (top-k of a farthest-first or random bank, learnable temperature), `graph`
(attention over skills biased by a skill graph from other students' practice), `attention`
(cross-student attention over learned prototypes of student states), `hybrid` (a learnable
softmax-weighted mix of other heads, the seed's HybridSimilarityModule). `custom` loads
`module_path`, a dotted path to a `BaseSimilarityHead` subclass (`DeepSetSimilarity` below is an
example); anything else is refused. Configs are code: only load custom module paths you trust.

How a head scores its memory slots:
- `content`: the query against projected memory keys with a registered metric (`METRICS`:
  cosine, dot, euclidean, learned).
- cluster and KNN heads may instead compare the current student's states with the slots'
  complete trajectories by a temporal strategy (`kt_lib.memory.similarity.TEMPORAL_STRATEGIES`:
  prefix_aligned, position_weighted, multiscale, completion), every (row, step, slot) at once.
- graph and attention heads accept `position_weighted`: a recency-weighted (decay_factor) mix
  over the current student's own past instead of the current step alone; the graph head adds
  future_weight x the two-step transitions of other students (their later practice).

Causality: a head's output at step t is read by Block 4 only at steps > t, so it may use the
current student up to and including t (states[:, :t+1], the query at t, q_t) and nothing later.
Banks hold other students only: cross-fitted folds, see `kt_lib.memory.banks`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..config import from_dict, require
from ..memory.banks import (
    DEFAULT_SAMPLER,
    SAMPLERS,
    Bank,
    ClusterBank,
    GraphBank,
    KNNBank,
    StateSource,
)
from ..memory.similarity import TEMPORAL_STRATEGIES, build_strategy, decayed_mean_weights
from ..registry import Registry

if TYPE_CHECKING:
    from .simakt_config import HeadConfig

SIMILARITY_HEADS: Registry = Registry("inter-student head")
METRICS: Registry = Registry("similarity metric")
CONTENT = "content"  # strategy name: score the query against projected keys
# seed 000 names custom modules that do not exist; the workbook ships the same ideas here
SEED_MODULE_PATHS = {
    "research.trajectory_similarity.DeepSetSimilarity": "kt_lib.heads.similarity.DeepSetSimilarity"
}


@dataclass
class HeadContext:
    """What the inter-student heads read besides their query (current students only)."""

    hq: torch.Tensor  # [B, L, D] Block 1 output
    hs: torch.Tensor  # [B, L, D] Block 2 output
    states: torch.Tensor | None  # [B, L, D] trajectory-encoder states (steps <= t at row t)
    q: torch.Tensor  # [B, L] concept ids
    fold: torch.Tensor  # [B] bank fold each row reads
    uid: torch.Tensor | None  # [B] student ids
    need_weights: bool = False
    weights: dict[str, torch.Tensor] = field(default_factory=dict)  # head -> [B, L, M]

    def record(self, name: str, w: torch.Tensor) -> None:
        if self.need_weights:
            self.weights[f"block3.{name}"] = w.detach()


@dataclass
class BankBuild:
    """Inputs of `build_bank` for one fold."""

    members: StateSource  # the training students of this bank (other folds), encoded
    seed: int  # MemoryConfig.seed
    kmeans_n_init: int  # MemoryConfig.kmeans_n_init


def masked_softmax(scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim restricted to `valid`; all-invalid rows give zeros."""
    w = torch.softmax(scores.masked_fill(~valid, torch.finfo(scores.dtype).min), dim=-1)
    return w * valid.any(-1, keepdim=True)


# -- content metrics ---------------------------------------------------------------------------


class Metric(nn.Module):
    """Content score [B, L, M] (higher: closer) of queries [B, L, Dh] against keys [B, M, Dh]."""

    def __init__(self, d_head: int):
        super().__init__()
        self.d_head = d_head


@METRICS.register("cosine")
class Cosine(Metric):
    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return F.normalize(query, dim=-1) @ F.normalize(keys, dim=-1).transpose(1, 2)


@METRICS.register("dot")
class ScaledDot(Metric):
    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return query @ keys.transpose(1, 2) * self.d_head**-0.5


@METRICS.register("euclidean")
class NegativeEuclidean(Metric):
    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        sq = (
            query.pow(2).sum(-1, keepdim=True)
            + keys.pow(2).sum(-1).unsqueeze(1)
            - 2 * query @ keys.transpose(1, 2)
        )
        return -sq.clamp(min=1e-12).sqrt()  # finite gradient at distance 0


@METRICS.register("learned")
class LearnedBilinear(Metric):
    """cos under a learned bilinear form: q_hat W k_hat^T, W initialised to I (cosine)."""

    def __init__(self, d_head: int):
        super().__init__(d_head)
        self.weight = nn.Parameter(torch.eye(d_head))

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q, k = F.normalize(query, dim=-1), F.normalize(keys, dim=-1)
        return q @ self.weight @ k.transpose(1, 2)


# -- the head interface ------------------------------------------------------------------------


@dataclass
class NoParams:
    """Heads without type-specific parameters."""


class BaseSimilarityHead(nn.Module):
    """Base of every inter-student head; custom heads subclass it.

    Subclasses set `params_cls` (a dataclass, validated from the config), implement
    `forward(query, ctx)`, and, if they read a bank, set `bank_cls` and implement `build_bank`
    and `_install` (register the stacked per-fold tensors as non-persistent buffers). Heads that
    score slots by their trajectories set `reads_trajectories` (every temporal strategy is then
    available); others list the strategies they implement in `temporal_strategies`.
    """

    params_cls: ClassVar[type] = NoParams
    bank_cls: ClassVar[type[Bank] | None] = None  # None: the head reads no bank
    needs_states: ClassVar[bool] = False  # reads ctx.states whatever its strategy
    reads_trajectories: ClassVar[bool] = False  # scores slots by a temporal strategy
    temporal_strategies: ClassVar[tuple[str, ...]] = (CONTENT,)

    def __init__(self, d_model: int, d_head: int, spec: HeadConfig, num_c: int):
        super().__init__()
        self.d_model, self.d_head, self.spec, self.num_c = d_model, d_head, spec, num_c
        self.p = spec.params
        self.weight = spec.influence_weight  # may be reset by an influence rule (model.prepare)
        self._banks: list[Bank] | None = None

    # -- configuration hooks (called by kt_lib.heads.simakt_config) ---------------------------
    @classmethod
    def supported_strategies(cls) -> list[str]:
        if cls.reads_trajectories:
            return [CONTENT, *TEMPORAL_STRATEGIES.names()]
        return list(cls.temporal_strategies)

    @classmethod
    def parse_params(cls, raw: dict, where: str, temporal: dict | None) -> Any:
        """The params dataclass from the head's own fields (`temporal`: its raw temporal_config)."""
        return from_dict(cls.params_cls, raw, source=where)

    @classmethod
    def check_temporal(cls, temporal, where: str) -> None:
        """Raise ValueError for temporal settings this head type cannot honour."""

    # -- state ----------------------------------------------------------------------------------
    @property
    def strategy(self) -> str:
        return self.spec.temporal.strategy

    @property
    def active(self) -> bool:
        return self.weight > 0

    @property
    def uses_states(self) -> bool:
        return self.needs_states or (self.reads_trajectories and self.strategy != CONTENT)

    def _strategy_module(self) -> nn.Module | None:
        """The temporal strategy module of a trajectory-reading head (None: content scores)."""
        if not self.reads_trajectories or self.strategy == CONTENT:
            return None
        return build_strategy(self.strategy, self.d_model, self.spec.temporal)

    @property
    def banks(self) -> list[Bank]:
        """Per-fold banks; a clear error while none is built."""
        if self._banks is None:
            raise RuntimeError(
                f"inter-student head {self.spec.name!r} has no memory bank: call "
                "model.prepare(train) with the training students first (fit does), or load a "
                "checkpoint saved with its banks"
            )
        return self._banks

    @property
    def has_banks(self) -> bool:
        return self._banks is not None

    def bank_readers(self) -> list[tuple[str, BaseSimilarityHead]]:
        """(key suffix, head) of every module under this head that reads a bank."""
        return [("", self)] if self.bank_cls is not None else []

    def check_ready(self) -> None:
        """Raise the "no memory bank" error if this head reads a bank that is not built."""
        if self.bank_cls is not None:
            self.banks  # noqa: B018 -- the property raises the error

    def build_bank(self, build: BankBuild) -> Bank:
        raise NotImplementedError(f"{type(self).__name__} reads no bank")

    def install(self, banks: list[Bank]) -> None:
        """Keep the per-fold banks and put their stacked tensors on the head's device."""
        self._banks = list(banks)
        self._install(self._banks)

    def _install(self, banks: list[Bank]) -> None:
        """Register stacked [F, ...] tensors as buffers (subclasses)."""

    def _buffer(self, name: str, tensors: list[torch.Tensor]) -> None:
        ref = next(self.parameters(), None)
        stacked = torch.stack(tensors)
        if ref is not None:
            stacked = stacked.to(device=ref.device)
            if stacked.is_floating_point():
                stacked = stacked.to(dtype=ref.dtype)
        self.register_buffer(name, stacked, persistent=False)

    def _padded(self, name: str, tensors: list[torch.Tensor], fill=0) -> None:
        """Register [F, M, ...] from per-fold tensors of unequal length M_f (padded with fill)."""
        M = max(len(t) for t in tensors)
        pad = [torch.cat([t, t.new_full((M - len(t), *t.shape[1:]), fill)]) for t in tensors]
        self._buffer(name, pad)

    def _install_entries(self, banks: list[KNNBank], k: int, what: str) -> None:
        """Entries of per-fold KNN banks, padded to one size; `k` must fit the smallest."""
        smallest = min(len(b.uids) for b in banks)
        if k > smallest:
            raise ValueError(
                f"{what}={k} is larger than the bank: head {self.spec.name!r} has a fold bank "
                f"of {smallest} entries"
            )
        self._padded("entries", [b.encodings for b in banks])  # [F, M, D]
        ones = [torch.ones(len(b.uids), dtype=torch.bool) for b in banks]
        self._padded("entry_valid", ones, False)  # [F, M]
        self._padded("entry_uids", [b.uids for b in banks], -1)  # [F, M]

    def trajectory_similarity(
        self, states: torch.Tensor, fold: torch.Tensor, sequences: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """Temporal-strategy similarity [B, L, M] of each row to the slots of its own fold."""
        B, L, _ = states.shape
        out = states.new_zeros(B, L, sequences.shape[1])
        for f in fold.unique().tolist():  # F is small (2 by default); rows are vectorised
            rows = (fold == f).nonzero(as_tuple=True)[0]
            out[rows] = self.temporal(states[rows], sequences[f], valid[f]).to(
                out.dtype
            )  # under autocast the similarity may come back in bfloat16
        return out

    def forward(self, query: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        raise NotImplementedError


# -- cluster and KNN heads (trajectory banks) --------------------------------------------------


@dataclass
class ClusterParams:
    """Cluster head settings (seed 000: cluster_config)."""

    n_clusters: int = 100  # K-means clusters per bank
    temperature: float = 0.05  # fixed softmax temperature
    similarity_metric: str = "cosine"  # content scores: a METRICS name

    def validate(self) -> None:
        require(self.n_clusters >= 1, f"n_clusters must be >= 1, got {self.n_clusters}")
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
            self._buffer("sequences", [b.sequences for b in banks])  # [F, C, S, D]
            self._buffer("seq_valid", [b.seq_valid for b in banks])  # [F, C, S]

    def forward(self, query: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        values = self.w_v(self.centroids)[ctx.fold]  # [B, C, Dh]
        if self.temporal is not None:
            scores = self.trajectory_similarity(
                ctx.states, ctx.fold, self.sequences, self.seq_valid
            )
        else:
            scores = self.metric(query, self.w_k(self.centroids)[ctx.fold])  # [B, L, C]
        w = masked_softmax(scores / self.p.temperature, self.slot_valid[ctx.fold].unsqueeze(1))
        ctx.record(self.spec.name, w)
        return w @ values


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
            self._padded("sequences", [b.sequences for b in banks])  # [F, M, S, D]
            self._padded("seq_valid", [b.seq_valid for b in banks], False)  # [F, M, S]

    def forward(self, query: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        B, L, Dh = query.shape
        values = self.w_v(self.entries)[ctx.fold]  # [B, M, Dh]
        valid = self.entry_valid[ctx.fold]  # [B, M]
        if ctx.uid is not None:  # a student never reads its own entry
            valid = valid & (self.entry_uids[ctx.fold] != ctx.uid.unsqueeze(1))
        if self.temporal is not None:
            scores = self.trajectory_similarity(
                ctx.states, ctx.fold, self.sequences, self.seq_valid
            )
        else:
            scores = self.metric(query, self.w_k(self.entries)[ctx.fold])
        scores = scores.masked_fill(~valid.unsqueeze(1), -torch.inf)
        k = min(self.p.k_neighbors, values.shape[1])
        top, idx = scores.topk(k, dim=-1)  # [B, L, k]
        ok = torch.isfinite(top)
        top = torch.where(ok, top, 0.0)  # excluded entries: no inf in the temperature gradient
        w = masked_softmax(top / self.log_temperature.exp(), ok)
        picked = values.gather(1, idx.reshape(B, L * k, 1).expand(-1, -1, Dh))
        if ctx.need_weights:
            ctx.record(self.spec.name, torch.zeros_like(scores).scatter(-1, idx, w))
        return (w.unsqueeze(-1) * picked.view(B, L, k, Dh)).sum(2)


# -- graph and cross-student heads -------------------------------------------------------------


@dataclass
class GraphParams:
    """Graph head settings."""

    graph_type: str = "knowledge_dependency"  # edge weights: knowledge_dependency | transition
    smoothing: float = 1.0  # add-smoothing of the transition counts

    def validate(self) -> None:
        require(
            self.graph_type in ("knowledge_dependency", "transition"),
            f"graph_type must be knowledge_dependency or transition, got {self.graph_type!r}",
        )
        require(self.smoothing > 0, f"smoothing must be > 0, got {self.smoothing}")


@SIMILARITY_HEADS.register("graph")
class GraphHead(BaseSimilarityHead):
    """Attention over skills, biased by a skill graph estimated from other students' practice.

    Keys/values are skill nodes (a learned embedding plus the bank's per-skill statistics); the
    score of skill j at step t adds a log edge weight towards j: out of the current skill q_t
    (content), or (position_weighted) out of the student's past skills q_0..q_t mixed with
    weights decay^(t - i), plus future_weight x the two-step edges out of q_t.
    """

    params_cls = GraphParams
    bank_cls = GraphBank
    temporal_strategies = (CONTENT, "position_weighted")

    def __init__(self, d_model: int, d_head: int, spec: HeadConfig, num_c: int):
        super().__init__(d_model, d_head, spec, num_c)
        self.node = nn.Embedding(num_c, d_model)
        self.stats_proj = nn.Linear(2, d_model)
        self.w_k = nn.Linear(d_model, d_head, bias=False)
        self.w_v = nn.Linear(d_model, d_head, bias=False)

    def build_bank(self, build: BankBuild) -> GraphBank:
        return GraphBank.build(build.members, self.p.graph_type, self.p.smoothing)

    def _install(self, banks: list[GraphBank]) -> None:
        self._buffer("log_adj", [b.log_adj for b in banks])  # [F, C, C]
        self._buffer("node_stats", [b.node_stats for b in banks])  # [F, C, 2]
        if self.strategy != CONTENT:
            nxt = torch.softmax(torch.stack([b.log_adj for b in banks]), -1)  # edges as P(j | i)
            self._buffer("next_p", list(nxt))  # [F, C, C]
            self._buffer("two_step", list(nxt @ nxt))  # [F, C, C] other students, 2 steps on

    def prior(self, ctx: HeadContext) -> torch.Tensor:
        """[B, L, C] log edge weights added to the scores (step t reads q_0..q_t only)."""
        at = ctx.fold.unsqueeze(1)
        if self.strategy == CONTENT:
            return self.log_adj[at, ctx.q]  # edges out of q_t
        t = self.spec.temporal
        L = ctx.q.shape[1]
        rows = self.next_p[at, ctx.q]  # [B, L, C] edges out of each practised skill
        recency = decayed_mean_weights(L, t.decay_factor, rows.device, rows.dtype)  # [L, L]
        mix = torch.einsum("ti,bic->btc", recency, rows)
        if t.future_weight > 0:
            mix = (mix + t.future_weight * self.two_step[at, ctx.q]) / (1 + t.future_weight)
        return mix.clamp(min=torch.finfo(mix.dtype).tiny).log()

    def forward(self, query: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        nodes = self.node.weight + self.stats_proj(self.node_stats)  # [F, C, D]
        keys = self.w_k(nodes)[ctx.fold]  # [B, C, Dh]
        values = self.w_v(nodes)[ctx.fold]
        scores = query @ keys.transpose(1, 2) * self.d_head**-0.5 + self.prior(ctx)
        w = torch.softmax(scores, dim=-1)
        ctx.record(self.spec.name, w)
        return w @ values


@dataclass
class PrototypeParams:
    """Cross-student attention head settings."""

    attention_type: str = "cross_student"  # the only type: prototypes of student states
    n_prototypes: int = 16  # learned prototypes

    def validate(self) -> None:
        require(
            self.attention_type == "cross_student",
            f"attention_type must be cross_student, got {self.attention_type!r}",
        )
        require(self.n_prototypes >= 1, f"n_prototypes must be >= 1, got {self.n_prototypes}")


@SIMILARITY_HEADS.register("attention")
class CrossStudentAttentionHead(BaseSimilarityHead):
    """Cross-student attention over learned prototypes of student states (no bank).

    The query adds the student's mean state over steps <= t (position_weighted: weights
    decay^(t - i)); the prototypes are parameters shared by all students, so no student's own log
    is ever stored for it, and there are no later steps for future_weight to weigh.
    """

    params_cls = PrototypeParams
    needs_states = True
    temporal_strategies = (CONTENT, "position_weighted")

    def __init__(self, d_model: int, d_head: int, spec: HeadConfig, num_c: int):
        super().__init__(d_model, d_head, spec, num_c)
        self.prototypes = nn.Parameter(torch.randn(self.p.n_prototypes, d_model) * d_model**-0.5)
        self.w_s = nn.Linear(d_model, d_head, bias=False)
        self.w_k = nn.Linear(d_model, d_head, bias=False)
        self.w_v = nn.Linear(d_model, d_head, bias=False)

    @classmethod
    def check_temporal(cls, temporal, where: str) -> None:
        if temporal.future_weight != 0:
            raise ValueError(
                f"{where}temporal_config.future_weight must be 0 for an attention head (its "
                f"prototypes have no later steps), got {temporal.future_weight}"
            )

    def running_state(self, states: torch.Tensor) -> torch.Tensor:
        """[B, L, D] mean state over steps <= t (recency-weighted under position_weighted)."""
        L = states.shape[1]
        if self.strategy == CONTENT:
            steps = torch.arange(1, L + 1, device=states.device, dtype=states.dtype)
            return states.cumsum(1) / steps.view(1, -1, 1)
        w = decayed_mean_weights(L, self.spec.temporal.decay_factor, states.device, states.dtype)
        return torch.einsum("ti,bid->btd", w, states)

    def forward(self, query: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        q = query + self.w_s(self.running_state(ctx.states))
        scores = q @ self.w_k(self.prototypes).T * self.d_head**-0.5  # [B, L, P]
        w = torch.softmax(scores, dim=-1)
        ctx.record(self.spec.name, w)
        return w @ self.w_v(self.prototypes)


# -- hybrid ------------------------------------------------------------------------------------


@dataclass
class HybridParams:
    """Hybrid head settings (seed 000: HybridSimilarityModule(modules, weights))."""

    modules: list[Any] = field(default_factory=list)  # HeadConfig of each mixed head
    weights: list[float] | None = None  # initial mixing logits (None: equal)

    def validate(self) -> None:
        require(len(self.modules) >= 1, "a hybrid head needs at least one module")
        if self.weights is not None:
            numbers = all(type(w) in (int, float) for w in self.weights)
            require(
                numbers and len(self.weights) == len(self.modules),
                f"weights must be {len(self.modules)} numbers (one per module), got {self.weights}",
            )


@SIMILARITY_HEADS.register("hybrid")
class HybridHead(BaseSimilarityHead):
    """A learnable softmax-weighted mix of other heads' outputs (each with its own bank).

    The seed mixes the similarities of modules sharing one memory; here the modules keep their
    own banks (centroids, entries, ...), so the mix is taken over their attention read-outs.
    A temporal_config on the hybrid head applies to the modules that set none.
    """

    params_cls = HybridParams

    def __init__(self, d_model: int, d_head: int, spec: HeadConfig, num_c: int):
        super().__init__(d_model, d_head, spec, num_c)
        self.parts = nn.ModuleList(
            [head_class(m)(d_model, d_head, m, num_c) for m in self.p.modules]
        )
        logits = self.p.weights or [0.0] * len(self.parts)
        self.mix = nn.Parameter(torch.tensor([float(w) for w in logits]))

    @classmethod
    def supported_strategies(cls) -> list[str]:
        return [CONTENT, *TEMPORAL_STRATEGIES.names()]  # checked again by each module

    @classmethod
    def parse_params(cls, raw: dict, where: str, temporal: dict | None) -> HybridParams:
        from .simakt_config import parse_head

        raw = dict(raw)
        modules = raw.pop("modules", None)
        if not isinstance(modules, list) or not modules:
            raise ValueError(f"{where}: a hybrid head needs 'modules', a non-empty list of heads")
        parsed = []
        for j, m in enumerate(modules):
            at = f"{where}.modules[{j}]"
            if isinstance(m, dict) and "influence_weight" in m:
                raise ValueError(
                    f"{at}: influence_weight belongs to the hybrid head; its modules are mixed "
                    "by the learnable weights"
                )
            if isinstance(m, dict) and temporal and "temporal_config" not in m:
                m = {**m, "temporal_config": temporal}
            parsed.append(parse_head(m, at))
        return from_dict(HybridParams, {"modules": parsed, **raw}, source=where)

    @property
    def uses_states(self) -> bool:
        return any(p.uses_states for p in self.parts)

    def bank_readers(self) -> list[tuple[str, BaseSimilarityHead]]:
        return [
            (f"_{j}{suffix}", head)
            for j, part in enumerate(self.parts)
            for suffix, head in part.bank_readers()
        ]

    def check_ready(self) -> None:
        for part in self.parts:
            part.check_ready()

    def forward(self, query: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        w = torch.softmax(self.mix, dim=0)
        return sum(w[j] * part(query, ctx) for j, part in enumerate(self.parts))


# -- custom-head example -----------------------------------------------------------------------


@dataclass
class DeepSetParams:
    """DeepSetSimilarity settings (seed 000's custom-head example)."""

    set_size: int = 128  # students in the set (farthest-first, per bank fold)
    invariant_layers: int = 3  # layers of the per-student network phi

    def validate(self) -> None:
        require(self.set_size >= 1, f"set_size must be >= 1, got {self.set_size}")
        require(
            self.invariant_layers >= 1,
            f"invariant_layers must be >= 1, got {self.invariant_layers}",
        )


class DeepSetSimilarity(BaseSimilarityHead):
    """Example custom head (`module_path: kt_lib.heads.similarity.DeepSetSimilarity`).

    A DeepSet summary of a diverse set of other students, rho([query, mean_s phi(enc_s)]).
    Deliberately not registered: it is reached through `type: custom`.
    """

    params_cls = DeepSetParams
    bank_cls = KNNBank

    def __init__(self, d_model: int, d_head: int, spec: HeadConfig, num_c: int):
        super().__init__(d_model, d_head, spec, num_c)
        layers: list[nn.Module] = []
        for i in range(self.p.invariant_layers):
            layers += [nn.Linear(d_model if i == 0 else d_head, d_head), nn.ReLU()]
        self.phi = nn.Sequential(*layers)
        self.rho = nn.Linear(2 * d_head, d_head)

    def build_bank(self, build: BankBuild) -> KNNBank:
        return KNNBank.build(build.members, self.p.set_size, build.seed, with_sequences=False)

    def _install(self, banks: list[KNNBank]) -> None:
        self._install_entries(banks, 1, "set_size")

    def forward(self, query: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        keep = self.entry_valid.unsqueeze(-1).to(query.dtype)  # [F, M, 1]
        pooled = ((self.phi(self.entries) * keep).sum(1) / keep.sum(1))[ctx.fold]  # [B, Dh]
        return self.rho(torch.cat([query, pooled.unsqueeze(1).expand_as(query)], dim=-1))


# -- lookup ------------------------------------------------------------------------------------


def valid_types() -> list[str]:
    return sorted([*SIMILARITY_HEADS, "custom"])


def import_head_class(path: str, where: str = "") -> type[BaseSimilarityHead]:
    """The class at dotted `path`; it must subclass BaseSimilarityHead."""
    module_name, _, cls_name = str(path).rpartition(".")
    if not module_name:
        raise ValueError(f"{where}module_path {path!r} is not a dotted path 'package.module.Class'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(
            f"{where}module_path {path!r}: cannot import {module_name!r} ({exc})"
        ) from None
    obj = getattr(module, cls_name, None)
    if obj is None:
        raise ValueError(f"{where}module_path {path!r}: {module_name!r} has no {cls_name!r}")
    if not (
        isinstance(obj, type)
        and issubclass(obj, BaseSimilarityHead)
        and obj is not BaseSimilarityHead
    ):
        raise ValueError(
            f"{where}module_path {path!r} is not a subclass of kt_lib.heads."
            "similarity.BaseSimilarityHead; custom heads must subclass it"
        )
    return obj


def head_class(spec: HeadConfig, where: str = "") -> type[BaseSimilarityHead]:
    """Registry lookup, or the custom class named by `module_path`."""
    return head_class_of(spec.type, spec.module_path, where)


def head_class_of(type_: str, module_path: str | None, where: str = "") -> type[BaseSimilarityHead]:
    """The head class of a type name (and, for `custom`, its module path)."""
    if type_ == "custom":
        if not module_path:
            raise ValueError(
                f"{where}a custom head needs module_path: 'package.module.Class' "
                "(a subclass of BaseSimilarityHead)"
            )
        return import_head_class(module_path, where)
    if type_ not in SIMILARITY_HEADS:
        raise ValueError(
            f"{where}unknown inter-student head type {type_!r}; valid types: "
            f"{', '.join(valid_types())}"
        )
    return SIMILARITY_HEADS[type_]


class InterStudentHeads(nn.Module):
    """The inter-student heads of Block 3, each scaled by its influence weight."""

    def __init__(self, specs: list[HeadConfig], d_model: int, d_head: int, num_c: int):
        super().__init__()
        self.heads = nn.ModuleList([head_class(s)(d_model, d_head, s, num_c) for s in specs])

    def __len__(self) -> int:
        return len(self.heads)

    @property
    def uses_states(self) -> bool:
        return any(h.active and h.uses_states for h in self.heads)

    @property
    def weights(self) -> list[float]:
        """Current influence weight of each head."""
        return [h.weight for h in self.heads]

    def set_weights(self, weights: list[float]) -> None:
        if len(weights) != len(self.heads):
            raise ValueError(f"{len(self.heads)} inter heads, got {len(weights)} weights")
        for head, w in zip(self.heads, weights, strict=True):
            head.weight = float(w)

    def bank_slots(self, active_only: bool = True) -> list[tuple[str, BaseSimilarityHead]]:
        """(key, module) of every module that reads a bank: `head{i}`, `head{i}_{j}` (hybrid)."""
        return [
            (f"head{i}{suffix}", reader)
            for i, head in enumerate(self.heads)
            if head.active or not active_only
            for suffix, reader in head.bank_readers()
        ]

    @property
    def bank_heads(self) -> list[BaseSimilarityHead]:
        """Modules of active heads that read a bank."""
        return [reader for _, reader in self.bank_slots()]

    def forward(self, queries: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        """queries [B, h, L, Dh] (one slice of W_Q hq per head) -> [B, h, L, Dh]."""
        outs = []
        for i, head in enumerate(self.heads):
            if not head.active:
                outs.append(torch.zeros_like(queries[:, i]))
                continue
            head.check_ready()
            outs.append(head(queries[:, i], ctx) * head.weight)
        return torch.stack(outs, dim=1)
