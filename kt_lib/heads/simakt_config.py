"""SimAKT's similarity configuration (seed 000): one typed schema, parsed and validated once.

Everything Block 3's inter-student side can be told lives here, with its one default:
`SimilarityConfig` (the layout) holds `HeadConfig`s (type, influence weight, `TemporalConfig`,
the head class's own parameter dataclass), a `MemoryConfig` (how banks are built) and an optional
`InfluenceRule` (Example 4: weights chosen from the training set's size). The model
(`kt_lib.models.simakt`), the ablation grids (`with_settings`) and the notebooks read these
objects; nothing downstream re-reads raw mappings.

Accepted forms (YAML/JSON file, shipped preset name, or mapping), as the seed writes them:
- Step 2: `intra_heads` (optional: n_heads minus the inter heads) + `inter_heads`, a list of
  {type, influence_weight, temporal_config, type-specific fields}; optional `memory`,
  `influence_rule` {large, small, min_large_students}, `lr_scaling`.
- Step 1: `approach` (none | position_weighted_dual | dual_similarity: 1 cluster + 1 KNN head;
  cluster | knn | hybrid: `inter_heads` 0-3 heads of that type, a hybrid head mixing a cluster
  and a KNN module) + `cluster_config` / `knn_config` / `temporal_config` (on every head), and
  `large_dataset` / `small_dataset` (Example 4). Without `approach`: dual if a head section is
  given, else none. `inter_heads: 0` (or approach none) builds no inter head: DTransformer.
- `{base: <preset or file>, <setting>: value, ...}`: that config with settings changed
  (`SimilarityConfig.with_settings`: n_clusters, memory_size, k_neighbors, <type>_weight, ...),
  e.g. {base: cluster_only, n_clusters: 40} for a dataset too small for 100 clusters.
- Wrappers `similarity_config: {...}` / `step_2_modular_config: {...}` hold one config;
  `similarity_approaches: {name: ...}`, `step_2_configurations: {name: ...}` and bare mappings
  of names to configs hold several: pick one with `name=` or `file.json:name`.
Errors name the file (or "similarity") and the field. Temporal strategies: `content` (no
temporal_config), or a `kt_lib.memory.similarity.TEMPORAL_STRATEGIES` name; a temporal_config
without `strategy` selects the seed's position_weighted.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import from_dict, read_mapping, require
from ..memory.banks import KMEANS_N_INIT
from ..memory.encoders import ENCODERS
from ..memory.similarity import TEMPORAL_STRATEGIES
from .similarity import (
    CONTENT,
    SEED_MODULE_PATHS,
    SIMILARITY_HEADS,
    HybridParams,
    head_class_of,
    valid_types,
)

PRESET_DIR = Path(__file__).resolve().parent.parent / "configs" / "simakt"
DUAL = ("cluster", "knn")
STEP1_APPROACHES = {  # approach -> head types it builds (dual: fixed; others: inter_heads of one)
    "none": (),
    "position_weighted_dual": DUAL,
    "dual_similarity": DUAL,
    "cluster": ("cluster",),
    "knn": ("knn",),
    "hybrid": ("hybrid",),
}
STEP1_MAX_INTER = 3  # the seed's Step 1: inter_heads 0-3
STEP1_KEYS = {
    "approach",
    "description",
    "inter_heads",
    "intra_heads",
    "total_heads",
    "head_allocation",
    "cluster_config",
    "knn_config",
    "temporal_config",
    "memory",
    "large_dataset",
    "small_dataset",
    "large_dataset_min_students",
    "lr_scaling",
}
STEP2_KEYS = {
    "approach",
    "description",
    "intra_heads",
    "inter_heads",
    "total_heads",
    "memory",
    "influence_rule",
    "lr_scaling",
}
WRAPPERS = ("similarity_config", "step_2_modular_config")  # one config inside
COLLECTIONS = ("similarity_approaches", "step_2_configurations")  # several, by name
ALIASES = {"initial_temperature": "temperature"}  # seed 000 spells some fields two ways
LR_SCALINGS = ("none", "inverse_influence")
TEMPORAL_SETTINGS = {"decay_factor", "future_weight", "window_sizes"}  # with_settings knobs


# -- the schema --------------------------------------------------------------------------------


@dataclass
class TemporalConfig:
    """How a head aligns the current student (steps <= t) with complete historical trajectories
    (seed 000, "Temporal Mismatch Handling"; the seed's temporal_config)."""

    strategy: str = "position_weighted"  # content or a TEMPORAL_STRATEGIES name (seed: strategy 2)
    decay_factor: float = 0.95  # weight decay per step of distance, in (0, 1]
    future_weight: float = 0.0  # weight of the memory's later steps, [0, 1] (0: strict causal)
    window_sizes: list[int] = field(default_factory=lambda: [10, 20, 50])  # multiscale windows

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

    def to_mapping(self, with_weight: bool = True) -> dict:
        """The Step 2 `inter_heads` entry that parses back to this head."""
        out: dict[str, Any] = {"type": self.type}
        if self.module_path:
            out["module_path"] = self.module_path
        if with_weight:
            out["influence_weight"] = self.influence_weight
        out["temporal_config"] = asdict(self.temporal)
        params = {
            f.name: _plain(getattr(self.params, f.name)) for f in dataclasses.fields(self.params)
        }
        if self.type == "custom":
            out["params"] = params
        else:
            out.update(params)
        return out

    def walk(self) -> list[HeadConfig]:
        """This head and, for a hybrid head, its modules (depth first)."""
        parts = self.params.modules if isinstance(self.params, HybridParams) else []
        return [self, *(h for part in parts for h in part.walk())]


def _plain(value):
    if isinstance(value, HeadConfig):
        return value.to_mapping(with_weight=False)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclass
class MemoryConfig:
    """How the memory banks of training students are built (one bank per cross-fitting fold)."""

    encoder: str = "heuristic"  # trajectory encoder: heuristic (seed) | block2 (model's Block 2)
    update_frequency: int = 0  # rebuild banks every n epochs (block2 encoder; 0: once, in prepare)
    folds: int = 2  # cross-fitting folds (>= 2): training students read the bank without theirs
    seed: int = 0  # seeds folds, KMeans, bank sampling and the heuristic encoder
    kmeans_n_init: int = KMEANS_N_INIT  # KMeans restarts (the seed's n_init=10)
    min_length: int = 5  # shorter logs stay out of the banks (the seed skips < 5 interactions)
    batch_size: int = 128  # students per encoding batch
    bank_dir: str = ""  # prebuilt banks (python -m kt_lib.memory build), loaded by dataset name

    def validate(self) -> None:
        require(
            self.encoder in ENCODERS,
            f"unknown encoder {self.encoder!r}; valid: {', '.join(ENCODERS.names())}",
        )
        require(
            self.update_frequency >= 0,
            f"update_frequency must be >= 0, got {self.update_frequency}",
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

    def n_intra(self, n_heads: int) -> int:
        """Intra heads for a model with n_heads heads (head-count mismatch is an error)."""
        intra = n_heads - len(self.heads) if self.intra_heads is None else self.intra_heads
        where = f"{self.source}: " if self.source else ""
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

    def to_mapping(self) -> dict:
        """The Step 2 mapping that parses back to this config (no pickle, JSON-safe)."""
        out: dict[str, Any] = {"approach": self.approach}
        if self.intra_heads is not None:
            out["intra_heads"] = self.intra_heads
        out["inter_heads"] = [h.to_mapping() for h in self.heads]
        out["memory"] = asdict(self.memory)
        if self.influence_rule is not None:
            out["influence_rule"] = asdict(self.influence_rule)
        out["lr_scaling"] = self.lr_scaling
        out["description"] = self.description
        return out

    def bank_signature(self) -> dict:
        """What the banks depend on (compared when prebuilt banks are loaded)."""
        out = self.to_mapping()
        for key in ("description", "lr_scaling"):
            out.pop(key)
        for key in ("bank_dir", "batch_size", "update_frequency"):
            out["memory"].pop(key)
        return out

    def influence(self, head_type: str) -> float:
        """Influence weight of the first head of `head_type` (0.0 when there is none)."""
        return next((h.influence_weight for h in self.heads if h.type == head_type), 0.0)

    def with_settings(self, **changes) -> SimilarityConfig:
        """A validated copy with ablation settings changed (None values are left as they are).

        A head parameter (n_clusters, memory_size, k_neighbors, temperature, sampling, set_size,
        ...) changes on every head (or hybrid module) whose parameters have it; decay_factor,
        future_weight and window_sizes on every head with a temporal strategy (content heads
        stay content heads); a MemoryConfig field (kmeans_n_init, folds, min_length, ...) on the
        banks; `<type>_weight` is the influence weight of the heads of that type.
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
        temporal = {k: v for k, v in changes.items() if k in TEMPORAL_SETTINGS}
        for head in out.heads:
            weight = changes.get(f"{head.type}_weight")
            if weight is not None:
                require(weight >= 0, f"{head.type}_weight must be >= 0, got {weight}")
                head.influence_weight = float(weight)
            for h in head.walk():
                at = f"{where}{h.name}"
                own = {k: v for k, v in changes.items() if k in _field_names(type(h.params))}
                if own and not isinstance(h.params, HybridParams):
                    merged = {**_shallow(h.params), **own}
                    h.params = from_dict(type(h.params), merged, at)
                if temporal and h.temporal.strategy != CONTENT:
                    merged = {**asdict(h.temporal), **temporal}
                    h.temporal = from_dict(TemporalConfig, merged, f"{at}: temporal_config")
                    cls = _head_class(h)
                    if cls is not None:
                        cls.check_temporal(h.temporal, f"{at}: ")
        return out

    def _setting_names(self) -> set[str]:
        classes = {*SIMILARITY_HEADS.values(), *(_head_class(h) for h in self._all_heads())}
        params = {n for c in classes if c is not None for n in _field_names(c.params_cls)}
        types = {*SIMILARITY_HEADS, *(h.type for h in self.heads)}
        return (
            (params - _field_names(HybridParams))
            | _field_names(MemoryConfig)
            | TEMPORAL_SETTINGS
            | {f"{t}_weight" for t in types}
        )

    def _all_heads(self) -> list[HeadConfig]:
        return [h for head in self.heads for h in head.walk()]


def _field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()


def _shallow(params) -> dict:
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}


def _head_class(h: HeadConfig):
    try:
        return head_class_of(h.type, h.module_path)
    except ValueError:
        return None


# -- parsing -----------------------------------------------------------------------------------


def _prefix(where: str) -> str:
    return f"{where}: " if where and not where.endswith(": ") else where


def _number(raw: dict, key: str, where: str, section: str = "") -> None:
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}{section}{key} must be a number, got {value!r}")


def parse_temporal(raw, where: str = "") -> TemporalConfig:
    """A TemporalConfig from a `temporal_config` mapping (None or empty: content)."""
    where = _prefix(where)
    if not raw:
        return content_temporal()
    if not isinstance(raw, dict):
        raise ValueError(f"{where}temporal_config must be a mapping, got {raw!r}")
    for key in ("decay_factor", "future_weight"):
        if key in raw:
            _number(raw, key, where, "temporal_config.")
    return from_dict(TemporalConfig, dict(raw), source=f"{where}temporal_config")


def parse_head(raw, where: str = "") -> HeadConfig:
    """A HeadConfig from one `inter_heads` entry (or a Step 1 cluster/knn config)."""
    where = _prefix(where)
    if not isinstance(raw, dict):
        raise ValueError(f"{where}an inter head must be a mapping, got {raw!r}")
    raw = dict(raw)
    if "type" not in raw:
        raise ValueError(
            f"{where}an inter head needs a 'type'; valid types: {', '.join(valid_types())}"
        )
    type_ = str(raw.pop("type"))
    path = raw.pop("module_path", None)
    path = SEED_MODULE_PATHS.get(path, path) if isinstance(path, str) else path
    cls = head_class_of(type_, path, where)
    head = HeadConfig(type=type_, module_path=path)
    if "influence_weight" in raw:
        _number(raw, "influence_weight", where)
        head.influence_weight = float(raw.pop("influence_weight"))
    if head.influence_weight < 0:
        raise ValueError(
            f"{where}influence_weight must be >= 0 (0 disables the head), got "
            f"{head.influence_weight}"
        )
    temporal_raw = raw.pop("temporal_config", None)
    head.temporal = parse_temporal(temporal_raw, where)
    supported = cls.supported_strategies()
    if head.temporal.strategy not in supported:
        raise ValueError(
            f"{where}head type {type_!r} does not support the {head.temporal.strategy} "
            f"strategy (it supports {', '.join(supported)})"
        )
    cls.check_temporal(head.temporal, where)
    if type_ == "custom":
        params = raw.pop("params", None) or {}
        if raw:
            raise ValueError(
                f"{where}unknown field(s) {sorted(raw)} for a custom head; its own "
                "settings go under 'params'"
            )
        raw = dict(params)
    for alias, target in ALIASES.items():
        if alias in raw:
            if target in raw:
                raise ValueError(f"{where}give {target!r} or {alias!r}, not both")
            raw[target] = raw.pop(alias)
    head.params = cls.parse_params(raw, where.rstrip(": "), temporal_raw)
    return head


def _name_heads(heads: list[HeadConfig], prefix: str = "") -> None:
    seen: dict[str, int] = {}
    for h in heads:
        seen[h.type] = seen.get(h.type, 0) + 1
        h.name = prefix + (h.type if seen[h.type] == 1 else f"{h.type}_{seen[h.type]}")
        if isinstance(h.params, HybridParams):
            _name_heads(h.params.modules, f"{h.name}.")


def _check_keys(data: dict, allowed: set[str], where: str, kind: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(
            f"{where}unknown field(s) {unknown} in a {kind} similarity config; "
            f"valid: {sorted(allowed)}"
        )


def _check_total(data: dict, intra: int | None, n_inter: int, where: str) -> None:
    total = data.get("total_heads")
    if total is not None and intra is not None and intra + n_inter != total:
        raise ValueError(
            f"{where}head-count mismatch: {intra} intra + {n_inter} inter heads != "
            f"total_heads={total}"
        )


def _intra(data: dict, where: str) -> int | None:
    intra = data.get("intra_heads")
    if intra is not None and (not isinstance(intra, int) or isinstance(intra, bool)):
        raise ValueError(f"{where}intra_heads must be an integer, got {intra!r}")
    return intra


def _memory(raw, where: str, update_frequency: int | None = None) -> MemoryConfig:
    raw = dict(raw or {})
    if update_frequency is not None:
        raw.setdefault("update_frequency", update_frequency)
    return from_dict(MemoryConfig, raw, source=f"{where}memory")


def _step1_rule(data: dict, where: str) -> InfluenceRule | None:
    """Example 4's large_dataset / small_dataset sections as an InfluenceRule (by head type)."""
    if "large_dataset" not in data and "small_dataset" not in data:
        return None
    tables = {}
    for size in ("large", "small"):
        section = data.get(f"{size}_dataset") or {}
        at = f"{where}{size}_dataset"
        if not isinstance(section, dict):
            raise ValueError(f"{at} must be a mapping, got {section!r}")
        table = {}
        for key, value in section.items():
            if key not in ("cluster_config", "knn_config") or not isinstance(value, dict):
                raise ValueError(
                    f"{at}: expected cluster_config / knn_config mappings, got {key!r}"
                )
            if set(value) - {"influence_weight"}:
                raise ValueError(f"{at}.{key} may set influence_weight only, got {sorted(value)}")
            if "influence_weight" in value:
                table[key.removesuffix("_config")] = value["influence_weight"]
        tables[size] = table
    rule = {**tables}
    if "large_dataset_min_students" in data:
        rule["min_large_students"] = data["large_dataset_min_students"]
    return from_dict(InfluenceRule, rule, source=f"{where}large_dataset/small_dataset")


def _step1_inter(data: dict, approach: str, where: str) -> int:
    default = len(STEP1_APPROACHES[approach])  # none: 0, dual: 2, one type: 1 head
    n = data.get("inter_heads", default)
    if not isinstance(n, int) or isinstance(n, bool):
        raise ValueError(f"{where}Step 1 inter_heads must be an integer 0-3, got {n!r}")
    if approach == "none" and n != 0:
        raise ValueError(f"{where}approach none builds no inter head: inter_heads must be 0")
    if STEP1_APPROACHES[approach] == DUAL and n != 2:
        raise ValueError(
            f"{where}Step 1 is the fixed dual layout (1 cluster + 1 KNN head): "
            f"inter_heads must be 2, got {n}"
        )
    if not 0 <= n <= STEP1_MAX_INTER:
        raise ValueError(f"{where}Step 1 inter_heads must be in 0-{STEP1_MAX_INTER}, got {n}")
    return n


def _parse_step1(data: dict, where: str, source: str) -> SimilarityConfig:
    _check_keys(data, STEP1_KEYS, where, "Step 1")
    sections = {"cluster_config", "knn_config", "large_dataset", "small_dataset"}
    approach = data.get("approach", "position_weighted_dual" if sections & set(data) else "none")
    if approach not in STEP1_APPROACHES:
        raise ValueError(
            f"{where}unknown approach {approach!r}; Step 1 approaches: "
            f"{', '.join(STEP1_APPROACHES)} (or a Step 2 config with an inter_heads list)"
        )
    n = _step1_inter(data, approach, where)
    if approach == "none" and ({"large_dataset", "small_dataset"} & set(data)):
        raise ValueError(f"{where}approach none has no head for large_dataset/small_dataset")
    types = DUAL if approach == "hybrid" else STEP1_APPROACHES[approach]
    uses = {f"{t}_config" for t in types}
    unused = sorted(k for k in ("cluster_config", "knn_config") if k in data and k not in uses)
    if unused:
        raise ValueError(
            f"{where}approach {approach!r} does not use {unused}: remove them or pick an "
            f"approach that does ({', '.join(a for a in STEP1_APPROACHES if a != 'none')})"
        )
    sec = {k: dict(data.get(k) or {}) for k in ("cluster_config", "knn_config")}
    freq = [s.pop("update_frequency") for s in sec.values() if "update_frequency" in s]
    temporal = data.get("temporal_config")
    raws: list[tuple[dict, str]] = []
    if n:
        if STEP1_APPROACHES[approach] == DUAL:
            raws = [({"type": t, **sec[f"{t}_config"]}, f"{t}_config") for t in DUAL]
        elif approach == "hybrid":
            modules = [{"type": t, **sec[f"{t}_config"]} for t in DUAL]
            raws = [({"type": "hybrid", "modules": modules}, "hybrid")] * n
        else:
            raws = [({"type": approach, **sec[f"{approach}_config"]}, f"{approach}_config")] * n
    if temporal:
        raws = [({**raw, "temporal_config": temporal}, at) for raw, at in raws]
    heads = [parse_head(raw, f"{where}{at}") for raw, at in raws]
    _name_heads(heads)
    intra = _intra(data, where)
    _check_total(data, intra, len(heads), where)
    return SimilarityConfig(
        approach,
        heads,
        intra,
        _memory(data.get("memory"), where, min(freq) if freq else None),
        _step1_rule(data, where),
        str(data.get("lr_scaling", "none")),
        str(data.get("description", "")),
        source,
    )


def _parse_step2(data: dict, where: str, source: str) -> SimilarityConfig:
    _check_keys(data, STEP2_KEYS, where, "Step 2")
    heads = [parse_head(h, f"{where}inter_heads[{i}]") for i, h in enumerate(data["inter_heads"])]
    _name_heads(heads)
    intra = _intra(data, where)
    _check_total(data, intra, len(heads), where)
    rule = data.get("influence_rule")
    if rule is not None:
        if not isinstance(rule, dict):
            raise ValueError(f"{where}influence_rule must be a mapping, got {rule!r}")
        rule = from_dict(InfluenceRule, rule, source=f"{where}influence_rule")
    return SimilarityConfig(
        str(data.get("approach", "modular")),
        heads,
        intra,
        _memory(data.get("memory"), where),
        rule,
        str(data.get("lr_scaling", "none")),
        str(data.get("description", "")),
        source,
    )


def _check_rule(sim: SimilarityConfig, where: str) -> None:
    if sim.influence_rule is None:
        return
    names = {h.name for h in sim.heads} | {h.type for h in sim.heads}
    for size in ("large", "small"):
        for key in getattr(sim.influence_rule, size):
            if key not in names:
                raise ValueError(
                    f"{where}influence rule ({size}): {key!r} names no head; heads: "
                    f"{', '.join(h.name for h in sim.heads)}"
                )


def parse_similarity(data: dict | None, source: str = "", warn: bool = True) -> SimilarityConfig:
    """Validate one Step 1 or Step 2 similarity mapping (None: approach none)."""
    where = f"{source}: " if source else ""
    if data is None:
        return SimilarityConfig("none", source=source)
    if not isinstance(data, dict):
        raise ValueError(f"{where}a similarity config must be a mapping, got {data!r}")
    if len(data) == 1 and next(iter(data)) in WRAPPERS:
        key = next(iter(data))
        return parse_similarity(data[key], f"{where}{key}", warn)
    if _entries(data) is not None:
        raise ValueError(
            f"{where}this holds several similarity configs ({', '.join(_entries(data))}): "
            "pick one by name (load_simakt_config(spec, name=...) or 'file.json:name')"
        )
    if "base" in data:  # {base: <preset or file>, <setting>: value, ...}: see with_settings
        settings = {k: v for k, v in data.items() if k != "base"}
        require(
            isinstance(data["base"], str),
            f"{where}base must name a SimAKT preset or config file, got {data['base']!r}",
        )
        try:
            return load_simakt_config(data["base"], warn=warn).with_settings(**settings)
        except ValueError as exc:
            raise ValueError(f"{where}{exc}") from exc
    step2 = isinstance(data.get("inter_heads"), list)
    sim = (_parse_step2 if step2 else _parse_step1)(dict(data), where, source)
    require(
        sim.lr_scaling in LR_SCALINGS,
        f"{where}lr_scaling must be one of {', '.join(LR_SCALINGS)}, got {sim.lr_scaling!r}",
    )
    _check_rule(sim, where)
    off = sim.heads and all(h.influence_weight == 0 for h in sim.heads)
    if warn and off and sim.influence_rule is None:
        warnings.warn(
            f"{where}every inter-student head has influence_weight 0: inter-student "
            "attention is disabled (those heads output zeros)",
            UserWarning,
            stacklevel=2,
        )
    return sim


# -- loading -----------------------------------------------------------------------------------


def _entries(data: dict) -> dict[str, dict] | None:
    """The named configs of a collection mapping, or None for a single config."""
    if len(data) == 1 and next(iter(data)) in COLLECTIONS:
        inner = next(iter(data.values()))
        return inner if isinstance(inner, dict) else None
    known = STEP1_KEYS | STEP2_KEYS | set(WRAPPERS) | set(COLLECTIONS)
    if data and not set(data) & known and all(isinstance(v, dict) for v in data.values()):
        return data
    return None


def _entry_prefix(data: dict) -> str:
    return f"{next(iter(data))}." if len(data) == 1 and next(iter(data)) in COLLECTIONS else ""


def list_simakt_presets() -> list[str]:
    """Names of the shipped SimAKT presets (kt_lib/configs/simakt/*.yaml)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def _resolve(spec: str | Path) -> tuple[dict, str, str | None]:
    """(mapping, source, entry name) of a preset name, a file, or 'file:name'."""
    name = str(spec)
    if name in list_simakt_presets():
        return read_mapping(PRESET_DIR / f"{name}.yaml"), f"simakt preset {name!r}", None
    path = Path(name)
    if path.is_file():
        return read_mapping(path), str(path), None
    head, sep, entry = name.rpartition(":")
    if sep and Path(head).is_file():
        return read_mapping(Path(head)), head, entry
    raise ValueError(
        f"unknown SimAKT preset or config file {name!r}; presets: "
        f"{', '.join(list_simakt_presets())}"
    )


def load_simakt_configs(spec: str | Path | dict, warn: bool = True) -> dict[str, SimilarityConfig]:
    """Every config of a file, preset or mapping, by name (one config: under its file stem)."""
    data, source, _ = (spec, "similarity", None) if isinstance(spec, dict) else _resolve(spec)
    entries = _entries(data)
    if entries is None:
        stem = Path(source).stem if not isinstance(spec, dict) else "similarity"
        return {stem: parse_similarity(data, source, warn)}
    prefix = _entry_prefix(data)
    return {k: parse_similarity(v, f"{source}: {prefix}{k}", warn) for k, v in entries.items()}


def load_simakt_config(
    spec: str | Path | dict | SimilarityConfig | None, name: str | None = None, warn: bool = True
) -> SimilarityConfig:
    """A shipped preset by name, a YAML/JSON file ('file.json:name' picks one of several), an
    inline mapping, a SimilarityConfig (returned as is), or None (approach none)."""
    if isinstance(spec, SimilarityConfig):
        return spec
    if spec is None:
        return parse_similarity(None)
    if isinstance(spec, dict):
        data, source, entry = spec, "similarity", None
    else:
        data, source, entry = _resolve(spec)
    entry = name or entry
    entries = _entries(data) if isinstance(data, dict) else None
    if entry is None:
        return parse_similarity(data, source, warn)
    if entries is None or entry not in entries:
        have = ", ".join(entries) if entries else "a single config"
        raise ValueError(f"{source}: no similarity config named {entry!r}; it holds {have}")
    return parse_similarity(entries[entry], f"{source}: {_entry_prefix(data)}{entry}", warn)


__all__ = [
    "HeadConfig",
    "InfluenceRule",
    "MemoryConfig",
    "SimilarityConfig",
    "TemporalConfig",
    "list_simakt_presets",
    "load_simakt_config",
    "load_simakt_configs",
    "parse_head",
    "parse_similarity",
    "parse_temporal",
]
