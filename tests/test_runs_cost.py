"""kt_lib.runs.cost: what a left run costs, from its cell, its model, the other studies, or
every run, on the device kind it will run on."""

from __future__ import annotations

import pytest

from kt_lib.runs import cost


def test_cells_cost_a_left_run_from_its_cell_then_its_model_then_every_run():
    rows = [
        {"dataset": "a", "model": "dkt", "wall_seconds": 60},
        {"dataset": "a", "model": "dkt", "wall_seconds": 180},
        {"dataset": "b", "model": "akt", "wall_seconds": 600},
    ]
    left = [
        {"dataset": "a", "model": "dkt"},  # measured: 2 min
        {"dataset": "b", "model": "dkt"},  # dkt elsewhere: 2 min
        {"dataset": "b", "model": "sakt"},  # nothing of sakt: the mean of all, 4.67 min
        {"dataset": "b", "model": "sakt"},
    ]
    got = {(c["dataset"], c["model"]): c for c in cost.cells(rows, left)}
    assert [k for k in got] == [("a", "dkt"), ("b", "dkt"), ("b", "sakt"), ("b", "akt")]
    assert (got["a", "dkt"]["done"], got["a", "dkt"]["left"]) == (2, 1)
    assert got["a", "dkt"]["basis"] == "measured" and got["a", "dkt"]["run_min"] == 2
    assert got["b", "dkt"]["basis"] == "model" and got["b", "dkt"]["run_min"] == 2
    assert got["b", "sakt"]["basis"] == "guess"
    assert got["b", "sakt"]["hours_left"] == pytest.approx(2 * 280 / 3600)
    assert got["b", "akt"]["left"] == 0 and got["b", "akt"]["hours_left"] == 0


def test_a_narrowed_plan_counts_its_own_rows_done_and_prices_from_every_row():
    """`status --first 1` said a cell had every fold of the file done (a review): `done` counts
    the narrowed plan's keys, the price still reads all the cell's runs."""
    rows = [
        {"dataset": "a", "model": "dkt", "wall_seconds": 60 * k, "run_key": f"a/dkt/{k}"}
        for k in (1, 2, 3)
    ]
    left = [{"dataset": "a", "model": "dkt"}]
    (narrow,) = cost.cells(rows, left, keys={"a/dkt/1"})
    (whole,) = cost.cells(rows, left)
    assert (narrow["done"], whole["done"]) == (1, 3)
    assert narrow["run_min"] == whole["run_min"] == 2


def test_a_left_run_costs_what_runs_on_its_device_kind_cost():
    rows = [
        {"dataset": "a", "model": "dkt", "wall_seconds": 30, "device_name": "NVIDIA H100"},
        {"dataset": "a", "model": "dkt", "wall_seconds": 600, "device_name": "Intel Xeon"},
        {"dataset": "b", "model": "akt", "wall_seconds": 20, "device_name": "NVIDIA H100"},
    ]
    assert cost.run_cost(rows, "a", "dkt", "cpu") == (600, "measured")
    assert cost.run_cost(rows, "a", "dkt", "gpu") == (30, "measured")
    assert cost.run_cost(rows, "b", "akt", "gpu") == (20, "measured")
    # no akt run on a CPU: the CPU runs' mean (a guess) before any GPU figure
    assert cost.run_cost(rows, "b", "akt", "cpu") == (600, "guess")
    gpu_only = [r for r in rows if "H100" in r["device_name"]]
    assert cost.run_cost(gpu_only, "b", "akt", "cpu") == (20, "measured on gpu")


def test_a_cell_borrows_from_the_other_studies_before_guessing():
    """The same cell in another study (the baselines' ASSIST2015 runs for the leaderboard's),
    then the model there on another dataset, before the mean of everything: stableKT's 116
    CPU-minutes, not the leaderboard's 9-minute mean."""
    rows = [{"dataset": "a", "model": "dkt", "wall_seconds": 60, "device_name": "Intel Xeon"}]
    pool = [
        {"dataset": "b", "model": "stablekt", "wall_seconds": 7000, "device_name": "Intel Xeon"},
        {"dataset": "c", "model": "stablekt", "wall_seconds": 3000, "device_name": "AMD EPYC"},
        {"dataset": "b", "model": "gkt", "wall_seconds": 90, "device_name": "NVIDIA H200"},
    ]
    assert cost.run_cost(rows, "b", "stablekt", "cpu", pool) == (7000, "other study")
    assert cost.run_cost(rows, "d", "stablekt", "cpu", pool) == (5000, "model, other study")
    assert cost.run_cost(rows, "a", "dkt", "cpu", pool) == (60, "measured")  # its own first
    assert cost.run_cost(rows, "b", "gkt", "cpu", pool) == (60, "guess")  # a GPU's says little
    assert cost.run_cost(rows, "b", "gkt", "gpu", pool) == (90, "other study")
    got = {c["model"]: c for c in cost.cells(rows, [{"dataset": "b", "model": "stablekt"}],
                                             "cpu", pool)}  # fmt: skip
    assert got["stablekt"]["basis"] == "other study"
    assert got["stablekt"]["hours_left"] == pytest.approx(7000 / 3600)


def test_kind_hours_of_a_study_per_device_kind():
    rows = [
        {"dataset": "a", "model": "dkt", "wall_seconds": 3600, "device_name": "Intel Xeon"},
        {"dataset": "a", "model": "akt", "wall_seconds": 360, "device_name": "NVIDIA H100"},
    ]
    left = [{"dataset": "a", "model": "dkt"}, {"dataset": "a", "model": "akt"}]
    assert cost.kind_hours(rows, left, "cpu") == "2.0"  # akt: the CPU runs' mean, a guess
    assert cost.kind_hours(rows, left, "gpu") == "0.2"
    assert cost.kind_hours(rows[:1], left, "gpu") == "?"
    assert cost.kind_hours(rows[:1], left, "gpu", pool=rows[1:]) == "0.2~"  # borrowed
    assert cost.kind_hours(rows, [], "gpu") == "0"


def test_a_variant_borrows_its_registered_models_runs_before_the_other_kinds():
    """SimAKT's presets (labels of the registered `simakt`) ran only on a GPU in their study: on a
    CPU they cost what `simakt` costs there (the leaderboard's runs), on the same dataset first,
    not the GPU's minutes."""
    xeon, h100 = "Intel Xeon", "NVIDIA H100"
    rows = [{"dataset": "a", "model": "simakt_pwd", "variant_of": "simakt", "wall_seconds": 90,
             "device_name": h100}]  # fmt: skip
    pool = [
        {"dataset": "a", "model": "simakt", "wall_seconds": 3600, "device_name": xeon},
        {"dataset": "b", "model": "simakt", "wall_seconds": 1800, "device_name": xeon},
        {"dataset": "b", "model": "dkt", "wall_seconds": 60, "device_name": xeon},
    ]
    got = cost.run_cost(rows, "a", "simakt_pwd", "cpu", pool, base="simakt")
    assert got == (3600, "registered model")
    got = cost.run_cost(rows, "c", "simakt_knn", "cpu", pool, base="simakt")
    assert got == (2700, "registered model, any dataset")
    # without its base named, the label matches nothing on a CPU: the GPU's own figure
    assert cost.run_cost(rows, "a", "simakt_pwd", "cpu", pool) == (90, "measured on gpu")
    left = [{"dataset": "a", "model": "simakt_pwd", "base": "simakt"}]
    (cell,) = cost.cells(rows, left, "cpu", pool)
    assert cell["run_min"] == 60 and cell["basis"] == "registered model"
    # a variant with its own epochs cap: the registered model's runs scaled by the caps' ratio
    pool[0]["train"] = {"epochs": 30}
    assert cost.run_cost(rows, "a", "simakt_pwd", "cpu", pool, "simakt", 90)[0] == 3 * 3600
    (cell,) = cost.cells(rows, [{**left[0], "epochs": 90}], "cpu", pool)
    assert cell["run_min"] == 180


def test_a_cell_with_a_run_in_flight_costs_its_epochs_left():
    rows = [{"dataset": "a", "model": "gkt", "wall_seconds": 600}]
    left = [{"dataset": "a", "model": "gkt", "in_flight": 3600}, {"dataset": "a", "model": "gkt"}]
    (cell,) = [c for c in cost.cells(rows, left) if c["left"]]
    assert cell["hours_left"] == pytest.approx((3600 + 600) / 3600)
    assert cell["basis"] == "measured; 1 in flight"
    (alone,) = [c for c in cost.cells(rows, left[:1]) if c["left"]]
    assert alone["basis"] == "in flight" and alone["hours_left"] == pytest.approx(1.0)
    assert cost.kind_hours(rows, left[:1], "cpu") == "1.0"


def test_a_cell_is_priced_from_its_newest_runs():
    """Code gets faster (the native chains took a third off DTransformer's step): a cell's cost
    is the mean of its NEWEST newest runs by date, not of every run it ever had."""
    old = [
        {"dataset": "a", "model": "dt", "wall_seconds": 3000, "date": f"2026-11-2{i}"}
        for i in (1, 2)
    ]
    new = [
        {"dataset": "a", "model": "dt", "wall_seconds": 1800, "date": f"2026-11-27T1{i}"}
        for i in (6, 7, 8)
    ]
    seconds, basis = cost.run_cost(new[2:] + old + new[:2], "a", "dt")
    assert cost.NEWEST == 3 and basis == "measured" and seconds == 1800
    seconds, _ = cost.run_cost(old + new[:1], "a", "dt")  # three runs: all of them
    assert seconds == pytest.approx((3000 + 3000 + 1800) / 3)
