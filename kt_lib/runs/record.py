"""`RunRecord`: the one schema of a results row, whoever ran it (a notebook, a grid, the
leaderboard, `kt run`, a study).

A row is flat: identity (dataset, model, fold, seed, variant or cell label, preset, factors),
then the result's figures (test_<metric>, test_<metric>@<rows>/<history>, valid_<headline>,
best_epoch, epochs, params, train/prepare seconds, threads, diag_<figure>), then how it ran
(data format, the split's protocol statement, run_key, the preset's digest, error and
traceback of a failed run, wall seconds, device, the native kernels used, commit, date,
training settings). `model` is the row's label: a variant's label with its registered model in
`variant_of` (a grid names its cell in `label` beside the registered `model`). Fields that do
not apply (None) are left out of the row, so the rows of the committed results files
(results/*.json) are rows of this schema.

A run key holds a preset's name, not what it sets: `preset_digest` and `preset_settings` (the
preset over the class defaults; both stored since 2026-11-29) let `stale_preset_rows` find the
rows made before their preset or a default it relies on was edited (a test keeps the committed
files free of them; `kt study status` names them).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from ..models import MODELS

# per-run fields of a results file that are not table columns
NESTED = ("valid", "history", "protocols", "train", "preset_settings")


def now() -> str:
    """The date a row records (UTC, seconds)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def utc(when: str) -> dt.datetime:
    """An ISO time as an aware datetime (a time without a zone is UTC): a row's `date`."""
    t = dt.datetime.fromisoformat(when)
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


@dataclass
class RunRecord:
    model: str
    seed: int
    dataset: str | None = None  # with a dataset the row also carries its fold (None: no fold)
    fold: int | None = None
    label: str | None = None
    variant_of: str | None = None
    preset: str | None = None
    factors: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)  # `ExperimentResult.figures()`
    data_format: str | None = None
    protocol: str | None = None
    run_key: str | None = None
    preset_digest: str | None = None  # `preset_digest(model, preset)` when it ran
    preset_settings: dict | None = None  # `preset_settings(model, preset, own)` when it ran
    error: str | None = None
    traceback: str | None = None
    wall_seconds: float | None = None
    device_name: str | None = None
    native: str | None = None  # the C kernels the run used (kt_lib.nn.native.track)
    commit: str | None = None
    date: str | None = None
    train: dict | None = None  # the training settings that change the numbers
    adopted_from: str | None = None  # the study that trained it (`kt study adopt` copied it)

    @property
    def ok(self) -> bool:
        return self.error is None

    def row(self) -> dict:
        """The flat results row. Fields that do not apply (None) are left out, except a fold
        beside its dataset (None: the run had no fold) and the commit of a dated row (None:
        the run's code was not in a git checkout)."""
        head = {"dataset": self.dataset, "model": self.model}
        if self.dataset is not None:
            head["fold"] = self.fold
        head.update(label=self.label, seed=self.seed, variant_of=self.variant_of)
        head.update(preset=self.preset)
        tail = {
            "data_format": self.data_format,
            "protocol": self.protocol,
            "run_key": self.run_key,
            "preset_digest": self.preset_digest,
            "preset_settings": self.preset_settings,
            "error": self.error,
            "traceback": self.traceback,
            "wall_seconds": self.wall_seconds,
            "device_name": self.device_name,
            "native": self.native,
            "commit": self.commit,
            "date": self.date,
            "train": self.train,
            "adopted_from": self.adopted_from,
        }
        kept = {"fold"} | ({"commit"} if self.date else set())
        row = {k: v for k, v in head.items() if v is not None or k in kept}
        row.update(self.factors)
        row.update(self.figures)
        row.update({k: v for k, v in tail.items() if v is not None or k in kept})
        return row

    @classmethod
    def fields(cls) -> set[str]:
        """The row keys of a record's own fields (figures and factors aside)."""
        return set(cls.__dataclass_fields__) - {"figures", "factors"}


def preset_digest(model: str, preset: str | None) -> str | None:
    """The digest of registered `model`'s preset `preset` now (`BaseConfig.preset_digest`);
    None when the model or the preset is gone (or `preset` is None)."""
    if preset is None or model not in MODELS:
        return None
    try:
        return MODELS[model].config_cls.preset_digest(preset)
    except KeyError:
        return None


def preset_settings(model: str, preset: str | None, own=()) -> dict | None:
    """Every setting registered `model`'s preset `preset` builds now, class defaults included
    (`BaseConfig.preset_settings`), less the run's `own` fields (a variant's, an override's:
    the run key holds those, and they are not the preset's to change); None as for
    `preset_digest`."""
    if preset is None or model not in MODELS:
        return None
    try:
        settings = MODELS[model].config_cls.preset_settings(preset)
    except KeyError:
        return None
    return {k: v for k, v in settings.items() if k not in set(own)}


def preset_changes(row: dict) -> list[str]:
    """What no longer holds of the preset a row was made under: "preset" when its `PRESETS`
    entry changed (the digest), and each stored setting whose value the preset now builds
    differently (a class default edited), as "name: then -> now". A setting added since (not in
    the row) or gone is not judged: a new option's default keeps the old behaviour. Rows that
    store neither have none; a row with a digest whose model or preset is gone has "preset"."""
    model, preset = row.get("variant_of") or row["model"], row.get("preset")
    changes = []
    digest = row.get("preset_digest")
    if digest is not None and digest != preset_digest(model, preset):
        changes.append("preset")
    then, now_ = row.get("preset_settings"), preset_settings(model, preset)
    if then is not None and now_ is not None:
        changes += [f"{k}: {then[k]!r} -> {now_[k]!r}" for k in sorted(then.keys() & now_.keys())
                    if then[k] != now_[k]]  # fmt: skip
    return changes


def stale_preset_rows(rows: list[dict]) -> list[dict]:
    """The rows made under settings that their preset's name no longer means (a run key holds
    the name only): `preset_changes` finds some. Rows written before the digest was stored
    (none in the row) are not judged, nor failed runs (planned again anyway)."""
    return [r for r in rows if not r.get("error") and preset_changes(r)]
