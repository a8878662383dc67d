"""Parsing of SimAKT similarity mappings (seed 000's Step 1 and Step 2 forms) into the schema.

Step 2: `intra_heads` + `inter_heads`, a list of {type, influence_weight, temporal_config,
type-specific fields}; Step 1: `approach` + `cluster_config` / `knn_config` / `temporal_config`,
`large_dataset` / `small_dataset` (Example 4). Errors name the source and the field.
"""

from __future__ import annotations

import re

from ...config import from_dict
from ...seed_warnings import SeedSettingWarning, warn_once
from ..inter.base import HybridParams, current_module_path, head_class_of, valid_types
from .schema import (
    HeadConfig,
    InfluenceRule,
    MemoryConfig,
    SimilarityConfig,
    TemporalConfig,
    content_temporal,
)

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
ALIASES = {"initial_temperature": "temperature"}  # seed 000 spells some fields two ways
# Step 1 without temporal_config: the seed's "Selected Strategy" (Strategy 2) for its Step 1
# heads ("cluster + KNN with position-weighted similarity"), with TemporalConfig's defaults.
# A Step 2 head without temporal_config scores by content (see parse_temporal).
STEP1_STRATEGY = "position_weighted"


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
    """A HeadConfig from one `inter_heads` entry (or a Step 1 cluster/knn config); a setting the
    head does not read under its strategy is refused (the seed's own value warns once)."""
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
    path = current_module_path(path) if isinstance(path, str) else path
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
    defaults = cls.temporal_defaults if isinstance(temporal_raw, dict) else {}
    head.temporal = parse_temporal({**defaults, **temporal_raw} if temporal_raw else None, where)
    supported = cls.supported_strategies()
    if head.temporal.strategy not in supported:
        raise ValueError(
            f"{where}head type {type_!r} does not support the {head.temporal.strategy} "
            f"strategy (it supports {', '.join(supported)})"
        )
    cls.check_temporal(head.temporal, where)
    cls.check_temporal_fields(temporal_raw or {}, head.temporal.strategy, where)
    cls.check_content_params(raw, head.temporal.strategy, where)
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


def _total(data: dict, where: str) -> int | None:
    """total_heads, checked against the model's n_heads by SimilarityConfig.n_intra."""
    total = data.get("total_heads")
    if total is not None and (not isinstance(total, int) or isinstance(total, bool)):
        raise ValueError(f"{where}total_heads must be an integer, got {total!r}")
    return total


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


def parse_step1(data: dict, where: str, source: str) -> SimilarityConfig:
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
    idle = sorted(set(data) & {*sections, "temporal_config", "memory"})
    if data.get("lr_scaling") == "inverse_influence":  # LR_SCALINGS' one scaling (others:
        idle.append("lr_scaling")  # refused as such when the config is checked)
    if n == 0 and idle:  # never parsed: a typo in them would pass, and they act on nothing
        raise ValueError(
            f"{where}inter_heads 0 builds no inter-student head: {idle} act on nothing; remove "
            "them, or give the approach its heads"
        )
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
    encoder = (data.get("memory") or {}).get("encoder", MemoryConfig.encoder)
    if freq and encoder != "block2":
        warn_once(
            f"{where}update_frequency={min(freq)} has no effect with the {encoder} encoder: its "
            "banks do not depend on the model's weights, so rebuilding them gives the same banks "
            "(seed 000's example sets it; ignored). Use memory: {encoder: block2} to rebuild the "
            "banks during training",
            SeedSettingWarning,
            4,
        )
        freq = []
    temporal = data.get("temporal_config") or {"strategy": STEP1_STRATEGY}
    raws: list[tuple[dict, str]] = []
    if n:
        if STEP1_APPROACHES[approach] == DUAL:
            raws = [({"type": t, **sec[f"{t}_config"]}, f"{t}_config") for t in DUAL]
        elif approach == "hybrid":
            modules = [{"type": t, **sec[f"{t}_config"]} for t in DUAL]
            raws = [({"type": "hybrid", "modules": modules}, "hybrid")] * n
        else:
            raws = [({"type": approach, **sec[f"{approach}_config"]}, f"{approach}_config")] * n
    raws = [({**raw, "temporal_config": temporal}, at) for raw, at in raws]
    heads = [parse_head(raw, f"{where}{at}") for raw, at in raws]
    _name_heads(heads)
    intra = _intra(data, where)
    _check_total(data, intra, len(heads), where)
    if "head_allocation" in data:
        heads, intra = allocate_heads(data["head_allocation"], heads, intra, where)
        _check_total(data, intra, len(heads), where)  # the allocation's own intra count
    return SimilarityConfig(
        approach,
        heads,
        intra,
        _memory(data.get("memory"), where, min(freq) if freq else None),
        _step1_rule(data, where),
        str(data.get("lr_scaling", "none")),
        str(data.get("description", "")),
        source,
        _total(data, where),
    )


def parse_step2(data: dict, where: str, source: str) -> SimilarityConfig:
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
        _total(data, where),
    )


def check_influence_rule(sim: SimilarityConfig, where: str) -> None:
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


# -- head_allocation (seed 000, Step 1) ----------------------------------------------------------

INTRA_LABELS = ("intra_student", "intra")
_SLOT = re.compile(r"head_(\d+)(?:_to_(\d+))?")


def _slots(allocation: dict, where: str) -> dict[int, str]:
    """1-based head index -> label, from keys `head_<i>` and `head_<a>_to_<b>`."""
    out: dict[int, str] = {}
    for key, label in allocation.items():
        m = _SLOT.fullmatch(str(key))
        if m is None or not isinstance(label, str):
            raise ValueError(
                f"{where}head_allocation: expected 'head_<i>' or 'head_<a>_to_<b>' -> a label, "
                f"got {key!r}: {label!r}"
            )
        a, b = int(m[1]), int(m[2] or m[1])
        if not 1 <= a <= b:
            raise ValueError(f"{where}head_allocation: {key!r} is not a range of heads 1, 2, ...")
        for i in range(a, b + 1):
            if i in out:
                raise ValueError(f"{where}head_allocation: head {i} is allocated twice")
            out[i] = label
    if sorted(out) != list(range(1, len(out) + 1)):
        raise ValueError(
            f"{where}head_allocation must cover heads 1..n without gaps, got {sorted(out)}"
        )
    return out


def allocate_heads(
    allocation, heads: list[HeadConfig], intra: int | None, where: str
) -> tuple[list[HeadConfig], int]:
    """Seed 000's `head_allocation` decides which head index is which: Block 3 runs its intra
    heads first (heads 1..n_intra; anything else is refused), then the inter heads in the order
    the allocation gives them (e.g. head_7: knn_similarity, head_8: cluster_similarity puts the
    KNN head in the 7th slice of W_Q / W_O). Labels: intra_student, or a head type with or
    without `_similarity`. Returns the heads in that order and the intra head count."""
    if not isinstance(allocation, dict) or not allocation:
        raise ValueError(f"{where}head_allocation must be a non-empty mapping, got {allocation!r}")
    slots = _slots(allocation, where)
    labels = [slots[i] for i in sorted(slots)]
    n_intra = sum(label in INTRA_LABELS for label in labels)
    if labels[:n_intra] != [label for label in labels if label in INTRA_LABELS]:
        raise ValueError(
            f"{where}head_allocation puts inter-student heads before intra-student ones; Block 3 "
            "runs its intra heads first (heads 1..n_intra), then the inter heads"
        )
    if intra is not None and intra != n_intra:
        raise ValueError(
            f"{where}head_allocation has {n_intra} intra heads, intra_heads says {intra}"
        )
    left = list(heads)
    ordered = []
    for label in labels[n_intra:]:
        type_ = label.removesuffix("_similarity")
        match = next((h for h in left if h.type == type_), None)
        if match is None:
            have = ", ".join(f"{h.type}_similarity" for h in heads) or "none"
            raise ValueError(
                f"{where}head_allocation names {label!r}, which is not one of this layout's "
                f"inter heads ({have}; intra heads: {INTRA_LABELS[0]})"
            )
        left.remove(match)
        ordered.append(match)
    if left:
        raise ValueError(
            f"{where}head_allocation leaves out the inter head(s) "
            f"{', '.join(h.type for h in left)}: allocate every head"
        )
    return ordered, n_intra
