"""A study of record as data: its parts (datasets x models), variants, folds or seeds, recipe and
results file, and the plan of runs it makes (`kt_lib.runs.studies` names the studies and runs
them)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from ..data.prepare import prepare as prepare_raw
from ..models import MODELS
from ..provenance import ROOT
from ..train import TrainConfig
from .plan import LeaderboardPlan
from .spec import ModelSettings

RESULTS = ROOT / "results"
CHECKPOINTS = ROOT / "runs" / "checkpoints"  # git-ignored: per-run epoch checkpoints of studies
# the public datasets' folder: $KT_DATA, else ../shared/data beside the checkout
DATA_ROOT = Path(os.environ.get("KT_DATA") or ROOT.parent / "shared" / "data")
PREPARED = ROOT / "data" / "prepared"  # git-ignored: folders `prepare` makes from raw files


@dataclasses.dataclass(frozen=True)
class Part:
    """Models trained on datasets ((folder name, format) pairs) under a study's plan."""

    datasets: tuple[tuple[str, str], ...]
    models: tuple[str, ...]
    folds: int | None = None  # the study's folds when None; a part's own (e.g. one row's five)


def _dataset_names(part: Part) -> list[str]:
    return [name for name, _ in part.datasets]


@dataclasses.dataclass(frozen=True)
class Study:
    """One study of record: its parts, its variants and the comparisons it answers."""

    name: str
    question: str
    parts: tuple[Part, ...]
    variants: dict = dataclasses.field(default_factory=dict)
    overrides: dict = dataclasses.field(default_factory=dict)
    # dataset folder name -> {model or variant: fields} on that dataset alone (smaller banks)
    dataset_overrides: dict = dataclasses.field(default_factory=dict)
    pairs: tuple[tuple[str, str], ...] = ()
    folds: int = 3  # the files' folds 1-3 (line3) / 0-2 (pykt) where a dataset has folds
    seeds: tuple[int, ...] = (0, 1, 2)  # else these seeds
    preset: str = "paper"
    epochs: int = 30
    patience: int = 5
    histories: tuple[str, ...] = ("window",)
    filling: bool = False  # being filled run by run: `status` lists what is left
    # folders made from raw files on first use: folder -> (prepare's dataset name, raw folder
    # under the data root, prepare options); written under PREPARED/<folder>, read as pykt
    prepare: dict = dataclasses.field(default_factory=dict)
    published: bool = False  # render the published figures beside each cell
    breakdown: bool = False  # render AUC by the scored step's position in the history
    pair_breakdown: bool = False  # and the pairs' differences at each position, pooled
    # only these pairs' differences at each position (a study with many pairs, e.g. the
    # leaderboard's seed questions among its pairs against DKT and AKT)
    breakdown_pairs: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        """Variants and overrides are checked against the models' configs when a study is
        declared, not when its first part runs."""
        ModelSettings.parse(self.overrides, self.variants, self.dataset_overrides)
        bad = [p.folds for p in self.parts if p.folds is not None and p.folds < 1]
        if bad:
            raise ValueError(
                f"study {self.name}: a part's folds must be >= 1 "
                f"(None: the study's {self.folds}), got {bad}"
            )
        stray = [p for p in self.breakdown_pairs if tuple(p) not in self.pairs]
        if stray:
            raise ValueError(f"study {self.name}: breakdown_pairs {stray} are not among its pairs")

    def train_config(self, device: str = "cpu") -> TrainConfig:
        return TrainConfig.recipe(
            "workbook",
            epochs=self.epochs,
            patience=self.patience,
            device=device,
            progress=False,
            verbose=True,
        )

    def first(self, n: int | None) -> Study:
        """The study narrowed to the first `n` folds (or seeds) of each cell, the same run keys:
        `run --first 3` fills every cell's first three before any cell's fourth."""
        if n is None:
            return self
        if n < 1:
            raise ValueError(f"first must be >= 1, got {n}")
        parts = tuple(
            p if p.folds is None else dataclasses.replace(p, folds=min(n, p.folds))
            for p in self.parts
        )
        return dataclasses.replace(
            self, parts=parts, folds=min(n, self.folds), seeds=self.seeds[:n]
        )

    def only(self, models: Sequence[str] | None, datasets: Sequence[str] | None = None) -> Study:
        """The study narrowed to the cells of `models` (the labels `status` lists: a model or a
        variant) and of `datasets` (None: all), the same run keys, so `run --models a b` fills
        those cells first and leaves the others for a later run (a long run need not hold a core
        while cheaper ones wait)."""
        if not models and not datasets:
            return self
        names = [(models, "model", lambda p: p.models), (datasets, "dataset", _dataset_names)]
        for asked, kind, of in names:
            known = list(dict.fromkeys(x for part in self.parts for x in of(part)))
            unknown = [x for x in asked or () if x not in known]
            if unknown:
                raise ValueError(f"study {self.name} has no {kind} {unknown}; its {kind}s: {known}")
        parts = [
            Part(
                tuple(d for d in p.datasets if not datasets or d[0] in datasets),
                tuple(m for m in p.models if not models or m in models),
                p.folds,
            )
            for p in self.parts
        ]
        return dataclasses.replace(self, parts=tuple(p for p in parts if p.models and p.datasets))

    def adding(self, models: Sequence[str] | None) -> Study:
        """The study with `models` (registered names, or the study's own variant labels) trained
        on every one of its datasets (narrow them with `only`: a model that needs problem ids
        refuses skill-only data, a binary one graded data) under its recipe, preset and folds or
        seeds. Their runs are keyed as if the study declared them, so they pair with its
        committed rows (`kt study run NAME --add M --out FILE`, then `kt leaderboard
        results/NAME.json FILE --pairs M:dkt ...`). The study's pairs are left as they are."""
        models = list(dict.fromkeys(models or ()))
        if not models:
            return self
        have = {m for part in self.parts for m in part.models}
        for m in models:
            if m in have:
                raise ValueError(f"study {self.name} has {m!r} already")
            if m not in MODELS and m not in self.variants:
                raise ValueError(
                    f"--add {m!r}: not a registered model (nor a variant of study {self.name}); "
                    f"models: {', '.join(sorted(MODELS))}"
                )
        datasets = tuple(dict.fromkeys(d for part in self.parts for d in part.datasets))
        return dataclasses.replace(self, parts=(*self.parts, Part(datasets, tuple(models))))

    @property
    def path(self) -> Path:
        return RESULTS / f"{self.name}.json"

    @property
    def retired_path(self) -> Path:
        """Rows taken out of the study by `kt study retire` (a fix made them wrong), with why."""
        return RESULTS / "retired" / f"{self.name}.json"

    def folder(self, name: str, data_root: str | Path = DATA_ROOT) -> Path:
        """Where dataset folder `name` is read: prepared ones under PREPARED (pykt layout),
        the others under `data_root`."""
        if name in self.prepare:
            return PREPARED / name / "pykt"
        return Path(data_root) / name

    def ensure_prepared(self, data_root: str | Path = DATA_ROOT) -> None:
        """Prepare each missing `prepare` folder from its raw files under `data_root`."""
        for name, (dataset, raw, options) in self.prepare.items():
            if not self.folder(name).is_dir():
                print(f"{self.name}: preparing {name} from {Path(data_root) / raw}")
                prepare_raw(dataset, Path(data_root) / raw, PREPARED / name, **options)

    def part_plans(self, data_root: str | Path = DATA_ROOT) -> list[LeaderboardPlan]:
        """Each part as a `LeaderboardPlan`, its datasets found under `data_root` by name."""
        return [
            LeaderboardPlan.of(
                [(str(self.folder(folder, data_root)), fmt) for folder, fmt in part.datasets],
                part.models,
                preset=self.preset,
                seeds=self.seeds,
                folds=self.folds if part.folds is None else part.folds,
                overrides=self.overrides,
                variants=self.variants,
                dataset_overrides=self.dataset_overrides,
                histories=self.histories,
            )
            for part in self.parts
        ]

    def plan(self, data_root: str | Path = DATA_ROOT) -> list[dict]:
        """Every run of the study: dataset, model (a label), its registered model (`base`), fold,
        seed, run_key (as `run_plan` keys them) and epochs cap, without running anything."""
        train = self.train_config()
        return [
            dict(
                dataset=r.dataset,
                model=r.name,
                base=r.base,
                fold=r.spec.data.fold,
                seed=r.spec.seed,
                key=r.key,
                epochs=r.spec.train.epochs,
            )  # fmt: skip
            for plan in self.part_plans(data_root)
            for r in plan.runs(train)
        ]
