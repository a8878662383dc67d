"""The predefined ablation grids (`GRIDS`, `build_grid(name)`): named lists of cells for
`runs.grid.run_grid`.

A cell is a mapping of `runs.grid.Cell`'s fields (label, model, preset, config, overrides,
factors); `Grid.cells` keeps them as mappings so that notebooks can print and edit them.

The predefined grids (`GRIDS`, `build_grid(name)`) are small by default; every size is a
parameter and `**overrides` reach every cell (e.g. d=16, bkt_max_iter=20 for smoke runs).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..heads.ordinal import AttentionRegistry
from ..heads.simakt_config import load_simakt_config
from ..models.gpcm_interface import SEED_MECHANISMS
from ..registry import Registry
from .spec import DEFAULT_PRESET

GRIDS: Registry = Registry("ablation grid")


# --- predefined grids -----------------------------------------------------------------------


@dataclass
class Grid:
    """A named list of cells with what it ablates."""

    name: str
    cells: list[dict]
    factors: list[str]  # the factor columns that vary across the cells
    ordinal: bool = False  # needs ordinal data (K > 2)
    metric: str = "test_auc"  # headline metric column
    description: str = ""
    extra: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.cells)


def _cell(label, model, preset, overrides, factors) -> dict:
    return {
        "label": label,
        "model": model,
        "preset": preset,
        "overrides": overrides,
        "factors": factors,
    }


# SimAKT presets are written for thousands of students (100+ clusters, 200-entry banks); the
# grids shrink them with `SimilarityConfig.shrink` (with_settings for the heads that are on).


def _simakt(preset: str, sizes: dict | None = None, **changes):
    """The parsed SimilarityConfig of `preset` with settings changed (no all-off warning) and
    the grid's bank `sizes` applied to the heads that are on (`SimilarityConfig.shrink`)."""
    return load_simakt_config(preset, warn=False).with_settings(**changes).shrink(**(sizes or {}))


def simakt_similarity(preset: str, **changes) -> dict:
    """A SimAKT similarity config (shipped preset, file, 'file:name' or mapping) with some
    settings changed (None: left as is), as a plain mapping for a cell's overrides.

    Settings (see `SimilarityConfig.with_settings`): head parameters such as n_clusters,
    memory_size, k_neighbors, temperature (on every head that reads them), future_weight,
    decay_factor (heads whose strategy reads them), bank settings such as kmeans_n_init, folds,
    min_length, and <type>_weight influence weights (cluster_weight, knn_weight, ...). A
    setting that acts on nothing (no head reads it, or every head that does is off) is refused.
    """
    return _simakt(preset, **changes).to_mapping()


def _bank_sizes(n_clusters: int, memory_size: int, k_neighbors: int, kmeans_n_init: int) -> dict:
    """The memory-bank sizes every SimAKT grid shrinks the presets to."""
    return dict(
        n_clusters=n_clusters,
        memory_size=memory_size,
        k_neighbors=k_neighbors,
        kmeans_n_init=kmeans_n_init,
    )


def _influence(sim) -> dict:
    """Factor columns: the cluster and KNN heads' influence weights (0.0: no such head)."""
    return {"cluster_weight": sim.influence("cluster"), "knn_weight": sim.influence("knn")}


@GRIDS.register("simakt_heads")
def simakt_heads(
    preset: str = DEFAULT_PRESET,
    n_clusters: int = 4,
    memory_size: int = 16,
    k_neighbors: int = 4,
    kmeans_n_init: int = 1,
    **overrides,
) -> Grid:
    """SimAKT's inter-student heads: none / cluster only / KNN only / both (seed 000, Step 1)."""
    sizes = _bank_sizes(n_clusters, memory_size, k_neighbors, kmeans_n_init)
    cells = []
    for label, name in (
        ("no_inter_student", "no_inter_student"),
        ("cluster_only", "cluster_only"),
        ("knn_only", "knn_only"),
        ("dual", "position_weighted_dual"),
    ):
        sim = _simakt(name, sizes)
        factors = {"heads": label, **_influence(sim)}
        overrides_ = {"similarity": sim.to_mapping(), **overrides}
        cells.append(_cell(label, "simakt", preset, overrides_, factors))
    return Grid(
        "simakt_heads",
        cells,
        ["heads"],
        description="SimAKT's inter-student heads: none / cluster only / KNN only / both.",
    )


@GRIDS.register("simakt_future_weight")
def simakt_future_weight(
    weights: Iterable[float] = (0.0, 0.3, 1.0),
    base: str = "position_weighted_dual",
    preset: str = DEFAULT_PRESET,
    n_clusters: int = 4,
    memory_size: int = 16,
    k_neighbors: int = 4,
    kmeans_n_init: int = 1,
    **overrides,
) -> Grid:
    """Position weighting: how much historical students' later steps count (future_weight)."""
    sizes = _bank_sizes(n_clusters, memory_size, k_neighbors, kmeans_n_init)
    cells = [
        _cell(
            f"future_weight={w:g}",
            "simakt",
            preset,
            {"similarity": _simakt(base, sizes, future_weight=float(w)).to_mapping(), **overrides},
            {"future_weight": float(w)},
        )
        for w in weights
    ]
    return Grid(
        "simakt_future_weight",
        cells,
        ["future_weight"],
        description="Position weighting: weight of historical students' later steps.",
    )


@GRIDS.register("simakt_influence")
def simakt_influence(
    presets: Iterable[str] = ("cluster_dominant", "knn_dominant", "adaptive_influence"),
    preset: str = DEFAULT_PRESET,
    n_clusters: int = 4,
    memory_size: int = 16,
    k_neighbors: int = 4,
    kmeans_n_init: int = 1,
    **overrides,
) -> Grid:
    """The influence-weight presets of seed 000 (cluster vs KNN head scale), sizes shrunk."""
    sizes = _bank_sizes(n_clusters, memory_size, k_neighbors, kmeans_n_init)
    cells = []
    for name in presets:
        sim = _simakt(name, sizes)
        cells.append(
            _cell(
                name,
                "simakt",
                preset,
                {"similarity": sim.to_mapping(), **overrides},
                {"influence_preset": name, **_influence(sim)},
            )
        )
    return Grid(
        "simakt_influence",
        cells,
        ["influence_preset", "cluster_weight", "knn_weight"],
        description="The influence-weight presets of seed 000 (cluster vs KNN head scale).",
    )


@GRIDS.register("ordinal_mechanisms")
def ordinal_mechanisms(
    mechanisms: Iterable[str] | None = None,
    combinations: Iterable[Iterable[str]] | None = None,
    fusion: str = "concat",
    preset: str = DEFAULT_PRESET,
    **overrides,
) -> Grid:
    """ModularAttentionGPCM: each ordinal mechanism alone, then in combination (one fusion).

    Default combinations: seed 002's four mechanisms, and all registered mechanisms.
    """
    every = AttentionRegistry.list_available()
    mechanisms = list(every if mechanisms is None else mechanisms)
    if combinations is None:
        combinations = [list(SEED_MECHANISMS), every]
    cells = []
    for group in [[m] for m in mechanisms] + [list(c) for c in combinations]:
        if len(group) == 1:
            label = group[0]
        elif group == list(SEED_MECHANISMS):
            label = f"seed combination ({len(group)})"
        elif sorted(group) == sorted(every):
            label = f"all ({len(group)})"
        else:
            label = "+".join(group)
        if any(c["label"] == label for c in cells):
            continue
        cells.append(
            _cell(
                label,
                "modular_attention_gpcm",
                preset,
                {"mechanisms": group, "fusion": fusion, **overrides},
                {"mechanisms": "+".join(group), "n_mechanisms": len(group)},
            )
        )
    return Grid(
        "ordinal_mechanisms",
        cells,
        ["mechanisms", "n_mechanisms"],
        ordinal=True,
        metric="test_qwk",
        description="ModularAttentionGPCM: each ordinal mechanism alone, then in combination.",
    )


@GRIDS.register("ikt3_lambda")
def ikt3_lambda(
    lambda_targets: Iterable[float] = (0.0, 0.5, 1.0),
    warmup: int = 0,
    preset: str = DEFAULT_PRESET,
    **overrides,
) -> Grid:
    """iKT3's interpretability weight lambda_target (warm-up 0 by default: short runs would
    otherwise never reach it, lambda(epoch) = lambda_target * min(1, epoch / warmup)). At
    lambda_target = 1 the prediction loss has weight 1 - lambda = 0: the performance head's own
    weights get no gradient, so its AUC is an untrained head's over the features the alignment
    trained (the extreme of the sweep, not a tuned model)."""
    cells = [
        _cell(
            f"lambda_target={lam:g}",
            "ikt3",
            preset,
            {"lambda_target": float(lam), "warmup": warmup, **overrides},
            {"lambda_target": float(lam)},
        )
        for lam in lambda_targets
    ]
    return Grid(
        "ikt3_lambda",
        cells,
        ["lambda_target"],
        description="iKT3's interpretability weight lambda_target (warm-up 0).",
    )


@GRIDS.register("idkt_lambdas")
def idkt_lambdas(
    value: float = 0.1,
    combos: Iterable[Iterable[str]] = ((), ("ref",), ("L0", "T"), ("ref", "L0", "T")),
    preset: str = DEFAULT_PRESET,
    **overrides,
) -> Grid:
    """iDKT's alignment weights: each combination of lambda_ref / lambda_L0 / lambda_T set to
    `value`, the others 0 (all 0: AKT's logits with the heads untrained)."""
    cells = []
    for combo in combos:
        lams = {f"lambda_{k}": (value if k in combo else 0.0) for k in ("ref", "L0", "T")}
        label = "none (AKT)" if not combo else "+".join(combo)
        cells.append(_cell(label, "idkt", preset, {**lams, **overrides}, dict(lams)))
    return Grid(
        "idkt_lambdas",
        cells,
        ["lambda_ref", "lambda_L0", "lambda_T"],
        description="iDKT's alignment weights lambda_ref / lambda_L0 / lambda_T.",
    )


def list_grids() -> list[str]:
    """Names of the predefined grids."""
    return GRIDS.names()


def build_grid(name: str, **kw) -> Grid:
    """A predefined grid by name; unknown names raise a KeyError listing the valid ones."""
    return GRIDS[name](**kw)
