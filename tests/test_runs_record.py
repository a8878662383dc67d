"""kt_lib.runs.record: one schema for every results row, the committed files' rows included."""

from __future__ import annotations

import json

from kt_lib.provenance import ROOT
from kt_lib.runs.record import NESTED, RunRecord


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
