"""Ablation grids: cells x seeds on one bundle, one `RunRecord` row per run, mean ± std tables.

A `Cell` is one configuration of a grid: its row label, registered model, preset, optional base
config (dataclass, mapping or YAML/JSON path, see `make_config`), config fields set on top
(`overrides`) and the ablated factors copied into its rows (scalar overrides become columns too,
so a table can be grouped or plotted by any of them). The predefined grids are in `runs.ablations`.

Seeds change the model's initialisation, dropout and batch order; the data split is the bundle's
(fixed), so the spread over seeds is training noise, not sampling noise of the test students.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..train import TrainConfig
from .execute import ExecConfig, execute
from .experiment import ExperimentResult
from .record import RunRecord, preset_digest, preset_settings
from .spec import DEFAULT_PRESET, RunSpec
from .tables import format_mean_std


@dataclass(frozen=True)
class Cell:
    """One configuration of a grid (see the module docstring)."""

    label: str
    model: str
    preset: str = DEFAULT_PRESET
    config: Any = None
    overrides: dict[str, Any] = field(default_factory=dict)
    factors: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, given: Mapping, i: int) -> Cell:
        """A cell from a mapping of its fields (clear errors naming cell `i`)."""
        if isinstance(given, Cell):
            return given
        if not isinstance(given, Mapping):
            raise ValueError(f"cell {i} must be a mapping, got {given!r}")
        missing = [k for k in ("label", "model") if k not in given]
        if missing:
            raise ValueError(f"cell {i} ({given.get('label', '?')}) lacks {missing}")
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ValueError(
                f"cell {given['label']!r}: unknown key(s) {unknown}; valid: {sorted(known)}"
            )
        values = {k: v for k, v in given.items() if v is not None or k == "config"}
        for k in ("overrides", "factors"):
            values[k] = dict(values.get(k) or {})
        return cls(**values)

    def columns(self) -> dict:
        """The cell's factor columns: its `factors` plus its scalar overrides."""
        out = {k: v for k, v in self.overrides.items() if _scalar(v)}
        out.update(self.factors)
        return out

    def spec(self, seed: int, train: TrainConfig) -> RunSpec:
        return RunSpec(
            self.model, self.preset, self.overrides, self.config, seed, self.label, train
        )


def check_cells(cells: Iterable) -> list[Cell]:
    """The cells parsed, with clear errors for malformed ones (missing keys, unknown keys,
    duplicate labels)."""
    parsed = [Cell.parse(c, i) for i, c in enumerate(cells)]
    if not parsed:
        raise ValueError("an ablation grid needs at least one cell")
    seen: set[str] = set()
    for cell in parsed:
        if cell.label in seen:
            raise ValueError(f"duplicate cell label {cell.label!r}")
        seen.add(cell.label)
    return parsed


def _scalar(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def run_grid(
    cells: list,
    bundle,
    seeds: Iterable[int] = (0,),
    train_config: TrainConfig | None = None,
    progress: bool = True,
    callback: Callable[[dict, int, ExperimentResult], None] | None = None,
    execution: ExecConfig | None = None,
) -> pd.DataFrame:
    """Train every cell once per seed on `bundle` (train/valid/test); one `RunRecord` row per
    (cell, seed), in plan order (cells, then seeds) whatever the executor.

    Columns: model, label, seed, preset, the cell's factors, then the result's figures
    (test_<metric>, valid_<headline metric>, best_epoch, epochs, params, train_seconds, ...);
    a failed run keeps its identity and factors, with `error` and `traceback` (the others go
    on; `ExecConfig(on_error="raise")` stops at the first). `callback(cell, seed, result)` sees
    each trained model (e.g. to keep one for plots): in-process runs only (workers=1, no Ray).

    `execution` (`runs.execute.ExecConfig`) says how many runs train at a time: spawned
    processes sharing the cores (or one GPU), each receiving `bundle` once, or Ray tasks.
    """
    parsed = check_cells(cells)
    seeds = list(seeds)
    if not seeds:
        raise ValueError("run_grid needs at least one seed")
    execution = execution or ExecConfig()
    parallel = execution.parallel
    if callback is not None and parallel:
        raise ValueError(
            "run_grid's callback sees trained models, which stay in their worker processes: "
            "use workers=1 (and the default executor) with a callback"
        )
    train = train_config or TrainConfig()
    specs, cell_of = [], []
    for given, cell in zip(cells, parsed, strict=True):
        if parallel:
            try:
                pickle.dumps((cell.config, cell.overrides))
            except Exception as exc:
                raise ValueError(
                    f"cell {cell.label!r}: its config/overrides cannot be sent to a worker "
                    f"process ({exc}); use plain values, mappings or config dataclasses"
                ) from exc
        for seed in seeds:
            specs.append(cell.spec(seed, train))
            cell_of.append((given, cell))
    rows: list[dict | None] = [None] * len(specs)
    outcomes = execute(
        specs,
        bundle,
        execution,
        progress=progress,
        desc="ablation",
    )
    for out in outcomes:
        (given, cell), spec = cell_of[out.index], specs[out.index]
        record = RunRecord(
            cell.model,
            spec.seed,
            label=cell.label,
            preset=cell.preset,
            factors=cell.columns(),
            # a cell built from its own config used no preset: no digest
            preset_digest=preset_digest(cell.model, cell.preset) if cell.config is None else None,
            preset_settings=preset_settings(cell.model, cell.preset, own=cell.overrides)
            if cell.config is None
            else None,
            figures=out.figures,
            protocol=out.protocol,
            error=out.error,
            traceback=out.traceback,
            wall_seconds=out.wall_seconds,
            device_name=out.device_name,
            native=out.native,
        )
        rows[out.index] = record.row()
        if callback is not None and out.result is not None:
            callback(given, spec.seed, out.result)
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
