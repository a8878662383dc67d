"""Leaderboard plans: which runs a profile asks for, each with its identity (`run_key`).

A `LeaderboardPlan` trains its models on each dataset following `fold_plan`; `runs()` lists
every run as a `RunSpec` with its key, without running anything. `profile_plan(params)` builds
the plan of a profile's parameters (notebook 10's names): notebook 10, `reports check`'s dry run
and the studies all plan through this module, so they cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..data.formats.detect import detect_format, split_files
from ..fileio import short_digest
from ..train import TrainConfig
from .data import DataSpec, layout_folder
from .spec import DEFAULT_PRESET, EvalConfig, ModelSettings, RunSpec, train_settings

FOLD_BASE = {"line3": 1, "line4": 1, "pykt": 0}  # formats whose files carry folds: first id
# a profile's leaderboard parameters (notebook 10's names) and their defaults
PROFILE_DEFAULTS = {
    "datasets": [],
    "simulator": True,
    "models": ["dkt", "sakt", "akt", "idkt", "dtransformer", "simakt", "ikt3"],
    "seeds": [0, 1],
    "folds": 0,
    "num_students": 200,
    "seq_len": 40,
    "num_c": 8,
    "preset": DEFAULT_PRESET,
    "bkt_max_iter": 20,
    "max_len": 40,
    "histories": ["window"],
    "overrides": {},
    "variants": {},
    "dataset_overrides": {},
}


def has_fold_files(data_dir: str | Path | None, data_format: str) -> bool:
    """Whether a folder carries its own folds: line3/line4 `*_train1.csv|.txt` (a folder with only
    train/test files has none), pykt always (a `fold` column); unknown without a folder."""
    if data_format == "pykt":
        return True
    if data_format in ("line3", "line4"):
        return data_dir is None or bool(split_files(data_dir, "train1"))
    return False


def fold_plan(
    data_format: str, folds: int, seeds: Iterable[int], data_dir: str | Path | None = None
) -> list[tuple[int | None, int]]:
    """(fold, seed) of each run: the files' `folds` folds with the first seed where the format
    has folds (line3/line4: 1..k, pykt: 0..k-1), folds > 0 and `data_dir` (when given) has the
    fold files; else every seed without a fold. `auto` plans the folds of the layout detected in
    `data_dir`."""
    seeds = list(seeds)
    if not seeds:
        raise ValueError("fold_plan needs at least one seed")
    if data_format == "auto" and data_dir is not None:  # the folds of the layout it holds
        data_format = detect_format(data_dir)
    if folds > 0 and data_format in FOLD_BASE and has_fold_files(data_dir, data_format):
        base = FOLD_BASE[data_format]
        return [(base + k, seeds[0]) for k in range(folds)]
    return [(None, s) for s in seeds]


def layout_key(data: DataSpec) -> dict:
    """{"layout": name} for `prepare`'s line3 and line4 folders (OUT/line3, OUT/line4), else {}:
    they share their dataset name with OUT/pykt, whose key stays as it was (the studies'
    prepared datasets, OULAD's, are read from OUT/pykt: their committed keys are unchanged)."""
    layout = None if data.synthetic else layout_folder(data.data_dir)
    return {"layout": layout} if layout in ("line3", "line4") else {}


def run_key(dataset: str, model: str, fold, seed: int, preset: str, settings: dict) -> str:
    """Identity of one leaderboard run: dataset, model, fold, seed, preset and a short hash of
    everything else that changes its result (training settings, model overrides, simulator)."""
    digest = short_digest(json.dumps(settings, sort_keys=True, default=str))
    return f"{dataset}/{model}/fold={fold}/seed={seed}/{preset}/{digest}"


@dataclass(frozen=True)
class PlannedRun:
    """One run of a plan: its key, its spec, and the row label and registered model."""

    key: str
    spec: RunSpec
    name: str  # row label (a model or a variant label)
    base: str  # registered model

    @property
    def dataset(self) -> str:
        return self.spec.data.name


@dataclass(frozen=True)
class LeaderboardPlan:
    """`models` on each of `datasets`: the files' folds (`folds` > 0 where a dataset has them)
    or `seeds`; the simulator takes `simulator` keyword arguments; model fields from
    `settings` (see `ModelSettings`); the test set scored under each of `histories`."""

    datasets: tuple[DataSpec, ...]
    models: tuple[str, ...]
    preset: str = DEFAULT_PRESET
    seeds: tuple[int, ...] = (0,)
    folds: int = 0
    simulator: dict = field(default_factory=dict)
    settings: ModelSettings = field(default_factory=ModelSettings)
    histories: tuple[str, ...] = ("window",)

    def __post_init__(self) -> None:  # the default history is always scored: say so in the key
        object.__setattr__(self, "histories", tuple(dict.fromkeys(("window", *self.histories))))

    @classmethod
    def of(
        cls,
        datasets: Iterable[tuple[str | None, str | None]],
        models: Iterable[str],
        preset: str = DEFAULT_PRESET,
        seeds: Iterable[int] = (0,),
        folds: int = 0,
        simulator: Mapping | None = None,
        overrides: Mapping | None = None,
        variants: Mapping | None = None,
        dataset_overrides: Mapping | None = None,
        histories: Iterable[str] = ("window",),
    ) -> LeaderboardPlan:
        """A plan from plain values, validated before any run: a folder with no format is read
        with `auto`, a folder with `synthetic` is refused, model fields are checked."""
        return cls(
            tuple(DataSpec(d, f) for d, f in datasets),
            tuple(models),
            preset,
            tuple(seeds),
            folds,
            dict(simulator or {}),
            ModelSettings.parse(overrides, variants, dataset_overrides),
            tuple(dict.fromkeys(("window", *histories))),
        )

    def data(self) -> list[list[DataSpec]]:
        """Per dataset, the `DataSpec` of each (fold, seed) it is trained on."""
        out = []
        for spec in self.datasets:
            folder = spec.data_dir if spec.data_dir and Path(spec.data_dir).exists() else None
            kw = self.simulator if spec.synthetic else {}
            out.append(
                [
                    dataclasses.replace(spec, fold=fold, seed=seed, kw=dict(kw))
                    for fold, seed in fold_plan(spec.data_format, self.folds, self.seeds, folder)
                ]
            )
        return out

    def settings_of(self, train_config: TrainConfig | None) -> dict:
        """The training settings a run's key hashes (histories only when not window alone:
        keys of earlier files stay valid)."""
        settings = train_settings(train_config)
        if list(self.histories) != ["window"]:
            settings = {**settings, "histories": list(self.histories)}
        return settings

    def runs(self, train_config: TrainConfig | None = None) -> list[PlannedRun]:
        """Every run, datasets then folds/seeds then models, with its key."""
        train = train_config or TrainConfig()
        settings = self.settings_of(train)
        evaluation = EvalConfig.of(train, self.histories)
        out = []
        for per_dataset in self.data():
            for data in per_dataset:
                for name in self.models:
                    base, fields = self.settings.cell(data.name, name)
                    row_train = self.settings.train_of(name, train)  # a tuned variant's lr
                    blob = {
                        "train": settings if row_train is train else self.settings_of(row_train),
                        "model": fields,
                        # OUT/line3 and OUT/line4 of `prepare`'s output are keyed by their
                        # layout (they share OUT/pykt's dataset name); other folders as before
                        "data": {"format": data.data_format, **layout_key(data), **data.kw},
                        **({"variant_of": base} if base != name else {}),
                    }
                    key = run_key(data.name, name, data.fold, data.seed, self.preset, blob)
                    label = name if base != name else None
                    spec = RunSpec(
                        base, self.preset, fields, None, data.seed, label, row_train, evaluation,
                        data,
                    )  # fmt: skip
                    out.append(PlannedRun(key, spec, name, base))
        return out


def profile_plan(params: Mapping) -> LeaderboardPlan:
    """The leaderboard plan of a profile's parameters (notebook 10's names, `PROFILE_DEFAULTS`
    for those not given; other parameters, e.g. training or workers, are not the plan's): its
    datasets plus the simulator, iDKT's BKT iterations under the profile's own overrides."""
    p = {**PROFILE_DEFAULTS, **{k: v for k, v in params.items() if k in PROFILE_DEFAULTS}}
    datasets = [tuple(d) for d in p["datasets"]] + ([(None, "synthetic")] if p["simulator"] else [])
    given = dict(p["overrides"] or {})
    return LeaderboardPlan.of(
        datasets,
        p["models"],
        preset=p["preset"],
        seeds=p["seeds"],
        folds=p["folds"],
        simulator={k: p[k] for k in ("num_students", "seq_len", "num_c")},
        overrides={**given, "idkt": {"bkt_max_iter": p["bkt_max_iter"], **given.get("idkt", {})}},
        variants=p["variants"] or {},
        dataset_overrides=p["dataset_overrides"] or {},
        histories=p["histories"],
    )


# notebook 10's execution parameters (its parameter cell's values): used by a trained plan only
RUN_DEFAULTS = {"resume_file": None, "workers": 1, "executor": "process", "ray_address": None}
# plan parameters that notebook 10's ordinal section reads too (the simulator's size, seeds,
# preset and window), used even when the binary runs come from a results file
ORDINAL_READS = ("seeds", "preset", "num_students", "seq_len", "num_c", "max_len")


def unused_with_results(params: Mapping, ordinal: bool) -> list[str]:
    """The parameters in `params` (notebook 10's names) that differ from their defaults
    (`PROFILE_DEFAULTS`, `RUN_DEFAULTS`) and that nothing reads when the notebook shows stored
    runs (its `results_file` set): the plan's and the execution's, except those its ordinal
    section reads when `ordinal` (it trains ordinal models). The notebook refuses them by name
    rather than accept and ignore them."""
    defaults = {**PROFILE_DEFAULTS, **RUN_DEFAULTS}
    kept = ORDINAL_READS if ordinal else ()
    return [k for k, v in params.items() if k in defaults and k not in kept and v != defaults[k]]
