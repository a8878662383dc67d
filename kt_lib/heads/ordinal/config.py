"""Seed 002's configuration for the ordinal models: its arguments and YAML format, resolved into
the fields of the model configs (kt_lib.models.attention_gpcm), beside the shipped configs and
mechanisms.

`seed_model_fields` maps the seed's constructor/factory arguments (n_questions, n_responses,
embed_dim, attention_config, attention_mechanisms, fusion_method) to ModularGPCMConfig fields
with the seed's defaults; the model's constructor, `create_attention_gpcm` and the YAML loader all
use it, so one set of arguments means one model whichever way it is given.

The file has three sections (kt_lib/configs/ordinal/attention_config.yaml is the seed's example):
    attention: type (modular | basic), mechanisms, fusion_method, config (AttentionConfig fields)
    model:     n_questions, n_responses, embed_dim
    training:  learning_rate, batch_size, epochs, gradient_checkpointing, mixed_precision
Every key is either used or refused with an error naming the file and the key (nothing is
silently dropped). Where each key goes:
    learning_rate / batch_size / epochs -> TrainConfig lr / batch_size / epochs
    mixed_precision: true / false       -> TrainConfig precision "bf16" (autocast) / "fp32"
    gradient_checkpointing              -> the model config's gradient_checkpointing
`read_seed_config` reads a file into a `SeedFile`, whose `model_fields` gives the registry name and
config fields; `kt_lib.models.gpcm_interface.load_seed_config` validates them into the model config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from ...config import read_mapping
from ...data.dataset import KTDataset
from . import AttentionConfig

SEED_MECHANISMS = ("ordinal_aware", "response_conditioned", "ordinal_pattern", "qwk_aligned")
# seed 002's defaults for its constructor, factory and YAML: embed_dim 512, and when no
# attention_config is given, AttentionConfig(embed_dim, n_cats, n_heads=8, dropout=0.1)
SEED_DEFAULTS = {"d": 512, "K": 4}
SEED_ATTENTION_DEFAULTS = {"n_heads": 8, "dropout": 0.1}
CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "ordinal"
SEED_CONFIG = CONFIG_DIR / "attention_config.yaml"  # seed 002's YAML example, verbatim

_TRAIN_FIELDS = {"learning_rate": "lr", "batch_size": "batch_size", "epochs": "epochs"}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


_TRAINING_CHECKS = {  # key -> (test, what it must be)
    "learning_rate": (lambda v: _number(v) and 0 < v < math.inf, "a finite number > 0"),
    "batch_size": (_count, "an integer >= 1"),
    "epochs": (_count, "an integer >= 1"),
    "gradient_checkpointing": (lambda v: isinstance(v, bool), "true or false"),
    "mixed_precision": (lambda v: isinstance(v, bool), "true or false"),
}
SECTIONS = {  # every key the format has; anything else is refused
    "attention": {"type", "mechanisms", "fusion_method", "config"},
    "model": {"n_questions", "n_responses", "embed_dim"},
    "training": set(_TRAINING_CHECKS),
}


@dataclass
class SeedFile:
    """The sections of one seed-002 YAML file, checked for structure, keys and training types."""

    source: str  # the file (or "seed config" for a dict), named in every error
    attention_type: str = "modular"  # modular -> ModularAttentionGPCM, basic -> AttentionGPCM
    mechanisms: list[str] | None = None  # registry names; None: the seed's default four
    fusion_method: str | None = None  # None: the seed's default, concat
    attention_config: dict | None = None  # AttentionConfig fields as written; None: seed defaults
    n_questions: int | None = None  # model.n_questions (None: from the dataset)
    n_responses: int | None = None  # model.n_responses
    embed_dim: int | None = None  # model.embed_dim
    gradient_checkpointing: bool | None = None  # training.gradient_checkpointing (model field)
    train: dict = field(default_factory=dict)  # TrainConfig overrides: lr, batch_size, ...

    def model_fields(self, dataset: KTDataset | None = None, **overrides) -> tuple[str, dict]:
        """(registry name, model config fields). With `dataset`, the vocabulary comes from the
        data (n_questions is replaced; n_responses must match its K); `overrides` are config
        fields applied last (e.g. d=16 for a smoke run)."""
        where = self.source
        n_questions, n_responses = self.n_questions, self.n_responses
        if dataset is not None:
            if n_responses is not None and n_responses != dataset.K:
                raise ValueError(
                    f"{where}: model.n_responses={n_responses} but the data has K={dataset.K} "
                    "categories"
                )
            n_questions, n_responses = dataset.num_c, dataset.K
        elif n_questions is None:
            raise ValueError(f"{where}: model.n_questions is required (or pass dataset=)")
        modular = self.attention_type == "modular"
        fields_ = seed_model_fields(
            n_questions,
            n_responses,
            self.embed_dim,
            self.attention_config,
            self.mechanisms,
            self.fusion_method,
            where=f"{where}: attention.config" if self.attention_config is not None else where,
            modular=modular,
        )
        if self.gradient_checkpointing is not None:
            fields_["gradient_checkpointing"] = self.gradient_checkpointing
        fields_.update(overrides)
        return ("modular_attention_gpcm" if modular else "attention_gpcm"), fields_


def read_seed_config(source: str | Path | dict) -> SeedFile:
    """Read seed 002's YAML (or the same as a dict): unknown sections/keys and wrong training
    values raise ValueError naming the file and the key. Model fields are checked when the model
    config is built (`kt_lib.models.gpcm_interface.load_seed_config`), with the file named there
    too."""
    where = "seed config" if isinstance(source, dict) else str(source)
    raw = dict(source) if isinstance(source, dict) else read_mapping(source)
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise ValueError(f"{where}: unknown section(s) {unknown}; valid: {sorted(SECTIONS)}")
    sec = {}
    for name, keys in SECTIONS.items():
        value = raw.get(name) or {}
        if not isinstance(value, dict):
            raise ValueError(f"{where}: section {name!r} must be a mapping, got {value!r}")
        bad = sorted(set(value) - keys)
        if bad:
            raise ValueError(f"{where}: unknown key(s) {bad} in {name!r}; valid: {sorted(keys)}")
        sec[name] = value
    att, mod, tr = sec["attention"], sec["model"], sec["training"]
    for key, value in tr.items():
        ok, want = _TRAINING_CHECKS[key]
        if not ok(value):
            text = isinstance(value, str) and key == "learning_rate"
            hint = " (YAML reads 1e-3 as text; write 1.0e-3)" if text else ""
            raise ValueError(f"{where}: training.{key} must be {want}, got {value!r}{hint}")

    kind = att.get("type", "modular")
    if kind not in ("modular", "basic"):
        raise ValueError(f"{where}: attention.type must be 'modular' or 'basic', got {kind!r}")
    if kind == "basic" and {"mechanisms", "config", "fusion_method"} & set(att):
        raise ValueError(f"{where}: attention.mechanisms/config/fusion_method need type: modular")
    mechanisms = att.get("mechanisms")
    if mechanisms is not None and not (
        isinstance(mechanisms, list) and all(isinstance(m, str) for m in mechanisms)
    ):
        raise ValueError(f"{where}: attention.mechanisms must be a list of names")
    config = att.get("config")
    if config is not None and not isinstance(config, dict):
        raise ValueError(f"{where}: attention.config must be a mapping")
    train = {new: tr[old] for old, new in _TRAIN_FIELDS.items() if old in tr}
    if "mixed_precision" in tr:
        train["precision"] = "bf16" if tr["mixed_precision"] else "fp32"
    return SeedFile(
        source=where,
        attention_type=kind,
        mechanisms=mechanisms,
        fusion_method=att.get("fusion_method"),
        attention_config=config,
        n_questions=mod.get("n_questions"),
        n_responses=mod.get("n_responses"),
        embed_dim=mod.get("embed_dim"),
        gradient_checkpointing=tr.get("gradient_checkpointing"),
        train=train,
    )


# --- the seed's arguments as model config fields -------------------------------------------

_ATTENTION_TO_MODEL = {  # AttentionConfig field -> ModularGPCMConfig field
    "embed_dim": "d",
    "n_heads": "n_heads",
    "n_cats": "K",
    "dropout": "dropout",
    "distance_penalty": "distance_penalty",
    "window_size": "window_size",
    "correct_threshold": "correct_threshold",
}
_MODEL_NAMES = {"d": "embed_dim", "K": "n_responses"}  # seed names of the model's fields


def seed_model_fields(
    n_questions: int,
    n_responses: int | None = None,
    embed_dim: int | None = None,
    attention_config: AttentionConfig | dict | None = None,
    mechanisms: list[str] | None = None,
    fusion_method: str | None = None,
    config_fields: dict | None = None,
    where: str = "seed arguments",
    modular: bool = True,
) -> dict:
    """Model config fields for seed 002's arguments (constructor, factory and YAML alike).

    Seed defaults fill what is not given: n_responses 4, embed_dim 512, and without an
    attention_config the seed's AttentionConfig(n_heads=8, dropout=0.1). `config_fields` are
    further GPCMConfig fields (e.g. n_layers, loss, max_len). A value given twice, in the
    attention config and elsewhere, must agree (else ValueError naming both).
    """
    given = {"num_c": n_questions, "K": n_responses, "d": embed_dim}
    given = {k: v for k, v in given.items() if v is not None}
    explicit = dict(config_fields or {})
    clash = sorted(set(given) & set(explicit))
    if clash:
        raise ValueError(f"{where}: {clash} given both as seed arguments and as config fields")
    given.update(explicit)
    if not modular:
        if attention_config is not None or mechanisms is not None or fusion_method is not None:
            raise ValueError(
                f"{where}: attention_config, mechanisms and fusion_method need the modular model"
            )
        return {**SEED_DEFAULTS, **given}
    if attention_config is None:
        att = {k: v for k, v in SEED_ATTENTION_DEFAULTS.items() if k not in given}
    else:
        att = _attention_fields(attention_config, where)
        for target, value in att.items():
            if target in given and given[target] != value:
                key = next(k for k, t in _ATTENTION_TO_MODEL.items() if t == target)
                raise ValueError(
                    f"{where}: {key}={value} disagrees with the model's "
                    f"{_MODEL_NAMES.get(target, target)}={given[target]}"
                )
    out = {**SEED_DEFAULTS, **att, **given}
    if mechanisms is not None:
        out["mechanisms"] = list(mechanisms)
    if fusion_method is not None:
        out["fusion"] = fusion_method
    return out


def _attention_fields(attention_config: AttentionConfig | dict, where: str) -> dict:
    """An AttentionConfig (all its fields) or a dict (the fields given) as model fields."""
    if isinstance(attention_config, AttentionConfig):
        given = {f.name: getattr(attention_config, f.name) for f in fields(AttentionConfig)}
    elif isinstance(attention_config, dict):
        valid = sorted(_ATTENTION_TO_MODEL)
        bad = sorted(set(attention_config) - set(valid))
        if bad:
            raise ValueError(f"{where}: unknown field(s) {bad} for AttentionConfig; valid: {valid}")
        given = dict(attention_config)
    else:
        raise TypeError(
            f"{where}: attention_config must be an AttentionConfig or a dict, "
            f"got {type(attention_config).__name__}"
        )
    return {_ATTENTION_TO_MODEL[k]: v for k, v in given.items()}
