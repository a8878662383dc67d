"""Ablation grids: cells x seeds through `run_experiment`, one row per run, mean ± std tables.

A *cell* is one configuration of the grid, a mapping with
    label      row label, unique in the grid
    model      registry name
    preset     model preset (tiny | default | paper | a named preset), default "tiny"
    config     optional base config (dataclass, mapping or YAML/JSON path), see `make_config`
    overrides  optional config fields set on top of the preset/config
    factors    optional mapping of the ablated factors -> value, copied into the result rows
Scalar overrides also become columns, so a table can be grouped or plotted by any of them.

Seeds change the model's initialisation, dropout and batch order; the data split is the bundle's
(fixed), so the spread over seeds is training noise, not sampling noise of the test students.

The predefined grids (`GRIDS`, `build_grid(name)`) are small by default; every size is a
parameter and `**overrides` reach every cell (e.g. d=16, bkt_max_iter=20 for smoke runs).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pandas as pd

from .experiment import ExperimentResult
from .registry import Registry
from .runs.tables import format_mean_std
from .train import TrainConfig

CELL_KEYS = {"label", "model", "preset", "config", "overrides", "factors"}
GRIDS: Registry = Registry("ablation grid")


# --- running --------------------------------------------------------------------------------


def check_cells(cells: list[dict]) -> None:
    """Clear errors for malformed cells (missing keys, unknown keys, duplicate labels)."""
    if not cells:
        raise ValueError("an ablation grid needs at least one cell")
    seen: set[str] = set()
    for i, cell in enumerate(cells):
        if not isinstance(cell, dict):
            raise ValueError(f"cell {i} must be a mapping, got {cell!r}")
        missing = [k for k in ("label", "model") if k not in cell]
        if missing:
            raise ValueError(f"cell {i} ({cell.get('label', '?')}) lacks {missing}")
        unknown = sorted(set(cell) - CELL_KEYS)
        if unknown:
            raise ValueError(
                f"cell {cell['label']!r}: unknown key(s) {unknown}; valid: {sorted(CELL_KEYS)}"
            )
        if cell["label"] in seen:
            raise ValueError(f"duplicate cell label {cell['label']!r}")
        seen.add(cell["label"])


def _scalar(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def cell_factors(cell: dict) -> dict:
    """The cell's factor columns: its `factors` plus its scalar overrides."""
    out = {k: v for k, v in (cell.get("overrides") or {}).items() if _scalar(v)}
    out.update(cell.get("factors") or {})
    return out


def _grid_tasks(cells: list[dict], seeds: list[int], train_config, parallel: bool) -> list[dict]:
    """One `runner.run_task` task per (cell, seed), in plan order; with `parallel`, each cell's
    config and overrides must pickle (they travel to worker processes)."""
    import pickle

    from .runner import train_dict

    train = train_dict(train_config)
    tasks = []
    for cell in cells:
        payload = {"config": cell.get("config"), "overrides": cell.get("overrides") or {}}
        if parallel:
            try:
                pickle.dumps(payload)
            except Exception as exc:
                raise ValueError(
                    f"cell {cell['label']!r}: its config/overrides cannot be sent to a worker "
                    f"process ({exc}); use plain values, mappings or config dataclasses"
                ) from exc
        for seed in seeds:
            tasks.append(
                {
                    "index": len(tasks),
                    "model": cell["model"],
                    "preset": cell.get("preset", "tiny"),
                    "seed": seed,
                    "label": cell["label"],
                    **copy.deepcopy(payload),
                    "train": train,
                    "data": None,  # the grid's bundle, shared with the workers
                }
            )
    return tasks


def run_grid(
    cells: list[dict],
    bundle,
    seeds: Iterable[int] = (0,),
    train_config: TrainConfig | None = None,
    progress: bool = True,
    callback: Callable[[dict, int, ExperimentResult], None] | None = None,
    workers: int = 1,
    executor: str = "process",
    gpus_per_run: float | None = None,
    ray_address: str | None = None,
    on_error: str = "record",
) -> pd.DataFrame:
    """Train every cell once per seed on `bundle` (train/valid/test); one row per (cell, seed),
    in plan order (cells, then seeds) whatever the executor.

    Columns: label, model, preset, seed, the cell's factors, test_<metric> for each test metric,
    valid_<headline metric>, best_epoch, epochs, params, train_seconds; a failed run keeps its
    label, model, preset, seed and factors, with `error` and `traceback` (the others go on;
    on_error="raise" stops at the first). `callback(cell, seed, result)` sees each trained
    model (e.g. to keep one for plots): in-process runs only (workers=1, no Ray).

    `workers` runs train at a time (`kt_lib.runner.execute`): spawned processes sharing the
    cores (or one GPU), each receiving `bundle` once, or Ray tasks with executor="ray"
    (`gpus_per_run`, default 1/workers on CUDA; `ray_address` for a cluster).
    """
    from . import runner

    check_cells(cells)
    seeds = list(seeds)
    if not seeds:
        raise ValueError("run_grid needs at least one seed")
    parallel = workers > 1 or executor == "ray"
    if callback is not None and parallel:
        raise ValueError(
            "run_grid's callback sees trained models, which stay in their worker processes: "
            "use workers=1 (and the default executor) with a callback"
        )
    tasks = _grid_tasks(cells, seeds, train_config, parallel)
    cell_of = [cell for cell in cells for _ in seeds]  # by task index
    rows: list[dict | None] = [None] * len(tasks)
    outcomes = runner.execute(
        tasks,
        bundle,
        workers=workers,
        executor=executor,
        gpus_per_run=gpus_per_run,
        ray_address=ray_address,
        progress=progress,
        desc="ablation",
        on_error=on_error,
    )
    for out in outcomes:
        cell, seed = cell_of[out.index], tasks[out.index]["seed"]
        row = {
            "label": cell["label"],
            "model": cell["model"],
            "preset": cell.get("preset", "tiny"),
            "seed": seed,
            **cell_factors(cell),
        }
        res = out.result
        if res is None:
            row.update(error=out.error, traceback=out.traceback)
        else:
            headline = "qwk" if out.ordinal else "auc"
            row.update(
                {
                    **{f"test_{k}": v for k, v in res.test.items() if k != "n"},
                    f"valid_{headline}": res.valid.get(headline, math.nan),
                    "best_epoch": res.best_epoch,
                    "epochs": len(res.history),
                    "params": res.n_params,
                    "train_seconds": res.seconds,
                }
            )
            if callback is not None:
                callback(cell, seed, res)
        rows[out.index] = row
    return pd.DataFrame(rows)


def metric_columns(table: pd.DataFrame) -> list[str]:
    """The test metric columns of a `run_grid` table, in order."""
    return [c for c in table.columns if c.startswith("test_")]


def aggregate(
    table: pd.DataFrame, by: str | list[str] = "label", metrics: list[str] | None = None
) -> pd.DataFrame:
    """Numeric mean, std (ddof 1; 0 for one run) and run count per group, groups in table order."""
    metrics = metrics or metric_columns(table)
    g = table.groupby(by, sort=False)[metrics]
    out = pd.concat({"mean": g.mean(), "std": g.std().fillna(0.0)}, axis=1)
    out[("n", "runs")] = g.size()
    return out


def summarise(
    table: pd.DataFrame,
    by: str | list[str] = "label",
    metrics: list[str] | None = None,
    digits: int = 4,
) -> pd.DataFrame:
    """'mean ± std' strings per group and metric (`runs.tables`' policy: a single run shows its
    value alone), plus the run count (groups in table order)."""
    metrics = metrics or metric_columns(table)
    agg = aggregate(table, by, metrics)
    counts = table.groupby(by, sort=False)[metrics].count()
    out = pd.DataFrame(index=agg.index)
    for m in metrics:
        out[m] = [
            format_mean_std(mu, sd, n, digits)
            for mu, sd, n in zip(agg[("mean", m)], agg[("std", m)], counts[m], strict=True)
        ]
    out["runs"] = agg[("n", "runs")]
    return out


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
# grids shrink them with `SimilarityConfig.with_settings`, the schema's one list of settings.


def _simakt(preset: str, **changes):
    """The parsed SimilarityConfig of `preset` with settings changed (no all-off warning)."""
    from .heads.simakt_config import load_simakt_config

    return load_simakt_config(preset, warn=False).with_settings(**changes)


def simakt_similarity(preset: str, **changes) -> dict:
    """A SimAKT similarity config (shipped preset, file, 'file:name' or mapping) with some
    settings changed (None: left as is), as a plain mapping for a cell's overrides.

    Settings (see `SimilarityConfig.with_settings`): head parameters such as n_clusters,
    memory_size, k_neighbors, temperature (on every head that has them), future_weight,
    decay_factor (heads with a temporal strategy), bank settings such as kmeans_n_init, folds,
    min_length, and <type>_weight influence weights (cluster_weight, knn_weight, ...).
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
    preset: str = "tiny",
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
        sim = _simakt(name, **sizes)
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
    preset: str = "tiny",
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
            {"similarity": simakt_similarity(base, future_weight=float(w), **sizes), **overrides},
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
    preset: str = "tiny",
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
        sim = _simakt(name, **sizes)
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
    preset: str = "tiny",
    **overrides,
) -> Grid:
    """ModularAttentionGPCM: each ordinal mechanism alone, then in combination (one fusion).

    Default combinations: seed 002's four mechanisms, and all registered mechanisms.
    """
    from .heads.ordinal import AttentionRegistry
    from .models.gpcm import SEED_MECHANISMS

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
    preset: str = "tiny",
    **overrides,
) -> Grid:
    """iKT3's interpretability weight lambda_target (warm-up 0 by default: short runs would
    otherwise never reach it, lambda(epoch) = lambda_target * min(1, epoch / warmup))."""
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
    preset: str = "tiny",
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
