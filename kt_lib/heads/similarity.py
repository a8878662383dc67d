"""Inter-student similarity heads for SimAKT's Block 3 (seed 000, Step 2), with their registry.

# B batch, L steps, D model dim, Dh head dim, F bank folds, M memory slots, S memory steps,
# C concepts, P prototypes
A head receives its slice of Block 3's query projection (Q = W_Q hq) [B, L, Dh] and a
`HeadContext`, and returns [B, L, Dh]; Block 3 scales it by the head's `influence_weight` (0: the
head is off and outputs zeros), concatenates it after the intra-student heads, then applies W_O.

Registered types (`SIMILARITY_HEADS`): `cluster` (attention over K-means centroids, fixed
temperature), `knn` (top-k of a farthest-first bank, learnable temperature), `graph` (attention
over skills biased by a skill graph from other students' practice), `attention` (cross-student
attention over learned prototypes of student states). `custom` loads `module_path`, a dotted path
to a `BaseSimilarityHead` subclass (`DeepSetSimilarity` below is an example); anything else is
refused. Configs are code: only load custom module paths you trust.

Similarity strategy per head: `content` (the query against projected memory keys) or
`position_weighted` (seed's decay_factor / future_weight, `kt_lib.memory.similarity`), computed
for every (row, step, slot) at once.

Causality: a head's output at step t is read by Block 4 only at steps > t, so it may use the
current student up to and including t (states[:, :t+1], the query at t, q_t) and nothing later.
Banks hold other students only: cross-fitted folds, see `kt_lib.memory.banks`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..config import from_dict, require
from ..memory.banks import Bank, ClusterBank, GraphBank, KNNBank, StateSource
from ..memory.similarity import position_weighted_similarity
from ..registry import Registry

SIMILARITY_HEADS: Registry = Registry("inter-student head")
STRATEGIES = ("content", "position_weighted")
ALIASES = {"initial_temperature": "temperature"}  # seed 000 spells some fields two ways


@dataclass
class HeadSpec:
    """One inter-student head, parsed from a Step 1 or Step 2 configuration."""

    type: str  # registry name ("cluster", "knn", "graph", "attention") or "custom"
    influence_weight: float = 1.0  # output scale; 0 turns the head off (zeros, no bank)
    strategy: str = "content"  # "content" or "position_weighted"
    decay_factor: float = 0.95  # position weighting: weight decay per step of distance
    future_weight: float = 0.0  # position weighting: weight of the memory's later steps, [0, 1]
    params: Any = None  # the head class's parameter dataclass
    module_path: str | None = None  # custom heads: dotted path of the class
    name: str = ""  # label in attention maps and bank tables


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
    seed: int = 0
    kmeans_n_init: int = 3


def masked_softmax(scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim restricted to `valid`; all-invalid rows give zeros."""
    w = torch.softmax(scores.masked_fill(~valid, torch.finfo(scores.dtype).min), dim=-1)
    return w * valid.any(-1, keepdim=True)


@dataclass
class NoParams:
    """Heads without type-specific parameters."""


class BaseSimilarityHead(nn.Module):
    """Base of every inter-student head; custom heads subclass it.

    Subclasses set `params_cls` (a dataclass, validated from the config), implement
    `forward(query, ctx)`, and, if they read a bank, set `bank_cls` and implement `build_bank`
    and `_install` (register the stacked per-fold tensors as non-persistent buffers).
    """

    params_cls: ClassVar[type] = NoParams
    bank_cls: ClassVar[type[Bank] | None] = None  # None: the head reads no bank
    needs_states: ClassVar[bool] = False  # reads ctx.states (beyond position weighting)
    supports_position_weighting: ClassVar[bool] = False

    def __init__(self, d_model: int, d_head: int, spec: HeadSpec, num_c: int):
        super().__init__()
        self.d_model, self.d_head, self.spec, self.num_c = d_model, d_head, spec, num_c
        self.p = spec.params
        self._banks: list[Bank] | None = None

    @property
    def active(self) -> bool:
        return self.spec.influence_weight > 0

    @property
    def uses_states(self) -> bool:
        return self.needs_states or self.spec.strategy == "position_weighted"

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

    def position_similarity(
        self, states: torch.Tensor, fold: torch.Tensor, sequences: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """Position-weighted similarity [B, L, M] of each row to the memory of its own fold."""
        B, L, _ = states.shape
        out = states.new_zeros(B, L, sequences.shape[1])
        for f in fold.unique().tolist():  # F is small (2 by default); rows are vectorised
            rows = (fold == f).nonzero(as_tuple=True)[0]
            out[rows] = position_weighted_similarity(
                states[rows],
                sequences[f],
                valid[f],
                self.spec.decay_factor,
                self.spec.future_weight,
            ).to(out.dtype)  # under autocast the similarity may come back in bfloat16
        return out

    def forward(self, query: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        raise NotImplementedError


@dataclass
class ClusterParams:
    """Cluster head settings (seed 000: cluster_config)."""

    n_clusters: int = 100  # K-means clusters per bank
    temperature: float = 0.05  # fixed softmax temperature
    similarity_metric: str = "cosine"  # content scores: cosine | dot (scaled dot product)

    def validate(self) -> None:
        require(self.n_clusters >= 1, f"n_clusters must be >= 1, got {self.n_clusters}")
        require(self.temperature > 0, f"temperature must be > 0, got {self.temperature}")
        require(
            self.similarity_metric in ("cosine", "dot"),
            f"similarity_metric must be cosine or dot, got {self.similarity_metric!r}",
        )


@SIMILARITY_HEADS.register("cluster")
class ClusterHead(BaseSimilarityHead):
    """Attention over the cluster centroids of historical students, with a fixed temperature."""

    params_cls = ClusterParams
    bank_cls = ClusterBank
    supports_position_weighting = True

    def __init__(self, d_model: int, d_head: int, spec: HeadSpec, num_c: int):
        super().__init__(d_model, d_head, spec, num_c)
        content = spec.strategy == "content"  # position weighting scores with states, not keys
        self.w_k = nn.Linear(d_model, d_head, bias=False) if content else None
        self.w_v = nn.Linear(d_model, d_head, bias=False)

    def build_bank(self, build: BankBuild) -> ClusterBank:
        return ClusterBank.build(build.members, self.p.n_clusters, build.seed, build.kmeans_n_init)

    def _install(self, banks: list[ClusterBank]) -> None:
        self._buffer("centroids", [b.centroids for b in banks])  # [F, C, D]
        self._buffer("slot_valid", [b.sizes > 0 for b in banks])  # [F, C]
        if self.spec.strategy == "position_weighted":
            self._buffer("sequences", [b.sequences for b in banks])  # [F, C, S, D]
            self._buffer("seq_valid", [b.seq_valid for b in banks])  # [F, C, S]

    def forward(self, query: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        values = self.w_v(self.centroids)[ctx.fold]  # [B, C, Dh]
        if self.w_k is None:
            scores = self.position_similarity(ctx.states, ctx.fold, self.sequences, self.seq_valid)
        else:
            keys = self.w_k(self.centroids)[ctx.fold]
            if self.p.similarity_metric == "cosine":
                scores = F.normalize(query, dim=-1) @ F.normalize(keys, dim=-1).transpose(1, 2)
            else:
                scores = query @ keys.transpose(1, 2) * self.d_head**-0.5  # [B, L, C]
        w = masked_softmax(scores / self.p.temperature, self.slot_valid[ctx.fold].unsqueeze(1))
        ctx.record(self.spec.name, w)
        return w @ values


@dataclass
class KNNParams:
    """KNN head settings (seed 000: knn_config)."""

    memory_size: int = 200  # students kept per bank (farthest-first)
    k_neighbors: int = 15  # neighbours attended per step
    temperature: float = 0.1  # softmax temperature (initial value when adaptive)
    adaptive_temperature: bool = True  # learn the temperature
    distance_metric: str = "euclidean"  # content distances: euclidean | cosine (1 - cos)

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
            self.distance_metric in ("euclidean", "cosine"),
            f"distance_metric must be euclidean or cosine, got {self.distance_metric!r}",
        )


@SIMILARITY_HEADS.register("knn")
class KNNHead(BaseSimilarityHead):
    """Top-k attention over a diverse bank of historical students, learnable temperature."""

    params_cls = KNNParams
    bank_cls = KNNBank
    supports_position_weighting = True

    def __init__(self, d_model: int, d_head: int, spec: HeadSpec, num_c: int):
        super().__init__(d_model, d_head, spec, num_c)
        content = spec.strategy == "content"  # position weighting scores with states, not keys
        self.w_k = nn.Linear(d_model, d_head, bias=False) if content else None
        self.w_v = nn.Linear(d_model, d_head, bias=False)
        log_t = torch.tensor(float(self.p.temperature)).log()
        if self.p.adaptive_temperature:
            self.log_temperature = nn.Parameter(log_t)
        else:
            self.register_buffer("log_temperature", log_t)

    def build_bank(self, build: BankBuild) -> KNNBank:
        return KNNBank.build(
            build.members,
            self.p.memory_size,
            build.seed,
            with_sequences=self.spec.strategy == "position_weighted",
        )

    def _install(self, banks: list[KNNBank]) -> None:
        self._install_entries(banks, self.p.k_neighbors, "k_neighbors")
        if self.spec.strategy == "position_weighted":
            self._padded("sequences", [b.sequences for b in banks])  # [F, M, S, D]
            self._padded("seq_valid", [b.seq_valid for b in banks], False)  # [F, M, S]

    def distance(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """[B, L, M] distances between queries [B, L, Dh] and keys [B, M, Dh]."""
        if self.p.distance_metric == "cosine":
            return 1 - F.normalize(query, dim=-1) @ F.normalize(keys, dim=-1).transpose(1, 2)
        sq = (
            query.pow(2).sum(-1, keepdim=True)
            + keys.pow(2).sum(-1).unsqueeze(1)
            - 2 * query @ keys.transpose(1, 2)
        )
        return sq.clamp(min=1e-12).sqrt()  # finite gradient at distance 0

    def forward(self, query: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        B, L, Dh = query.shape
        values = self.w_v(self.entries)[ctx.fold]  # [B, M, Dh]
        valid = self.entry_valid[ctx.fold]  # [B, M]
        if ctx.uid is not None:  # a student never reads its own entry
            valid = valid & (self.entry_uids[ctx.fold] != ctx.uid.unsqueeze(1))
        if self.w_k is None:
            scores = self.position_similarity(ctx.states, ctx.fold, self.sequences, self.seq_valid)
        else:
            scores = -self.distance(query, self.w_k(self.entries)[ctx.fold])
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
    score of skill j at step t adds the log edge weight from the current skill q_t to j.
    """

    params_cls = GraphParams
    bank_cls = GraphBank

    def __init__(self, d_model: int, d_head: int, spec: HeadSpec, num_c: int):
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

    def forward(self, query: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        nodes = self.node.weight + self.stats_proj(self.node_stats)  # [F, C, D]
        keys = self.w_k(nodes)[ctx.fold]  # [B, C, Dh]
        values = self.w_v(nodes)[ctx.fold]
        prior = self.log_adj[ctx.fold.unsqueeze(1), ctx.q]  # [B, L, C] edges out of q_t
        w = torch.softmax(query @ keys.transpose(1, 2) * self.d_head**-0.5 + prior, dim=-1)
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

    The query adds the student's running mean state (steps <= t); the prototypes are parameters
    shared by all students, so no student's own log is ever stored for it.
    """

    params_cls = PrototypeParams
    needs_states = True

    def __init__(self, d_model: int, d_head: int, spec: HeadSpec, num_c: int):
        super().__init__(d_model, d_head, spec, num_c)
        self.prototypes = nn.Parameter(torch.randn(self.p.n_prototypes, d_model) * d_model**-0.5)
        self.w_s = nn.Linear(d_model, d_head, bias=False)
        self.w_k = nn.Linear(d_model, d_head, bias=False)
        self.w_v = nn.Linear(d_model, d_head, bias=False)

    def forward(self, query: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        steps = torch.arange(1, query.shape[1] + 1, device=query.device, dtype=query.dtype)
        running = ctx.states.cumsum(1) / steps.view(1, -1, 1)  # mean state over steps <= t
        q = query + self.w_s(running)
        scores = q @ self.w_k(self.prototypes).T * self.d_head**-0.5  # [B, L, P]
        w = torch.softmax(scores, dim=-1)
        ctx.record(self.spec.name, w)
        return w @ self.w_v(self.prototypes)


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

    def __init__(self, d_model: int, d_head: int, spec: HeadSpec, num_c: int):
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


def head_class(spec: HeadSpec, where: str = "") -> type[BaseSimilarityHead]:
    """Registry lookup, or the custom class named by `module_path`."""
    if spec.type == "custom":
        if not spec.module_path:
            raise ValueError(
                f"{where}a custom head needs module_path: 'package.module.Class' "
                "(a subclass of BaseSimilarityHead)"
            )
        return import_head_class(spec.module_path, where)
    if spec.type not in SIMILARITY_HEADS:
        raise ValueError(
            f"{where}unknown inter-student head type {spec.type!r}; valid types: "
            f"{', '.join(valid_types())}"
        )
    return SIMILARITY_HEADS[spec.type]


def parse_head_spec(raw: dict, where: str = "", name: str = "") -> HeadSpec:
    """A HeadSpec from one `inter_heads` entry (or a Step 1 cluster/knn config)."""
    where = f"{where}: " if where and not where.endswith(": ") else where
    if not isinstance(raw, dict):
        raise ValueError(f"{where}an inter head must be a mapping, got {raw!r}")
    raw = dict(raw)
    if "type" not in raw:
        raise ValueError(
            f"{where}an inter head needs a 'type'; valid types: {', '.join(valid_types())}"
        )
    spec = HeadSpec(type=str(raw.pop("type")), module_path=raw.pop("module_path", None), name=name)
    cls = head_class(spec, where)
    weight = raw.pop("influence_weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise ValueError(f"{where}influence_weight must be a number, got {weight!r}")
    if weight < 0:
        raise ValueError(
            f"{where}influence_weight must be >= 0 (0 disables the head), got {weight}"
        )
    spec.influence_weight = float(weight)
    temporal = dict(raw.pop("temporal_config", None) or {})
    unknown = sorted(set(temporal) - {"strategy", "decay_factor", "future_weight"})
    if unknown:
        raise ValueError(
            f"{where}unknown temporal_config field(s) {unknown}; valid: "
            "decay_factor, future_weight, strategy"
        )
    spec.strategy = temporal.get("strategy", "position_weighted" if temporal else "content")
    for key in ("decay_factor", "future_weight"):
        value = temporal.get(key, getattr(spec, key))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}temporal_config.{key} must be a number, got {value!r}")
        setattr(spec, key, float(value))
    if spec.strategy not in STRATEGIES:
        raise ValueError(
            f"{where}unknown similarity strategy {spec.strategy!r}; valid: {', '.join(STRATEGIES)}"
        )
    if not 0.0 <= spec.future_weight <= 1.0:
        raise ValueError(f"{where}future_weight must be in [0, 1], got {spec.future_weight}")
    if not 0.0 < spec.decay_factor <= 1.0:
        raise ValueError(f"{where}decay_factor must be in (0, 1], got {spec.decay_factor}")
    if spec.strategy == "position_weighted" and not cls.supports_position_weighting:
        raise ValueError(
            f"{where}head type {spec.type!r} does not support the "
            "position_weighted strategy (cluster and knn do)"
        )
    params = dict(raw.pop("params", None) or {}) if spec.type == "custom" else {}
    if spec.type == "custom" and raw:
        raise ValueError(
            f"{where}unknown field(s) {sorted(raw)} for a custom head; its own "
            "settings go under 'params'"
        )
    params.update(raw)
    for alias, target in ALIASES.items():
        if alias in params:
            if target in params:
                raise ValueError(f"{where}give {target!r} or {alias!r}, not both")
            params[target] = params.pop(alias)
    spec.params = from_dict(cls.params_cls, params, source=where.rstrip(": "))
    return spec


class InterStudentHeads(nn.Module):
    """The inter-student heads of Block 3, each scaled by its influence weight."""

    def __init__(self, specs: list[HeadSpec], d_model: int, d_head: int, num_c: int):
        super().__init__()
        self.heads = nn.ModuleList([head_class(s)(d_model, d_head, s, num_c) for s in specs])

    def __len__(self) -> int:
        return len(self.heads)

    @property
    def uses_states(self) -> bool:
        return any(h.active and h.uses_states for h in self.heads)

    @property
    def bank_heads(self) -> list[BaseSimilarityHead]:
        """Active heads that read a bank."""
        return [h for h in self.heads if h.active and h.bank_cls is not None]

    def forward(self, queries: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        """queries [B, h, L, Dh] (one slice of W_Q hq per head) -> [B, h, L, Dh]."""
        outs = []
        for i, head in enumerate(self.heads):
            if not head.active:
                outs.append(torch.zeros_like(queries[:, i]))
                continue
            head.check_ready()
            outs.append(head(queries[:, i], ctx) * head.spec.influence_weight)
        return torch.stack(outs, dim=1)
