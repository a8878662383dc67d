"""The model API: `ModelOutput`, the `KTModel` base class, the registry and `build_model`.

# B batch, L steps, K response categories
Causal contract: `logits[:, t]` predicts `r[:, t]` from q/pid at steps <= t and r at steps < t.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..config import from_dict, read_mapping, require
from ..data.dataset import Batch, KTDataset
from ..fileio import short_digest
from ..registry import Registry

MODELS: Registry = Registry("model")
register = MODELS.register
VOCABULARY = ("num_c", "num_pid", "K")  # config fields `build_model` fills from the dataset


@dataclass
class ModelOutput:
    """What every model's forward returns."""

    logits: torch.Tensor  # [B, L] binary logits, or [B, L, K] category logits for ordinal models
    losses: dict[str, torch.Tensor] = field(
        default_factory=dict
    )  # auxiliary terms, already weighted
    attention: dict[str, torch.Tensor] | None = None  # name -> [B, H, L, S], only if asked
    extras: dict[str, Any] = field(default_factory=dict)  # theta, beta, mastery, L0, T, ...


@dataclass
class BaseConfig:
    """Fields every model config has (the vocabulary, filled from the dataset by `build_model`),
    the named sizes (`PRESETS`) and the checks every model shares.

    `PRESETS` maps a preset name to the fields it sets over the defaults; `default` is the
    dataclass defaults. A subclass writes its own table (`{**Parent.PRESETS, ...}` to extend).
    `validate()` checks the shared fields of whichever a config has: `d` and `n_heads` (> 0, heads
    divide d), each field named `*dropout` (None or in [0, 1)), `max_len`, `n_blocks`,
    `n_layers` (>= 1); `BINARY = True` refuses K != 2. A config's own `validate` calls
    `super().validate()` and adds only its model's rules.
    """

    num_c: int = 0  # number of concepts/skills
    num_pid: int = 0  # number of problems (0: none)
    K: int = 2  # response categories

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {"tiny": {}, "paper": {}}
    BINARY: ClassVar[bool] = False  # True: binary responses only (K = 2)
    # fields that change memory or speed only, never the numbers (`preset_settings` leaves
    # them out: editing such a default makes no row stale)
    SAME_NUMBERS: ClassVar[tuple[str, ...]] = ()

    def validate(self) -> None:
        require(self.num_c > 0, f"num_c must be > 0, got {self.num_c}")
        require(self.num_pid >= 0, f"num_pid must be >= 0, got {self.num_pid}")
        require(self.K >= 2, f"K must be >= 2, got {self.K}")
        if self.BINARY:
            require(self.K == 2, f"{type(self).__name__} is binary: K must be 2, got {self.K}")
        names = {f.name for f in dataclasses.fields(self)}
        if {"d", "n_heads"} <= names:
            d, h = self.d, self.n_heads
            require(d > 0 and h > 0, "d and n_heads must be > 0")
            require(d % h == 0, f"d={d} not divisible by n_heads={h}")
        for name in sorted(names):
            value = getattr(self, name)
            if name.endswith("dropout") and value is not None:
                require(0 <= value < 1, f"{name} must be in [0, 1), got {value}")
            if name in ("max_len", "n_blocks", "n_layers"):
                require(value >= 1, f"{name} must be >= 1, got {value}")

    @classmethod
    def preset(cls, name: str = "default", **kw):
        """The config of preset `name` (a key of `PRESETS`, or `default`), fields `kw` on top."""
        if name == "default":
            return cls(**kw)
        return cls(**{**cls.preset_fields(name), **kw})

    @classmethod
    def preset_digest(cls, name: str = "default") -> str:
        """A short digest of what preset `name` sets (its `PRESETS` entry; `default`: nothing).
        A run's row stores it beside the preset's name, which is all its run key holds: a row
        whose digest is not the preset's now was made under other settings of that name.
        Not covered: the config's class defaults (a field the preset leaves to them: rows since
        2026-11-29 store `preset_settings` for those) and what a named file says (SimAKT's
        similarity presets): an edit there is retired by hand."""
        fields = {} if name == "default" else cls.preset_fields(name)
        return short_digest(json.dumps(fields, sort_keys=True))  # plain data only: no repr

    @classmethod
    def preset_settings(cls, name: str = "default") -> dict[str, Any]:
        """Every setting preset `name` builds before a dataset fills the vocabulary (num_c,
        num_pid, K): its `PRESETS` entry over the class defaults, less `SAME_NUMBERS`. A row
        stores it beside the digest: the digest misses an edited class default that the preset
        leaves alone."""
        out = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = copy.deepcopy(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
        out.update({} if name == "default" else cls.preset_fields(name))
        return {k: v for k, v in out.items() if k not in VOCABULARY + cls.SAME_NUMBERS}

    @classmethod
    def preset_fields(cls, name: str) -> dict[str, Any]:
        """A copy of the fields preset `name` sets (KeyError naming the valid presets if none)."""
        if name not in cls.PRESETS:
            valid = ", ".join(["default", *cls.PRESETS])
            raise KeyError(f"unknown preset {name!r} for {cls.__name__}; valid: {valid}")
        return copy.deepcopy(cls.PRESETS[name])

    @classmethod
    def tiny(cls, **kw):
        """Small sizes for tests and smoke runs."""
        return cls.preset("tiny", **kw)

    @classmethod
    def paper(cls, **kw):
        """The published sizes."""
        return cls.preset("paper", **kw)


class KTModel(nn.Module):
    """Base class: subclasses set `config_cls` and implement `forward(batch)`."""

    config_cls: ClassVar[type] = BaseConfig
    registry_name: ClassVar[str] = ""
    # capability tags, read by build_model and by the parametrized model tests
    ordinal: ClassVar[bool] = False  # True: logits are [B, L, K]
    needs: ClassVar[frozenset[str]] = frozenset()  # data fields it cannot run without: "pid"
    attends: ClassVar[bool] = True  # False: no attention weights to show (return_attention -> {})
    memory_maps: ClassVar[bool] = False  # True: some maps are over memory slots, not steps
    # False: an item-only model (no response reaches a prediction; `audit_alignment` then does
    # not ask that changing r_{t-1} move the prediction at t)
    reads_responses: ClassVar[bool] = True
    # why the state `prepare` builds from the training students holds a training student's own
    # log (answers, later questions), which its training predictions then read ("": it does not;
    # the causality audit with that state rebuilt must then pass): DIMKT's difficulty tables,
    # GKT's transition graph
    own_log_in_training_state: ClassVar[str] = ""

    @classmethod
    def check_data(cls, num_pid: int, source: str = "the data") -> None:
        """Refuse data without a field the model needs, before anything is trained."""
        if "pid" in cls.needs and num_pid <= 0:
            raise ValueError(
                f"{cls.registry_name or cls.__name__} needs problem ids (pid), and {source} has "
                "none: use a layout with problem ids (4-line, pykt `questions`, a log with a "
                "problem column), e.g. algebra05"
            )

    def __init__(self, config):
        super().__init__()
        type(self).check_data(getattr(config, "num_pid", 0), "the config")
        self.config = config

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        raise NotImplementedError

    @classmethod
    def fit_to_data(cls, config, dataset: KTDataset, fixed: frozenset[str] = frozenset()):
        """The config to build on `dataset` (its training students); a model whose sizes depend
        on the data (memory banks) adjusts them here and says so, never touching the fields in
        `fixed` (those the caller set explicitly: a search or grid tests exactly what it asked).
        Default: unchanged."""
        return config

    def prepare(self, train: KTDataset) -> None:
        """Fit whatever needs the training students (references, memory banks) before training."""

    def param_groups(self, lr: float) -> list[dict]:
        """Optimizer parameter groups at base learning rate `lr` (`fit` calls it after
        `prepare`); default one group. SimAKT scales its heads' rates by their influence."""
        return [{"params": list(self.parameters())}]

    def on_epoch_start(self, epoch: int, train: KTDataset | None = None) -> None:
        """Per-epoch hook (schedules, bank refreshes)."""

    def schedule_notes(self, epochs: int) -> list[str]:
        """What this model's own schedule would not reach in a training run of at most `epochs`
        epochs (`fit` warns each line); default none."""
        return []

    def loss(self, out: ModelOutput, batch: Batch, epoch: int = 0) -> dict[str, torch.Tensor]:
        """Prediction loss over valid positions plus the model's auxiliary losses; key 'total'."""
        # a mean over valid positions by weights, not by boolean indexing: indexing waits for
        # the GPU to count the positions (a host sync every step)
        m = batch.mask
        r = batch.r.masked_fill(~m, 0)
        if self.ordinal:
            each = F.cross_entropy(out.logits.flatten(0, 1), r.flatten(), reduction="none")
        else:
            each = F.binary_cross_entropy_with_logits(out.logits, r.float(), reduction="none")
        w = m.to(each.dtype).flatten() if self.ordinal else m.to(each.dtype)
        pred = (each * w).sum() / w.sum().clamp(min=1)
        terms = {"pred": pred, **out.losses}
        terms["total"] = sum(terms.values())
        return terms

    def probabilities(self, out: ModelOutput) -> torch.Tensor:
        """P(correct) [B, L] for binary models, category probabilities [B, L, K] for ordinal."""
        return out.logits.softmax(-1) if self.ordinal else torch.sigmoid(out.logits)

    def diagnostics(self, data: KTDataset, **ev) -> dict[str, float]:
        """Model-specific figures on held-out data beside the metrics (e.g. iDKT's agreement with
        its BKT reference); `ev`: batch_size, max_len, device. Default: none."""
        return {}

    def extra_state(self) -> dict[str, torch.Tensor]:
        """Tensors beyond the state dict to checkpoint (e.g. memory banks); default none."""
        return {}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore what `extra_state` saved."""


def list_models() -> list[str]:
    """Names of every registered model."""
    return MODELS.names()


def make_config(
    name: str, config=None, dataset: KTDataset | None = None, preset: str = "default", **overrides
):
    """Resolve a config for model `name` from a dataclass, dict, YAML/JSON path or preset."""
    cls = MODELS[name].config_cls
    if config is None:
        base = dataclasses.asdict(cls.preset(preset))
    elif isinstance(config, (str, Path)):
        base = read_mapping(config)
    elif isinstance(config, dict):
        base = dict(config)
    elif dataclasses.is_dataclass(config):
        base = dataclasses.asdict(config)
    else:
        raise TypeError(f"config must be a dataclass, dict or path, got {type(config).__name__}")
    if dataset is not None:
        base.update({k: getattr(dataset, k) for k in VOCABULARY})
    base.update(overrides)
    return from_dict(cls, base, source=str(config) if isinstance(config, (str, Path)) else name)


def build_model(
    name: str, config=None, dataset: KTDataset | None = None, preset: str = "default", **overrides
) -> KTModel:
    """Build a registered model; unknown names raise KeyError listing the valid ones."""
    cls = MODELS[name]
    config_given = config is not None
    config = make_config(name, config, dataset, preset, **overrides)
    cls.check_data(config.num_pid, dataset.name if dataset is not None else "the config")
    if dataset is not None:  # a config given whole is taken as it is; a preset may be fitted
        given = {f.name for f in dataclasses.fields(config)} if config_given else set(overrides)
        config = cls.fit_to_data(config, dataset, frozenset(given))
    return cls(config)
