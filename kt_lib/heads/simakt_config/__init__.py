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
Errors name the file (or "similarity") and the field. Temporal strategies: `content`, or a
`kt_lib.memory.temporal.TEMPORAL_STRATEGIES` name; a temporal_config without `strategy`
selects the seed's position_weighted, and so does a Step 1 config without temporal_config (the
seed's Step 1 heads are position-weighted); a Step 2 head without temporal_config scores by
content. Omitted temporal values are the seed's (decay_factor 0.95, future_weight 0.3).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from ...config import read_mapping, require
from ...trust import refuse_untrusted_code
from .parse import (
    STEP1_KEYS,
    STEP2_KEYS,
    check_influence_rule,
    parse_head,
    parse_step1,
    parse_step2,
    parse_temporal,
)
from .schema import (
    HeadConfig,
    InfluenceRule,
    MemoryConfig,
    SimilarityConfig,
    TemporalConfig,
    content_temporal,
)

PRESET_DIR = Path(__file__).resolve().parents[2] / "configs" / "simakt"
WRAPPERS = ("similarity_config", "step_2_modular_config")  # one config inside
COLLECTIONS = ("similarity_approaches", "step_2_configurations")  # several, by name
LR_SCALINGS = ("none", "inverse_influence")


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
    sim = (parse_step2 if step2 else parse_step1)(dict(data), where, source)
    require(
        sim.lr_scaling in LR_SCALINGS,
        f"{where}lr_scaling must be one of {', '.join(LR_SCALINGS)}, got {sim.lr_scaling!r}",
    )
    check_influence_rule(sim, where)
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


def files_named(data: Any) -> list[str]:
    """Every similarity reference in a loaded JSON structure (`similarity: X`, `base: X`) that is
    not a shipped preset: a file that building from this structure would read, and which may
    name code to import (and may have changed since the structure was written)."""
    presets, found = set(list_simakt_presets()), []
    if isinstance(data, dict):
        for k, v in data.items():
            if k in ("similarity", "base") and isinstance(v, str) and v not in presets:
                found.append(v)
            else:
                found += files_named(v)
    elif isinstance(data, list):
        for v in data:
            found += files_named(v)
    return found


def refuse_untrusted_config(data: Any, source: str | Path, trust_code: bool) -> None:
    """`refuse_untrusted_code`, and also refuse a loaded structure that reads a SimAKT config
    file outside the shipped presets (that file may name code), unless `trust_code=True`."""
    refuse_untrusted_code(data, source, trust_code)
    files = files_named(data)
    if files and not trust_code:
        raise PermissionError(
            f"{source}: reads SimAKT config file(s) {', '.join(sorted(set(files)))}, which may "
            "name code to import; loading it would read them. Pass trust_code=True if you trust "
            "this file and those it names."
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
    "PRESET_DIR",
    "files_named",
    "refuse_untrusted_config",
    "content_temporal",
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
