"""Typed run specs: what one training run is, and the model settings of a plan.

    RunSpec       model, preset, config fields (validated against the model's config
                  dataclass), seed, label, `TrainConfig`, `EvalConfig`, `DataSpec`
    EvalConfig    how the test set is scored: batch size, window length, device, histories,
                  stride of the sliding history
    Variant       a labelled configuration of a registered model (a row label of its own)
    ModelSettings a plan's per-model fields, variants and per-dataset fields, parsed once

Model fields live in their own mapping (`RunSpec.fields`), apart from the run's settings, so a
field may have any name its config has. `DEFAULT_PRESET` is the preset of every run that names
none (notebooks, grids, the leaderboard and `kt run`).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..evaluate import HISTORIES
from ..models import MODELS
from ..runtime import PRECISIONS, resolve_precision
from ..train import TrainConfig
from .data import DataSpec

DEFAULT_PRESET = "tiny"

# TrainConfig fields that do not change a run's numbers
BOOKKEEPING = (
    "device",
    "checkpoint",
    "resume",
    "progress",
    "verbose",
    "eval_batch_size",
    "keep_freed_memory",
)

# TrainConfig fields added after results files were committed: left out of a run's identity at
# their defaults, so the keys of every earlier run stay valid
LATER_DEFAULTS = {"optimizer": "adamw", "momentum": 0.0, "lr_decay": 1.0, "lr_decay_every": 0}
LATER_DEFAULTS |= {"loss_per": "step"}


def train_settings(train_config: TrainConfig | None) -> dict:
    """The fields of a `TrainConfig` that change a run's numbers (for run identities; those of
    `LATER_DEFAULTS` only where they differ from their defaults)."""
    given = dataclasses.asdict(train_config or TrainConfig())
    return {
        k: v
        for k, v in given.items()
        if k not in BOOKKEEPING and not (k in LATER_DEFAULTS and v == LATER_DEFAULTS[k])
    }


def train_record(settings: dict, train: TrainConfig) -> dict:
    """A results row's `train`: `settings` (what its key hashes) with the precision resolved
    (None trains fp32 on a CPU, tf32 on CUDA)."""
    return {**settings, "precision": resolve_precision(train.precision, train.device)}


def config_fields(model: str) -> list[str]:
    """The config field names of registered model `model` (KeyError listing the models)."""
    return [f.name for f in dataclasses.fields(MODELS[model].config_cls)]


def check_fields(model: str, fields: Mapping, where: str) -> dict:
    """`fields` as a dict, refusing names that `model`'s config does not have (a typo would
    fail every run, or change nothing)."""
    if not isinstance(fields, Mapping):
        raise ValueError(f"{where}: expected a mapping of config fields, got {fields!r}")
    known = config_fields(model)
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise ValueError(
            f"{where}: {model} has no config field(s) {unknown}; fields: {', '.join(sorted(known))}"
        )
    return dict(fields)


@dataclass(frozen=True)
class EvalConfig:
    """How a run's test set is scored (`train.evaluate_protocols`): both row rules under each
    history; `window` is always scored (the default protocol)."""

    batch_size: int = 128
    max_len: int = 200
    device: str = "cpu"
    histories: tuple[str, ...] = ("window",)
    stride: int = 1

    def __post_init__(self) -> None:
        histories = tuple(dict.fromkeys(("window", *self.histories)))
        bad = [h for h in histories if h not in HISTORIES]
        if bad:
            raise ValueError(f"EvalConfig.histories: unknown {bad}; expected some of {HISTORIES}")
        for name in ("batch_size", "max_len", "stride"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"EvalConfig.{name} must be an integer >= 1, got {value!r}")
        if self.stride > self.max_len:
            raise ValueError(
                f"EvalConfig.stride {self.stride} > max_len {self.max_len}: the sliding history "
                "would leave the steps between windows unscored"
            )
        object.__setattr__(self, "histories", histories)

    @classmethod
    def of(cls, train: TrainConfig, histories=("window",), stride: int = 1) -> EvalConfig:
        """The evaluation that goes with a training config (its eval batch, window, device)."""
        return cls(train.eval_batch_size, train.max_len, train.device, tuple(histories), stride)

    def loader(self) -> dict:
        """The keyword arguments `evaluate`, `evaluate_protocols` and `diagnostics` share."""
        return {"batch_size": self.batch_size, "max_len": self.max_len, "device": self.device}


@dataclass(frozen=True)
class RunSpec:
    """One seeded training run. `fields` go over the preset (or `config`: a dataclass, mapping
    or YAML/JSON path); `eval` None: `EvalConfig.of(train)`; `data` None: the caller's bundle."""

    model: str
    preset: str = DEFAULT_PRESET
    fields: dict[str, Any] = field(default_factory=dict)
    config: Any = None
    seed: int = 0
    label: str | None = None
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig | None = None
    data: DataSpec | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.fields, Mapping):
            raise ValueError(f"RunSpec.fields must be a mapping, got {self.fields!r}")
        if not isinstance(self.train, TrainConfig):
            raise ValueError(f"RunSpec.train must be a TrainConfig, got {type(self.train)}")
        if self.train.seed not in (TrainConfig.seed, self.seed):  # fit takes the run's seed
            raise ValueError(
                f"RunSpec.seed={self.seed} seeds the run; its TrainConfig.seed={self.train.seed} "
                f"would be ignored: set RunSpec(seed={self.train.seed}) instead"
            )
        # a run's own copy: nested mappings (a similarity config) are never shared between runs
        object.__setattr__(self, "fields", copy.deepcopy(dict(self.fields)))
        if self.eval is None:
            object.__setattr__(self, "eval", EvalConfig.of(self.train))

    @property
    def name(self) -> str:
        """The row label of its results."""
        return self.label or self.model

    def validate(self) -> RunSpec:
        """Refuse an unregistered model or fields its config lacks, and windows longer than
        the model's positions (`max_len` of its config), before any work."""
        check_fields(self.model, self.fields, f"run {self.name!r}")
        cls = MODELS[self.model].config_cls
        if "max_len" in config_fields(self.model) and self.config is None:
            preset = {} if self.preset == "default" else cls.PRESETS.get(self.preset, {})
            default = next(f.default for f in dataclasses.fields(cls) if f.name == "max_len")
            positions = {"max_len": default, **preset, **self.fields}["max_len"]
            if isinstance(positions, int) and self.train.max_len > positions:
                raise ValueError(
                    f"run {self.name!r}: windows of {self.train.max_len} steps (--max-len) but "
                    f"preset {self.preset!r} gives the model {positions} positions (max_len): "
                    f"pass --max-len {positions}, or --set max_len={self.train.max_len}"
                )
        return self


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


# the training settings a variant may carry beside its model fields: name -> (check, wanted);
# their ranges and combinations with the plan's recipe are TrainConfig.validate's (train_of).
# None stands for the recipe's value, except for grad_clip, where it means no clipping
VARIANT_TRAINING = {
    "lr": (lambda v: _number(v) and v > 0, "a number > 0"),
    "precision": (lambda v: v in PRECISIONS, f"one of {PRECISIONS}"),
    "epochs": (_positive_int, "an integer >= 1"),
    "batch_size": (_positive_int, "an integer >= 1"),
    "patience": (_positive_int, "an integer >= 1"),
    "grad_clip": (lambda v: v is None or (_number(v) and v > 0), "None (no clipping) or > 0"),
    "loss_per": (lambda v: isinstance(v, str), "a name"),
    "optimizer": (lambda v: isinstance(v, str), "a name"),
    "momentum": (_number, "a number"),
    "lr_decay": (_number, "a number"),
    "lr_decay_every": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
}


@dataclass(frozen=True)
class Variant:
    """A labelled configuration of a registered model, e.g. ikt3_lambda0 = ikt3 with
    lambda_target 0: its rows carry the label as `model` and the model as `variant_of`.
    Beside the model fields a variant may carry training settings (`VARIANT_TRAINING`): `lr` (a
    tuned configuration's learning rate), `precision` (fp32, tf32, bf16, auto: a precision
    study's rows), and an author's own training (`epochs`, `batch_size`, `patience`,
    `grad_clip`, `loss_per`, `optimizer`, `momentum`, `lr_decay`, `lr_decay_every`: e.g. a
    longer cap, or SGD with a stepped rate). Its runs train with them, the rest of the recipe
    as every row's."""

    label: str
    model: str
    fields: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, label: str, given: Mapping | str) -> Variant:
        """A variant from {"model": name, [training settings,] **fields} (or a bare model
        name)."""
        fields = dict(given) if isinstance(given, Mapping) else {"model": given}
        model = fields.pop("model", None)
        train = {k: fields.pop(k) for k in VARIANT_TRAINING if k in fields}
        train = {k: v for k, v in train.items() if v is not None or k == "grad_clip"}
        for name, value in train.items():
            ok, wanted = VARIANT_TRAINING[name]
            if not ok(value):
                raise ValueError(f"variant {label!r}: {name} must be {wanted}, got {value!r}")
        for name in ("lr", "grad_clip", "momentum", "lr_decay"):
            if train.get(name) is not None:
                train[name] = float(train[name])
        if label in MODELS:
            raise ValueError(
                f"variant {label!r} has the name of a registered model; give it another label"
            )
        if not isinstance(model, str) or model not in MODELS:
            raise ValueError(
                f"variant {label!r} must name a registered model under 'model' (got {model!r}); "
                f"models: {', '.join(sorted(MODELS))}"
            )
        checked = check_fields(model, fields, f"variant {label!r}")
        return cls(label, model, checked, train)


@dataclass(frozen=True)
class ModelSettings:
    """A plan's model settings: `overrides` (model or variant label -> fields), `variants`
    (label -> Variant) and `dataset_overrides` (dataset name -> {model or label: fields}, on
    that dataset alone; an entry for a model does not reach its variants)."""

    overrides: dict[str, dict] = field(default_factory=dict)
    variants: dict[str, Variant] = field(default_factory=dict)
    dataset_overrides: dict[str, dict[str, dict]] = field(default_factory=dict)

    @classmethod
    def parse(
        cls,
        overrides: Mapping | None = None,
        variants: Mapping | None = None,
        dataset_overrides: Mapping | None = None,
    ) -> ModelSettings:
        """Validated settings: every name is a registered model or a variant label and every
        field is one of its model's config fields. Models the plan does not train may appear
        (a profile's file may be run a part at a time)."""
        parsed = {label: Variant.parse(label, v) for label, v in (variants or {}).items()}
        settings = cls({}, parsed, {})
        for name, fields in (overrides or {}).items():
            settings.overrides[name] = settings._fields(name, fields, f"overrides[{name!r}]")
        for dataset, per_model in (dataset_overrides or {}).items():
            where = f"dataset_overrides[{dataset!r}]"
            if not isinstance(per_model, Mapping):
                raise ValueError(f"{where} must map model names to fields")
            settings.dataset_overrides[dataset] = {
                name: settings._fields(name, fields, f"{where}[{name!r}]")
                for name, fields in per_model.items()
            }
        return settings

    def _fields(self, name: str, fields, where: str) -> dict:
        if name not in MODELS and name not in self.variants:
            raise ValueError(f"{where}: expected a registered model or a variant label")
        return check_fields(self.base(name), fields, where)

    def base(self, name: str) -> str:
        """The registered model of a row label."""
        return self.variants[name].model if name in self.variants else name

    def train_of(self, name: str, train: TrainConfig) -> TrainConfig:
        """The training config of `name`'s runs: `train`, with a variant's own training settings
        where it has them."""
        variant = self.variants.get(name)
        own = {} if variant is None else variant.train
        if not own:
            return train
        mine = dataclasses.replace(train, **own)
        try:  # ranges and combinations (momentum needs SGD, a decay its period) on this recipe
            mine.validate()
        except ValueError as e:
            raise ValueError(f"variant {name!r}: {e}") from e
        return mine

    def cell(self, dataset: str, name: str) -> tuple[str, dict]:
        """(registered model, config fields) of `name` on `dataset`: a variant's model
        overrides, its own fields, `overrides[label]`, then the dataset's entry (each merge is
        shallow: a `similarity` mapping replaces the whole similarity config). A name that is
        not registered is kept: it fails in its run, recorded like any failure."""
        base = self.base(name)
        fields = {**self.overrides.get(base, {})}
        if name in self.variants:
            fields.update(self.variants[name].fields)
            fields.update(self.overrides.get(name, {}))
        fields.update(self.dataset_overrides.get(dataset, {}).get(name, {}))
        return base, fields
