"""The inter-student head interface (seed 000, Step 2): registries, context, base class, lookup.

# B batch, L steps, D model dim, Dh head dim, F bank folds, M memory slots
A head receives its slice of Block 3's query projection (Q = W_Q hq) [B, L, Dh] and a
`HeadContext`, and returns [B, L, Dh]; Block 3 scales it by the head's influence weight (0: the
head is off and outputs zeros), concatenates it after the intra-student heads, then applies W_O.
Head types register in `SIMILARITY_HEADS` (the built-in ones in `kt_lib.heads.inter` and
`kt_lib.heads.inter.trajectory`, imported by the `kt_lib.heads` package); `custom` loads
`module_path`, a dotted path to a `BaseSimilarityHead` subclass. The configuration schema
(`kt_lib.heads.simakt_config.schema`) looks classes up here, so it never imports the head modules.
Content metrics (`METRICS`: cosine, dot, euclidean, learned) score a query against slot keys.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from ...config import from_dict, require
from ...memory.banks import Bank, KNNBank, StateSource
from ...memory.temporal import TEMPORAL_STRATEGIES, build_strategy
from ...registry import Registry
from ...seed_warnings import SeedSettingWarning, warn_once


class HeadSpec(Protocol):
    """What a head reads of its configuration (`kt_lib.heads.simakt_config.schema.HeadConfig`, which
    imports this module: the schema finds head classes here, heads never import the schema)."""

    type: str
    influence_weight: float
    temporal: Any
    params: Any
    module_path: str | None
    name: str


SIMILARITY_HEADS: Registry = Registry("inter-student head")
# custom classes of another interface -> the head class that runs them, or None (seed 000's
# BaseSimilarityModule: kt_lib.heads.inter.seed_adapter registers its adapter here)
CLASS_ADAPTERS: list[Callable[[Any], type | None]] = []
METRICS: Registry = Registry("similarity metric")
CONTENT = "content"  # strategy name: score the query against projected keys
# seed 000's temporal values (its examples and classes: PositionWeightedSimilarity(decay_factor=
# 0.95, future_weight=0.3)): TemporalConfig's defaults
TEMPORAL_DEFAULTS: dict[str, Any] = {
    "decay_factor": 0.95,
    "future_weight": 0.3,
    "window_sizes": [10, 20, 50],
}
# seed 000 names custom modules that do not exist; the workbook ships the same ideas here
DESIGN_MODULE_PATHS = {
    "research.trajectory_similarity.DeepSetSimilarity": "kt_lib.heads.inter.DeepSetSimilarity"
}
# modules of the workbook that moved: configs and checkpoints written before still name them
MOVED_MODULES = {
    "kt_lib.heads.similarity_trajectory.": "kt_lib.heads.inter.",
    "kt_lib.heads.similarity_base.": "kt_lib.heads.inter.",
    "kt_lib.heads.similarity.": "kt_lib.heads.inter.",
}


def current_module_path(path: str) -> str:
    """A custom head's module_path as the workbook names it today: seed 000's names for the
    ideas the workbook ships, and the workbook's own moved modules."""
    for old, new in MOVED_MODULES.items():
        if path.startswith(old):
            return new + path[len(old) :]
    return DESIGN_MODULE_PATHS.get(path, path)


@dataclass
class HeadContext:
    """What the inter-student heads read besides their query (current students only)."""

    hq: torch.Tensor  # [B, L, D] Block 1 output
    hs: torch.Tensor  # [B, L, D] Block 2 output
    states: torch.Tensor | None  # [B, L, D] trajectory-encoder states (steps <= t at row t)
    q: torch.Tensor  # [B, L] concept ids
    fold: torch.Tensor  # [B] bank fold each row reads
    uid: torch.Tensor | None  # [B] student ids
    need_weights: bool = False  # heads return their attention maps (`attend`)
    start: torch.Tensor | None = None  # [B] step of its log at which each window starts (0)
    span: int | None = None  # bank positions a window is compared over (the model's max_len)


@dataclass
class BankBuild:
    """Inputs of `build_bank` for one fold."""

    members: StateSource  # the training students of this bank (other folds), encoded
    seed: int  # MemoryConfig.seed
    kmeans_n_init: int  # MemoryConfig.kmeans_n_init


def refuse_unread(key: str, value, seed_value, strategy: str, why: str, fix: str, where: str):
    """A setting that has no effect under `strategy`: the seed's own value warns once
    (SeedSettingWarning), any other is refused with why and what to do (`fix`)."""
    msg = f"{where}{key}={value!r} has no effect under the {strategy} strategy: {why}"
    if value == seed_value:
        warn_once(f"{msg} (the seed's value; ignored)", SeedSettingWarning, 5)
        return
    raise ValueError(f"{msg}; {fix}")


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
    available); others list the strategies they implement in `temporal_strategies`. A setting a
    head does not read under its strategy (`temporal_reads`, `reads_param`) is refused when
    given, never written by `HeadConfig.to_mapping`, and not changed by `with_settings`.
    """

    params_cls: ClassVar[type] = NoParams
    bank_cls: ClassVar[type[Bank] | None] = None  # None: the head reads no bank
    needs_states: ClassVar[bool] = False  # reads ctx.states whatever its strategy
    reads_trajectories: ClassVar[bool] = False  # scores slots by a temporal strategy
    temporal_strategies: ClassVar[tuple[str, ...]] = (CONTENT,)
    # parameters read under the content strategy only -> the value seed 000's example gives
    content_params: ClassVar[dict[str, Any]] = {}
    # temporal_config values this head type takes where a config omits them (else TEMPORAL_DEFAULTS)
    temporal_defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, d_model: int, d_head: int, spec: HeadSpec, num_c: int):
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

    @classmethod
    def temporal_reads(cls, strategy: str) -> frozenset[str]:
        """The temporal_config settings (decay_factor, future_weight, window_sizes) the head reads
        under `strategy`: the registered strategy's `reads`; none under content."""
        if strategy == CONTENT or strategy not in TEMPORAL_STRATEGIES:
            return frozenset()
        return TEMPORAL_STRATEGIES[strategy].reads

    @classmethod
    def reads_param(cls, name: str, strategy: str) -> bool:
        """Whether parameter `name` acts under `strategy` (`content_params`: content only)."""
        return strategy == CONTENT or name not in cls.content_params

    @classmethod
    def check_temporal_fields(cls, given: dict, strategy: str, where: str) -> None:
        """A temporal_config field the head does not read under `strategy` (e.g. decay_factor
        under content or prefix_aligned, window_sizes outside multiscale) is refused; the seed's
        own value of it warns once (SeedSettingWarning)."""
        reads = cls.temporal_reads(strategy)
        for key in sorted(set(given) - reads - {"strategy"}):
            readers = [s for s in cls.supported_strategies() if key in cls.temporal_reads(s)]
            why = f"it reads {', '.join(sorted(reads))}" if reads else "it reads none of them"
            fix = f"remove {key}" + (
                f", or pick a strategy that reads it ({', '.join(readers)})" if readers else ""
            )
            refuse_unread(key, given[key], TEMPORAL_DEFAULTS.get(key), strategy, why, fix, where)

    @classmethod
    def check_content_params(cls, given: dict, strategy: str, where: str) -> None:
        """A `content_params` setting (a metric) acts under the content strategy only. Under a
        temporal strategy the value seed 000's example gives (the default) warns once
        (SeedSettingWarning; `HeadConfig.to_mapping` never writes it there); any other value
        is refused."""
        if strategy == CONTENT:
            return
        for key, seed_value in cls.content_params.items():
            if key in given:
                refuse_unread(
                    key,
                    given[key],
                    seed_value,
                    strategy,
                    "the head scores its slots by comparing trajectories, not by a metric",
                    f"remove {key}, or set temporal_config: {{strategy: content}} to score "
                    f"slots by {key}",
                    where,
                )

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
        for b in banks:
            _check_positions(b, self.spec.name)
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

    def _padded_steps(self, name: str, tensors: list[torch.Tensor], fill=0) -> None:
        """Register [F, M, S, ...] from per-fold [M_f, S_f, ...] (folds' longest logs differ)."""
        S = max(t.shape[1] for t in tensors)
        wide = [
            torch.cat([t, t.new_full((t.shape[0], S - t.shape[1], *t.shape[2:]), fill)], 1)
            for t in tensors
        ]
        self._padded(name, wide, fill)

    def trajectory_similarity(
        self, ctx: HeadContext, sequences: torch.Tensor, valid: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Temporal-strategy similarity [B, L, M] of each row to the slots of its own fold, and
        which slots a row may attend to [B, M].

        sequences [F, M, S, D] and valid [F, M, S] hold the slots' states at every step of
        their logs; a row whose window starts at step a of its log is compared with positions
        a .. a + span - 1 (span: the model's max_len), so its step t (step a + t of the log)
        meets the slots' step a + t. A slot without step a (a log that ended before the window
        starts) has nothing to compare there: it is left out of the row's attention rather than
        attended with similarity 0 (a row left with no slot reads nothing from the head).
        """
        if ctx.span is None:
            raise ValueError("HeadContext.span (the model's max_len) is needed to read bank steps")
        states, span = ctx.states, ctx.span
        B, L, _ = states.shape
        S = sequences.shape[2]
        start = torch.zeros_like(ctx.fold) if ctx.start is None else ctx.start.to(ctx.fold.device)
        out = states.new_zeros(B, L, sequences.shape[1])
        readable = torch.zeros(B, sequences.shape[1], dtype=torch.bool, device=out.device)
        keys = torch.stack([ctx.fold, start], 1)
        # few groups: the folds (2 by default) times the window starts (multiples of span in
        # training; sliding windows: about one per row); rows of one group are vectorised
        for f, a in keys.unique(dim=0).tolist():
            if a >= S:  # no slot has a step this late
                continue
            rows = ((ctx.fold == f) & (start == a)).nonzero(as_tuple=True)[0]
            mem, ok = sequences[f, :, a : a + span], valid[f, :, a : a + span]
            if mem.shape[1] < span:  # a sliding window past the longest log: absent steps
                mem = F.pad(mem, (0, 0, 0, span - mem.shape[1]))
                ok = F.pad(ok, (0, span - ok.shape[1]), value=False)
            # under autocast the similarity may come back in bfloat16
            out[rows] = self.temporal(states[rows], mem, ok).to(out.dtype)
            readable[rows] = ok[:, 0]
        return out, readable

    def forward(self, query: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        """query [B, L, Dh] -> [B, L, Dh]: a head computes this, or `attend`."""
        return self.attend(query, ctx)[0]

    def attend(
        self, query: torch.Tensor, ctx: HeadContext
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The output and, with `ctx.need_weights`, the head's attention maps by name
        ({name: [B, L, M]} over its slots, detached); a head without maps implements
        `forward` only and returns none."""
        if type(self).forward is BaseSimilarityHead.forward:
            raise NotImplementedError(
                f"{type(self).__name__} implements neither forward nor attend"
            )
        return self(query, ctx), {}

    def maps(self, ctx: HeadContext, w: torch.Tensor) -> dict[str, torch.Tensor]:
        """{this head's name: w detached} when the caller asked for weights, else {}."""
        return {self.spec.name: w.detach()} if ctx.need_weights else {}


def _check_positions(bank: Bank, head: str) -> None:
    """Refuse a bank whose sequences stop before its members' logs do: banks built before
    2026-11-28 kept each member's first max_len steps only (their later windows would read
    nothing), which those of today never do (`kt_lib.memory.encoders`)."""
    seqs, lengths = getattr(bank, "sequences", None), getattr(bank, "lengths", None)
    if seqs is None or lengths is None or not seqs.shape[1] or not len(lengths):
        return
    if seqs.shape[1] < int(lengths.max()):
        raise ValueError(
            f"inter-student head {head!r}: this bank keeps {seqs.shape[1]} steps per sequence but "
            f"its members' logs run to {int(lengths.max())} steps: it was built before bank "
            "sequences kept every step of a log (2026-11-28). Rebuild the banks from the "
            "training students: model.prepare(train), or `kt memory build`"
        )


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


# -- lookup ------------------------------------------------------------------------------------


def valid_types() -> list[str]:
    return sorted([*SIMILARITY_HEADS, "custom"])


def import_head_class(path: str, where: str = "") -> type[BaseSimilarityHead]:
    """The class at dotted `path` (`current_module_path` of it); it must subclass
    BaseSimilarityHead or have seed 000's module interface."""
    module_name, _, cls_name = current_module_path(str(path)).rpartition(".")
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
    if isinstance(obj, type) and issubclass(obj, BaseSimilarityHead):
        if obj is not BaseSimilarityHead:
            return obj
    else:
        adapted = next((a(obj) for a in CLASS_ADAPTERS if a(obj) is not None), None)
        if adapted is not None:
            return adapted
    raise ValueError(
        f"{where}module_path {path!r} is not a subclass of kt_lib.heads."
        "inter.BaseSimilarityHead; custom heads must subclass it, or have seed 000's module "
        "interface (an nn.Module with build_memory_bank, compute_similarity, forward(hq, hs))"
    )


def head_class(spec: HeadSpec, where: str = "") -> type[BaseSimilarityHead]:
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
