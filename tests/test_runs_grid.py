"""kt_lib.runs.grid: cells x seeds, one row per run, mean ± std tables."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from kt_lib.data import load_bundle
from kt_lib.runs.grid import aggregate, check_cells, run_grid, summarise
from kt_lib.train import TrainConfig

TINY_TRAIN = TrainConfig(epochs=1, batch_size=16, max_len=12, lr=1e-2, progress=False)


@pytest.fixture(scope="module")
def sim_bundle():
    return load_bundle(None, "synthetic", seed=0, num_students=40, seq_len=12, num_c=4)


def test_run_grid_rows_factors_and_seed_spread(sim_bundle):
    cells = [
        {"label": "dkt", "model": "dkt", "preset": "tiny", "factors": {"family": "rnn"}},
        {"label": "sakt d=8", "model": "sakt", "preset": "tiny", "overrides": {"d": 8}},
    ]
    table = run_grid(cells, sim_bundle, seeds=[0, 1], train_config=TINY_TRAIN, progress=False)
    assert len(table) == 4
    assert table[["label", "seed"]].values.tolist() == [
        ["dkt", 0],
        ["dkt", 1],
        ["sakt d=8", 0],
        ["sakt d=8", 1],
    ]
    assert {"model", "preset", "family", "d", "test_auc", "test_acc", "test_rmse"} <= set(table)
    assert table.loc[table.label == "dkt", "family"].eq("rnn").all()
    assert table.loc[table.label == "sakt d=8", "d"].eq(8).all()
    assert np.isfinite(table["test_auc"]).all()
    for _, runs in table.groupby("label"):
        assert runs["test_auc"].nunique() == 2, "different seeds must give different numbers"
    again = run_grid(cells[:1], sim_bundle, seeds=[0], train_config=TINY_TRAIN, progress=False)
    assert again["test_auc"].iloc[0] == table["test_auc"].iloc[0]  # same seed, same number


def test_summarise_formats_mean_std():
    table = pd.DataFrame({"label": ["a", "a", "b"], "seed": [0, 1, 0], "test_auc": [0.7, 0.8, 0.6]})
    s = summarise(table, "label")
    assert list(s.index) == ["a", "b"] and list(s.columns) == ["test_auc", "runs"]
    assert s.loc["a", "test_auc"] == "0.7500 ± 0.0707"
    assert s.loc["b", "test_auc"] == "0.6000"  # one run: its value alone (runs.tables policy)
    assert s.loc["a", "runs"] == 2
    assert re.fullmatch(r"\d\.\d{2} ± \d\.\d{2}", summarise(table, "label", digits=2).iloc[0, 0])
    agg = aggregate(table, "label", ["test_auc"])
    assert agg.loc["a", ("mean", "test_auc")] == pytest.approx(0.75)


@pytest.mark.parametrize(
    "cells, message",
    [
        ([], "at least one cell"),
        ([{"label": "x"}], "lacks"),
        ([{"label": "x", "model": "dkt", "seeds": 3}], "unknown key"),
        ([{"label": "x", "model": "dkt"}, {"label": "x", "model": "sakt"}], "duplicate"),
    ],
)
def test_cell_errors(cells, message):
    with pytest.raises(ValueError, match=message):
        check_cells(cells)
