"""kt_lib.runs.tables: the one mean ± std policy, markdown and the throughput table."""

from __future__ import annotations

import json
import math

import pandas as pd

from kt_lib.runs import tables
from kt_lib.runs.tables import format_mean_std, mean_std, throughput, to_markdown


def test_one_mean_std_policy():
    assert mean_std([0.7, 0.8]) == "0.7500 ± 0.0707"
    assert mean_std([0.6, math.nan]) == "0.6000"  # one run (a failed one left out): no ± 0
    assert mean_std([]) == "-" and format_mean_std(math.nan, math.nan, 0) == "-"
    assert format_mean_std(0.5, 0.01, 3, digits=2) == "0.50 ± 0.01"


def test_markdown_escapes_pipes():
    import pandas as pd

    md = to_markdown(pd.DataFrame({"a": ["x|y"], "b": [None]}), index=False)
    assert md.splitlines() == ["| a | b |", "|---|---|", "| x\\|y |  |"]


def test_throughput(tmp_path):
    assert throughput(tmp_path / "missing.json").empty
    bench = tmp_path / "models.json"
    bench.write_text(
        json.dumps(
            [
                {"model": "dkt", "params": 5, "inference_interactions_per_s": 9},
                {"model": "x", "error": "boom"},
            ]
        )
    )
    speed = throughput(bench)
    assert list(speed.index) == ["dkt"] and speed.loc["dkt", "inference_interactions_per_s"] == 9


def test_a_cell_mixing_presets_is_split_not_averaged():
    """One tiny and one paper run of the same model on the same data are two rows."""
    table = pd.DataFrame(
        {
            "dataset": ["a09", "a09", "a09"],
            "model": ["akt", "akt", "dkt"],
            "preset": ["tiny", "paper", "paper"],
            "test_auc": [0.70, 0.81, 0.80],
        }
    )
    board = tables.leaderboard(table, published=False).reset_index()
    assert board["model"].tolist() == ["akt [tiny]", "akt [paper]", "dkt"]
    assert board["auc"].tolist() == ["0.7000", "0.8100", "0.8000"]


def test_a_cell_mixing_set_fields_is_split_not_averaged():
    """`kt run --set` keeps runs of other fields beside each other in one file (a review: the
    table averaged dropout 0.1 and 0.3 into one dkt cell); same fields pool, as seeds do."""
    table = pd.DataFrame(
        {
            "dataset": ["a15"] * 5,
            "model": ["dkt", "dkt", "dkt", "sakt", "sakt"],
            "set": [{"dropout": 0.1}, {"dropout": 0.3}, {"dropout": 0.3}, {}, {}],
            "test_auc": [0.70, 0.80, 0.82, 0.60, 0.62],
        }
    )
    board = tables.leaderboard(table, published=False).reset_index()
    assert board["model"].tolist() == ["dkt {dropout=0.1}", "dkt {dropout=0.3}", "sakt"]
    assert board["runs"].tolist() == [1, 2, 2]


def test_a_cell_is_mixed_only_when_it_mixes_cpu_and_gpu_runs():
    def cell(*names):
        return tables.devices_cell(pd.Series(names))

    assert cell("AMD EPYC", "AMD EPYC") == "AMD EPYC"
    assert cell("Intel Xeon", "AMD EPYC") == "AMD EPYC, Intel Xeon"
    assert cell("NVIDIA H200", "AMD EPYC") == "MIXED: AMD EPYC, NVIDIA H200"
    assert cell("AMD EPYC", None) == "MIXED: AMD EPYC, unknown"  # a run of unknown device


def test_the_leaderboard_marks_a_cell_that_mixes_cpu_and_gpu_runs():
    devices = ["AMD EPYC", "NVIDIA H200", "AMD EPYC", "Intel Xeon"]
    table = pd.DataFrame(
        {
            "dataset": ["a09"] * 4,
            "model": ["akt", "akt", "dkt", "dkt"],
            "test_auc": [0.80, 0.81, 0.79, 0.80],
            "device_name": devices,
        }
    )
    board = tables.leaderboard(table, published=False)
    assert board["device"].tolist() == ["MIXED: AMD EPYC, NVIDIA H200", "AMD EPYC, Intel Xeon"]


def test_the_leaderboard_leaves_out_the_withdrawn_length_bands():
    """Older rows keep `@lendistinctq*` (bands of the distinct lengths, withdrawn): no table
    reads them; the protocols' columns and today's `@lenq*` bands are shown."""
    table = pd.DataFrame(
        {"dataset": ["a"] * 2, "model": ["dkt"] * 2, "test_auc": [0.8, 0.81],
         "test_auc@per_row/window": [0.79, 0.8], "test_auc@lenq1": [0.7, 0.71],
         "test_auc@lendistinctq1": [0.6, 0.61]}
    )  # fmt: skip
    cols = tables.leaderboard(table, published=False).columns
    assert "auc@per_row/window" in cols and "auc@lenq1" in cols
    assert not [c for c in cols if "lendistinct" in c]
