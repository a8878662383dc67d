"""Inter-student similarity heads for SimAKT's Block 3 (seed 000, Step 2): the public face.

# B batch, L steps, D model dim, Dh head dim, F bank folds, M memory slots, S memory steps,
# C concepts, P prototypes
A head receives its slice of Block 3's query projection (Q = W_Q hq) [B, L, Dh] and a
`HeadContext`, and returns [B, L, Dh] (`forward`), or that and its attention maps (`attend`);
Block 3 scales it by the head's influence weight (0: the head is off and outputs zeros),
concatenates it after the intra-student heads, then applies W_O. Data go one way: SimAKT takes
Block 3's queries, `InterStudentHeads` returns the outputs and the maps, Block 3 takes the
outputs. Heads are configured by `kt_lib.heads.simakt_config.schema.HeadConfig` (parsed by
simakt_config.parse). The interface and registries live in inter/base.py, the cluster and KNN heads
in inter/trajectory.py; this module holds the graph, attention, hybrid and DeepSet heads and
`InterStudentHeads`, and re-exports the rest.

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
  complete trajectories by a temporal strategy (`kt_lib.memory.temporal.TEMPORAL_STRATEGIES`:
  prefix_aligned, position_weighted, multiscale, completion), every (row, step, slot) at once.
- graph and attention heads accept `position_weighted`: a recency-weighted (decay_factor) mix
  over the current student's own past instead of the current step alone; the graph head adds
  future_weight x the two-step transitions of other students (their later practice).

Causality: a head's output at step t is read by Block 4 only at steps > t, so it may use the
current student up to and including t (states[:, :t+1], the query at t, q_t) and nothing later.
Banks hold other students only: cross-fitted folds, see `kt_lib.memory.banks`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ...config import from_dict, require
from ...memory.banks import GraphBank, KNNBank
from ...memory.temporal import TEMPORAL_STRATEGIES, decayed_mean_weights
from ..simakt_config.parse import parse_head
from ..simakt_config.schema import HeadConfig
from .base import (
    CONTENT,
    DESIGN_MODULE_PATHS,
    METRICS,
    SIMILARITY_HEADS,
    BankBuild,
    BaseSimilarityHead,
    HeadContext,
    HybridParams,
    NoParams,
    head_class,
    head_class_of,
    import_head_class,
    valid_types,
)
from .trajectory import ClusterHead, ClusterParams, KNNHead, KNNParams

__all__ = [
    "METRICS",
    "DESIGN_MODULE_PATHS",
    "SIMILARITY_HEADS",
    "BankBuild",
    "BaseSimilarityHead",
    "ClusterHead",
    "ClusterParams",
    "CrossStudentAttentionHead",
    "DeepSetSimilarity",
    "GraphHead",
    "HeadContext",
    "HybridHead",
    "HybridParams",
    "InterStudentHeads",
    "KNNHead",
    "KNNParams",
    "NoParams",
    "head_class",
    "head_class_of",
    "import_head_class",
    "valid_types",
]


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

    def attend(self, query: torch.Tensor, ctx: HeadContext):
        nodes = self.node.weight + self.stats_proj(self.node_stats)  # [F, C, D]
        keys = self.w_k(nodes)[ctx.fold]  # [B, C, Dh]
        values = self.w_v(nodes)[ctx.fold]
        scores = query @ keys.transpose(1, 2) * self.d_head**-0.5 + self.prior(ctx)
        w = torch.softmax(scores, dim=-1)
        return w @ values, self.maps(ctx, w)


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
    temporal_defaults = {"future_weight": 0.0}  # prototypes have no later steps to weigh

    def __init__(self, d_model: int, d_head: int, spec: HeadConfig, num_c: int):
        super().__init__(d_model, d_head, spec, num_c)
        self.prototypes = nn.Parameter(torch.randn(self.p.n_prototypes, d_model) * d_model**-0.5)
        self.w_s = nn.Linear(d_model, d_head, bias=False)
        self.w_k = nn.Linear(d_model, d_head, bias=False)
        self.w_v = nn.Linear(d_model, d_head, bias=False)

    @classmethod
    def temporal_reads(cls, strategy: str) -> frozenset[str]:
        """Under position_weighted the recency decay alone: there are no later steps to weigh
        (so a search or grid over future_weight skips this head)."""
        return super().temporal_reads(strategy) - {"future_weight"}

    @classmethod
    def check_temporal(cls, temporal, where: str) -> None:
        if temporal.strategy != CONTENT and temporal.future_weight != 0:
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

    def attend(self, query: torch.Tensor, ctx: HeadContext):
        q = query + self.w_s(self.running_state(ctx.states))
        scores = q @ self.w_k(self.prototypes).T * self.d_head**-0.5  # [B, L, P]
        w = torch.softmax(scores, dim=-1)
        return w @ self.w_v(self.prototypes), self.maps(ctx, w)


# -- hybrid ------------------------------------------------------------------------------------


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
    def temporal_reads(cls, strategy: str) -> frozenset[str]:
        return frozenset()  # its temporal_config is handed to the modules, which read it

    @classmethod
    def check_temporal_fields(cls, given: dict, strategy: str, where: str) -> None:
        """Each module that inherits the hybrid head's temporal_config checks it (parse_params)."""

    @classmethod
    def parse_params(cls, raw: dict, where: str, temporal: dict | None) -> HybridParams:
        raw = dict(raw)
        modules = raw.pop("modules", None)
        if not isinstance(modules, list) or not modules:
            raise ValueError(f"{where}: a hybrid head needs 'modules', a non-empty list of heads")
        own = [isinstance(m, dict) and "temporal_config" in m for m in modules]
        if temporal and set(temporal) - {"strategy"} and all(own):
            raise ValueError(
                f"{where}: the hybrid head's temporal_config reaches no module (each sets its "
                "own): remove it, or remove the modules' own temporal_config"
            )
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

    def attend(self, query: torch.Tensor, ctx: HeadContext):
        w = torch.softmax(self.mix, dim=0)
        out, maps = 0, {}
        for j, part in enumerate(self.parts):
            y, m = part.attend(query, ctx)
            out, maps = out + w[j] * y, {**maps, **m}
        return out, maps


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
    """Example custom head (`module_path: kt_lib.heads.inter.DeepSetSimilarity`).

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

    def forward(
        self, queries: torch.Tensor, ctx: HeadContext
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """queries [B, h, L, Dh] (one slice of W_Q hq per head) -> [B, h, L, Dh], and with
        `ctx.need_weights` each head's maps as {"block3.<name>": [B, L, M]}."""
        outs, maps = [], {}
        for i, head in enumerate(self.heads):
            if not head.active:
                outs.append(torch.zeros_like(queries[:, i]))
                continue
            head.check_ready()
            y, m = head.attend(queries[:, i], ctx)
            outs.append(y * head.weight)
            maps.update({f"block3.{name}": w for name, w in m.items()})
        return torch.stack(outs, dim=1), maps
