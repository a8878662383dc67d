"""kt_lib.runs.record: one schema for every results row, the committed files' rows included."""

from __future__ import annotations

import json

import pytest

from kt_lib.models import MODELS
from kt_lib.provenance import ROOT
from kt_lib.runs.record import NESTED, RunRecord, preset_digest, stale_preset_rows


def test_fields_that_do_not_apply_are_left_out():
    grid = RunRecord("sakt", 1, label="sakt d=8", preset="tiny", factors={"d": 8},
                     figures={"test_auc": 0.7}).row()  # fmt: skip
    assert grid == {"model": "sakt", "label": "sakt d=8", "seed": 1, "preset": "tiny", "d": 8,
                    "test_auc": 0.7}  # fmt: skip
    board = RunRecord("x", 0, "synthetic", None, variant_of="dkt", date="2026-01-01", error="E")
    row = board.row()
    assert row["fold"] is None and row["commit"] is None and row["variant_of"] == "dkt"
    assert list(row)[:4] == ["dataset", "model", "fold", "seed"] and "traceback" not in row
    assert not board.ok


def test_the_committed_results_rows_are_rows_of_this_schema():
    """Every key of results/*.json rows is a record field, a figure (test_*, valid_*, diag_*,
    run figures) or a nested field: old files resume and render without a migration."""
    figures = {"best_epoch", "epochs", "params", "train_seconds", "prepare_seconds", "threads"}
    files = sorted((ROOT / "results").glob("*.json"))
    assert files
    for path in files:
        for r in json.loads(path.read_text())["results"]:
            odd = {
                k for k in r
                if k not in RunRecord.fields() | figures | set(NESTED)
                and not k.startswith(("test_", "valid_", "diag_"))
            }  # fmt: skip
            assert not odd, (path.name, odd)


def test_a_preset_digest_follows_what_the_preset_sets(monkeypatch):
    cfg = MODELS["sakt"].config_cls
    paper = preset_digest("sakt", "paper")
    assert paper == cfg.preset_digest("paper") != cfg.preset_digest("tiny")
    assert cfg.preset_digest("default") == MODELS["dkt"].config_cls.preset_digest("default")
    assert preset_digest("sakt", "nonesuch") is None and preset_digest("nonesuch", "paper") is None
    with pytest.raises(KeyError, match="unknown preset 'nonesuch' for SAKTConfig; valid: default"):
        cfg.preset_digest("nonesuch")
    # the same fields in another order are the same preset; one field changed is another
    same = dict(reversed(list(cfg.PRESETS["paper"].items())))
    monkeypatch.setattr(cfg, "PRESETS", {**cfg.PRESETS, "paper": same})
    assert preset_digest("sakt", "paper") == paper
    changed = {**same, "query_positions": not same.get("query_positions", True)}
    monkeypatch.setattr(cfg, "PRESETS", {**cfg.PRESETS, "paper": changed})
    assert preset_digest("sakt", "paper") != paper


def test_every_preset_of_every_model_is_plain_data_with_one_digest():
    """A digest is of json: a preset holding an object would fail here, not hash an address."""
    for name, cls in MODELS.items():
        for preset, fields in cls.config_cls.PRESETS.items():
            assert json.loads(json.dumps(fields)) == fields, (name, preset)
            assert cls.config_cls.preset_digest(preset) == preset_digest(name, preset)
    fields = MODELS["sakt"].config_cls.preset_fields("paper")
    fields["dropout"] = 0.0  # a copy: the preset is not edited through it
    assert MODELS["sakt"].config_cls.PRESETS["paper"].get("dropout") != 0.0


def test_rows_made_under_another_version_of_their_preset_are_found(monkeypatch):
    paper = preset_digest("sakt", "paper")
    rows = [
        {"model": "sakt", "preset": "paper", "preset_digest": paper},
        {"model": "sakt_x", "variant_of": "sakt", "preset": "paper", "preset_digest": paper},
        {"model": "sakt", "preset": "paper"},  # written before digests were stored: not judged
        {"model": "sakt", "preset": "tiny", "preset_digest": paper},  # another preset's digest
    ]
    assert stale_preset_rows(rows) == [rows[3]]
    assert stale_preset_rows([{**rows[3], "error": "E"}]) == []  # planned again anyway
    cfg = MODELS["sakt"].config_cls
    edited = {**cfg.PRESETS["paper"], "dropout": 0.123}
    monkeypatch.setattr(cfg, "PRESETS", {**cfg.PRESETS, "paper": edited})
    assert stale_preset_rows(rows) == [rows[0], rows[1], rows[3]]


def test_a_row_made_before_a_class_default_its_preset_relies_on_changed_is_found(monkeypatch):
    """The digest covers what a preset sets; `preset_settings` (the preset over the class
    defaults) also a default it leaves alone. A setting added since is not judged (its default
    keeps the old behaviour), nor a row that stores no settings."""
    from kt_lib.runs.record import preset_changes, preset_settings

    cfg = MODELS["sakt"].config_cls
    settings = preset_settings("sakt", "paper")
    assert settings == cfg.preset_settings("paper") and {"num_c", "num_pid", "K"}.isdisjoint(
        settings
    )
    assert settings["d"] == cfg.PRESETS["paper"].get("d", cfg.d)  # the preset over the defaults
    row = {"model": "sakt", "preset": "paper", "preset_digest": preset_digest("sakt", "paper")}
    made = {**row, "preset_settings": settings}
    older = {**made, "preset_settings": {k: v for k, v in settings.items() if k != "dropout"}}
    assert stale_preset_rows([row, made, older]) == [] and preset_changes(made) == []
    field = "max_len"  # left to the class default by the paper preset
    assert field not in cfg.PRESETS["paper"]
    f = cfg.__dataclass_fields__[field]
    monkeypatch.setattr(f, "default", "edited")  # a class default the preset leaves alone
    assert preset_digest("sakt", "paper") == row["preset_digest"]  # the digest cannot see it
    assert stale_preset_rows([row, made, older]) == [made, older]
    assert preset_changes(made) == [f"{field}: {settings[field]!r} -> 'edited'"]
    monkeypatch.setattr(f, "default", settings[field])
    extra = {**made, "preset_settings": {**settings, "removed_option": 1}}
    assert stale_preset_rows([extra]) == []  # a setting gone since is not judged either
    # a run's own fields (a variant's, an override's) are not the preset's: not stored, so an
    # edited default of one does not touch the rows that set it themselves
    own = preset_settings("sakt", "paper", own={"max_len": 100})
    variant = {**made, "model": "sakt_long", "variant_of": "sakt", "preset_settings": own}
    assert field not in own and len(own) == len(settings) - 1
    monkeypatch.setattr(f, "default", 50)
    assert stale_preset_rows([made, variant]) == [made]


def test_settings_that_change_speed_or_memory_only_are_not_stored():
    from kt_lib.runs.record import preset_settings

    for name, cls in MODELS.items():
        settings = cls.config_cls.preset_settings("paper")
        assert set(cls.config_cls.SAME_NUMBERS).isdisjoint(settings), name
        assert json.loads(json.dumps(settings)) == settings, name  # what a row reads back
    assert "checkpoint_gb" not in preset_settings("gkt", "paper")
    assert "gradient_checkpointing" not in preset_settings("attention_gpcm", "paper")


def test_no_committed_row_was_made_under_another_version_of_its_preset():
    """A preset edited after runs were made under it: retire those rows (`kt study retire`),
    since their run keys (which hold the preset's name only) would still count them done."""
    for path in sorted((ROOT / "results").glob("*.json")):
        stale = stale_preset_rows(json.loads(path.read_text())["results"])
        assert not stale, (path.name, [r["run_key"] for r in stale])
