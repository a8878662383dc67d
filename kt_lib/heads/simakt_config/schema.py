"""SimAKT's similarity configuration schema (seed 000): the typed dataclasses, with their defaults.

`SimilarityConfig` (Block 3's layout) holds `HeadConfig`s (type, influence weight,
`TemporalConfig`, the head class's own parameter dataclass), a `MemoryConfig` (how banks are
built) and an optional `InfluenceRule` (Example 4: weights chosen from the training set's size).
Head classes are found through the registry in `kt_lib.heads.inter.base` (never imported
from the head modules); parsing lives in `kt_lib.heads.simakt_config.parse`, loading in
`kt_lib.heads.simakt_config`.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

from ...config import from_dict, require
from ...memory.banks import KMEANS_N_INIT
from ...memory.encoders import ENCODERS
from ...memory.temporal import TEMPORAL_STRATEGIES
from ..inter.base import (
    CONTENT,
    SIMILARITY_HEADS,
    TEMPORAL_DEFAULTS,
    HybridParams,
    head_class_of,
)

TEMPORAL_SETTINGS = {"decay_factor", "future_weight", "window_sizes"}  # with_settings knobs


@dataclass
class TemporalConfig:
    """How a head aligns the current student (steps <= t) with complete historical trajectories
    (seed 000, "Temporal Mismatch Handling"; the seed's temporal_config)."""

    strategy: str = "position_weighted"  # content or a TEMPORAL_STRATEGIES name (seed: strategy 2)
    decay_factor: float = TEMPORAL_DEFAULTS["decay_factor"]  # decay per step of distance, (0, 1]
    future_weight: float = TEMPORAL_DEFAULTS["future_weight"]  # memory's later steps, [0, 1]
    window_sizes: list[int] = field(default_factory=lambda: list(TEMPORAL_DEFAULTS["window_sizes"]))

    def validate(self) -> None:
        valid = [CONTENT, *TEMPORAL_STRATEGIES.names()]
        require(
            self.strategy in valid,
            f"unknown similarity strategy {self.strategy!r}; valid: {', '.join(valid)}",
        )
        require(
            0.0 < self.decay_factor <= 1.0,
            f"decay_factor must be in (0, 1], got {self.decay_factor}",
        )
        require(
            0.0 <= self.future_weight <= 1.0,
            f"future_weight must be in [0, 1], got {self.future_weight}",
        )
        if self.strategy != CONTENT:
            TEMPORAL_STRATEGIES[self.strategy].check(self)


def content_temporal() -> TemporalConfig:
    """A head without temporal_config scores its slots by content."""
    return TemporalConfig(strategy=CONTENT)


@dataclass
class HeadConfig:
    """One inter-student head (a Step 2 `inter_heads` entry, or built from a Step 1 section)."""

    type: str  # SIMILARITY_HEADS name or "custom"
    influence_weight: float = 1.0  # output scale; 0 turns the head off (zeros, no bank)
    temporal: TemporalConfig = field(default_factory=content_temporal)
    params: Any = None  # the head class's parameter dataclass (ClusterParams, KNNParams, ...)
    module_path: str | None = None  # custom heads: dotted path of the class
    name: str = ""  # label in attention maps and bank tables (cluster, knn_2, hybrid.cluster)

    # read-only shortcuts into `temporal` (older callers read them on the head)
    @property
    def strategy(self) -> str:
        return self.temporal.strategy

    @property
    def decay_factor(self) -> float:
        return self.temporal.decay_factor

    @property
    def future_weight(self) -> float:
        return self.temporal.future_weight

    def to_mapping(self, with_weight: bool = True, complete: bool = False) -> dict:
        """The Step 2 `inter_heads` entry that parses back to this head: only the settings the
        head reads under its strategy (`complete`: every field, as bank signatures record)."""
        out: dict[str, Any] = {"type": self.type}
        if self.module_path:
            out["module_path"] = self.module_path
        if with_weight:
            out["influence_weight"] = self.influence_weight
        temporal = asdict(self.temporal)
        params = {
            f.name: _plain(getattr(self.params, f.name), complete)
            for f in dataclasses.fields(self.params)
        }
        cls = _head_class(self)
        if not complete and cls is not None:
            reads = cls.temporal_reads(self.strategy) | {"strategy"}
            temporal = {k: v for k, v in temporal.items() if k in reads}
            params = {k: v for k, v in params.items() if cls.reads_param(k, self.strategy)}
        out["temporal_config"] = temporal
        if self.type == "custom":
            out["params"] = params
        else:
            out.update(params)
        return out

    def walk(self) -> list[HeadConfig]:
        """This head and, for a hybrid head, its modules (depth first)."""
        parts = self.params.modules if isinstance(self.params, HybridParams) else []
        return [self, *(h for part in parts for h in part.walk())]


def _plain(value, complete: bool):
    if isinstance(value, HeadConfig):
        return value.to_mapping(with_weight=False, complete=complete)
    if isinstance(value, list):
        return [_plain(v, complete) for v in value]
    return value


@dataclass
class MemoryConfig:
    """How the memory banks of training students are built (one bank per cross-fitting fold)."""

    encoder: str = "heuristic"  # trajectory encoder: heuristic (seed) | block2 (model's Block 2)
    update_frequency: int = 0  # rebuild banks every n epochs (block2 encoder only; 0: once)
    folds: int = 2  # cross-fitting folds (>= 2): training students read the bank without theirs
    seed: int = 0  # seeds folds, KMeans, bank sampling and the heuristic encoder
    kmeans_n_init: int = KMEANS_N_INIT  # KMeans restarts (the seed's n_init=10)
    min_length: int = 5  # shorter logs stay out of the banks (the seed skips < 5 interactions)
    batch_size: int = 128  # students per encoding batch
    bank_dir: str = ""  # prebuilt banks (kt memory build), loaded by dataset name

    def validate(self) -> None:
        require(
            self.encoder in ENCODERS,
            f"unknown encoder {self.encoder!r}; valid: {', '.join(ENCODERS.names())}",
        )
        require(
            self.update_frequency >= 0,
            f"update_frequency must be >= 0, got {self.update_frequency}",
        )
        require(
            self.update_frequency == 0 or self.encoder == "block2",
            f"update_frequency={self.update_frequency} has no effect with the {self.encoder} "
            "encoder (its banks do not depend on the model's weights, so a rebuild gives the same "
            "banks): set encoder: block2 to rebuild the banks during training, or drop "
            "update_frequency",
        )
        require(self.folds >= 2, f"folds must be >= 2 (cross-fitting), got {self.folds}")
        require(self.kmeans_n_init >= 1, f"kmeans_n_init must be >= 1, got {self.kmeans_n_init}")
        require(self.min_length >= 1, f"min_length must be >= 1, got {self.min_length}")
        require(self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}")
        require(
            not (self.bank_dir and self.encoder != "heuristic"),
            f"bank_dir needs the heuristic encoder: {self.encoder} banks depend on the model's "
            "weights, so prepare(train) builds them",
        )


@dataclass
class InfluenceRule:
    """Seed 000, Example 4: influence weights chosen from the size of the training set."""

    large: dict[str, float] = field(default_factory=dict)  # head name or type -> weight
    small: dict[str, float] = field(default_factory=dict)  # head name or type -> weight
    min_large_students: int = 1000  # training students from which a set is large (seed: 1000+)

    def validate(self) -> None:
        require(
            self.min_large_students >= 1,
            f"min_large_students must be >= 1, got {self.min_large_students}",
        )
        for size in ("large", "small"):
            for key, w in getattr(self, size).items():
                require(
                    isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0,
                    f"{size}.{key}: influence weight must be a number >= 0, got {w!r}",
                )

    def weights_for(self, heads: list[HeadConfig], n_students: int) -> list[float]:
        """Each head's weight for a training set of n_students (by name, else by type)."""
        table = self.large if n_students >= self.min_large_students else self.small
        return [float(table.get(h.name, table.get(h.type, h.influence_weight))) for h in heads]


@dataclass
class SimilarityConfig:
    """Block 3's inter-student layout (Step 1 and Step 2 alike): intra heads + typed heads."""

    approach: str = "none"  # "none", a Step 1 approach, or "modular" (Step 2)
    heads: list[HeadConfig] = field(default_factory=list)
    intra_heads: int | None = None  # None: whatever n_heads leaves
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    influence_rule: InfluenceRule | None = None
    lr_scaling: str = "none"  # inter heads' learning rate: none | inverse_influence (lr / weight)
    description: str = ""
    source: str = ""  # where it was read from (error messages)
    total_heads: int | None = None  # the seed's total_heads: must equal the model's n_heads

    def n_intra(self, n_heads: int) -> int:
        """Intra heads for a model with n_heads heads (head-count mismatch is an error)."""
        intra = n_heads - len(self.heads) if self.intra_heads is None else self.intra_heads
        where = f"{self.source}: " if self.source else ""
        if self.total_heads is not None and self.total_heads != n_heads:
            raise ValueError(
                f"{where}total_heads={self.total_heads} but the model has n_heads={n_heads}: "
                f"set the model's n_heads to {self.total_heads}, or total_heads to {n_heads} "
                "(or drop total_heads)"
            )
        if intra + len(self.heads) != n_heads:
            raise ValueError(
                f"{where}head-count mismatch: {intra} intra + {len(self.heads)} "
                f"inter heads != n_heads={n_heads}"
            )
        if intra < 1:
            raise ValueError(
                f"{where}Block 3 needs at least one intra-student head, got "
                f"{intra} (n_heads={n_heads}, {len(self.heads)} inter heads)"
            )
        return intra

    def to_mapping(self, complete: bool = False) -> dict:
        """The Step 2 mapping that parses back to this config (no pickle, JSON-safe); each head
        writes the settings it reads (`complete`: every field, see `bank_signature`)."""
        out: dict[str, Any] = {"approach": self.approach}
        if self.intra_heads is not None:
            out["intra_heads"] = self.intra_heads
        if self.total_heads is not None:
            out["total_heads"] = self.total_heads
        out["inter_heads"] = [h.to_mapping(complete=complete) for h in self.heads]
        out["memory"] = asdict(self.memory)
        if self.influence_rule is not None:
            out["influence_rule"] = asdict(self.influence_rule)
        out["lr_scaling"] = self.lr_scaling
        out["description"] = self.description
        return out

    def bank_signature(self) -> dict:
        """What the banks depend on (compared when prebuilt banks are loaded): every field, so
        bank files written before `to_mapping` left out unread settings still match."""
        out = self.to_mapping(complete=True)
        out.pop("total_heads", None)
        for key in ("description", "lr_scaling"):
            out.pop(key)
        for key in ("bank_dir", "batch_size", "update_frequency"):
            out["memory"].pop(key)
        return out

    def inter_off(self) -> SimilarityConfig:
        """This layout with its inter-student heads off: the one meaning of "inter heads off".

        Every inter head gets influence weight 0 (and no influence rule), so it outputs zeros,
        builds no bank and nothing of it reaches the output: Block 3 keeps the same intra heads
        (same count, same width d / n_heads) and W_O reads zeros where the inter heads were.
        The heads are removed, not replaced by intra heads: the result differs from
        DTransformer with n_heads intra heads (`approach: none`) unless there were none.
        The matched baseline of a SimAKT variant is its `inter_off()` (for the 6 + 2 presets,
        the `no_inter_student` preset).
        """
        return self.with_settings(inter_weight=0.0) if self.heads else copy.deepcopy(self)

    def influence(self, head_type: str) -> float:
        """Influence weight of the first head of `head_type` (0.0 when there is none)."""
        return next((h.influence_weight for h in self.heads if h.type == head_type), 0.0)

    def with_settings(self, **changes) -> SimilarityConfig:
        """A validated copy with ablation settings changed (None values are left as they are).

        A head parameter (n_clusters, memory_size, k_neighbors, temperature, sampling, set_size,
        ...) changes on every head (or hybrid module) that reads it; decay_factor, future_weight
        and window_sizes on every head whose strategy reads them (position_weighted and
        completion: decay_factor, future_weight; multiscale: window_sizes; content and
        prefix_aligned: none); a MemoryConfig field (kmeans_n_init, folds, min_length, ...) on
        the banks; `<type>_weight` is the influence weight of the heads of that type,
        `inter_weight` of every inter head (`inter_weight=0`: inter heads off, see `inter_off`).
        A setting that would act on nothing is refused: no head reads it (a metric under a
        temporal strategy, decay_factor on content heads, knn_weight without a KNN head), or
        every head that reads it is off (influence weight 0, after this call's weights); a
        MemoryConfig field when every head is off (no bank is built).
        """
        changes = {k: v for k, v in changes.items() if v is not None}
        valid = self._setting_names()
        unknown = sorted(set(changes) - valid)
        if unknown:
            raise ValueError(f"unknown SimAKT setting(s) {unknown}; valid: {sorted(valid)}")
        out = copy.deepcopy(self)
        where = f"{self.source}: " if self.source else ""
        memory = {k: v for k, v in changes.items() if k in _field_names(MemoryConfig)}
        if memory:
            out.memory = from_dict(MemoryConfig, {**asdict(out.memory), **memory}, f"{where}memory")
        weights = {k: v for k, v in changes.items() if k in self.weight_names()}
        out._set_weights(weights, where)
        if memory and not out._builds_banks():
            raise ValueError(
                f"{where}memory setting(s) {sorted(memory)} act on nothing: every inter-student "
                "head of this layout is off, so it builds no bank; turn a head on first "
                f"({', '.join(sorted(self.weight_names()))})"
            )
        per_head: dict[int, tuple[HeadConfig, dict]] = {}
        for name, value in changes.items():
            if name not in memory and name not in weights:
                for h in out._readers(name, value, where):
                    per_head.setdefault(id(h), (h, {}))[1][name] = value
        for h, own in per_head.values():  # one validation per head: k_neighbors <= memory_size
            at = f"{where}{h.name}"
            temporal = {k: v for k, v in own.items() if k in TEMPORAL_SETTINGS}
            params = {k: v for k, v in own.items() if k not in TEMPORAL_SETTINGS}
            if temporal:
                merged = {**asdict(h.temporal), **temporal}
                h.temporal = from_dict(TemporalConfig, merged, f"{at}: temporal_config")
                _head_class(h).check_temporal(h.temporal, f"{at}: ")
            if params:
                h.params = from_dict(type(h.params), {**_shallow(h.params), **params}, at)
        return out

    def shrink(self, **sizes) -> SimilarityConfig:
        """Bank sizes for a small training set (n_clusters, memory_size, k_neighbors,
        kmeans_n_init; None: left as is) through `with_settings`, skipping a size that no head
        that is on reads (an off head builds no bank), so one size list fits every layout of a
        grid. To vary a size use `with_settings`, which refuses one that acts on nothing."""
        memory = _field_names(MemoryConfig)
        acting = {
            k: v
            for k, v in sizes.items()
            if v is not None
            and (
                self._builds_banks()
                if k in memory
                else any(self._on(t) for t, _ in self._takers(k))
            )
        }
        return self.with_settings(**acting)

    def takes(self, name: str) -> bool:
        """Whether setting `name` acts on this layout: a bank setting where a head is on, the
        influence weight of a head it has, or a setting read by a head that is on (see
        `with_settings`)."""
        if name in _field_names(MemoryConfig):
            return self._builds_banks()
        if name == "inter_weight":
            return bool(self.heads)
        if name in self.weight_names():
            return any(f"{h.type}_weight" == name for h in self.heads)
        return any(self._on(top) for top, _ in self._takers(name))

    def _builds_banks(self) -> bool:
        """Some inter-student head is on, so the layout builds memory banks."""
        return any(self._on(h) for h in self.heads)

    def _on(self, head: HeadConfig) -> bool:
        """A top-level head is on: its weight, or one an influence rule may give it, is > 0."""
        if head.influence_weight > 0:
            return True
        rule = self.influence_rule
        if rule is None:
            return False
        return any(rule.weights_for([head], n)[0] > 0 for n in (0, rule.min_large_students))

    def _takers(self, name: str) -> list[tuple[HeadConfig, HeadConfig]]:
        """(top-level head, head or hybrid module) for every head that reads setting `name`."""
        return [(top, h) for top in self.heads for h in top.walk() if _reads(h, name)]

    def _set_weights(self, weights: dict, where: str) -> None:
        if "inter_weight" in weights:  # one fixed weight for every head replaces a size rule
            self.influence_rule = None
        for key, weight in weights.items():
            heads = [h for h in self.heads if key in ("inter_weight", f"{h.type}_weight")]
            if not heads:
                have = ", ".join(h.name for h in self.heads) or "none"
                raise ValueError(
                    f"{where}{key}={weight!r} has no effect: this layout has no such head "
                    f"(inter heads: {have})"
                )
            require(
                isinstance(weight, (int, float)) and not isinstance(weight, bool) and weight >= 0,
                f"{key} must be a number >= 0, got {weight!r}",
            )
        for head in self.heads:
            weight = weights.get(f"{head.type}_weight", weights.get("inter_weight"))
            if weight is not None:
                head.influence_weight = float(weight)

    def _readers(self, name: str, value, where: str) -> list[HeadConfig]:
        """The heads that read setting `name`; refused when none does, or every one is off."""
        takers = self._takers(name)
        if not takers:
            have = ", ".join(f"{h.name} ({h.strategy})" for h in self._all_heads()) or "none"
            raise ValueError(
                f"{where}{name}={value!r} has no effect: no head of this layout reads it (heads "
                f"and strategies: {have}); a metric acts under the content strategy only, "
                "decay_factor and future_weight under position_weighted and completion, "
                "window_sizes under multiscale. Drop it, or change a head's temporal_config"
            )
        if not any(self._on(top) for top, _ in takers):
            off = sorted({top.type for top, _ in takers})
            raise ValueError(
                f"{where}{name}={value!r} acts on nothing: every head that reads it "
                f"({', '.join(sorted({top.name for top, _ in takers}))}) is off (influence "
                f"weight 0, so it builds no bank and outputs zeros). Drop it, or turn the head "
                f"on in the same call ({', '.join(f'{t}_weight=...' for t in off)})"
            )
        return [h for _, h in takers]

    def weight_names(self) -> set[str]:
        """The influence-weight settings: inter_weight and <type>_weight."""
        types = {*SIMILARITY_HEADS, *(h.type for h in self.heads)}
        return {"inter_weight", *(f"{t}_weight" for t in types)}

    def _setting_names(self) -> set[str]:
        classes = {*SIMILARITY_HEADS.values(), *(_head_class(h) for h in self._all_heads())}
        params = {n for c in classes if c is not None for n in _field_names(c.params_cls)}
        return (
            (params - _field_names(HybridParams))
            | _field_names(MemoryConfig)
            | TEMPORAL_SETTINGS
            | self.weight_names()
        )

    def _all_heads(self) -> list[HeadConfig]:
        return [h for head in self.heads for h in head.walk()]


def _field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()


def _shallow(params) -> dict:
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}


def _reads(h: HeadConfig, name: str) -> bool:
    """Whether head (or hybrid module) `h` reads setting `name` under its strategy."""
    cls = _head_class(h)
    if cls is None:  # a custom head whose module is gone: nothing can be checked
        return False
    if name in TEMPORAL_SETTINGS:
        return name in cls.temporal_reads(h.strategy)
    params = _field_names(type(h.params))
    return name in params - _field_names(HybridParams) and cls.reads_param(name, h.strategy)


def _head_class(h: HeadConfig):
    try:
        return head_class_of(h.type, h.module_path)
    except ValueError:
        return None
