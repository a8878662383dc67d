"""Parallel runs: the same rows in plan order in this process, in worker processes and on Ray;
failed runs recorded with their traceback; the leaderboard's results file filled by workers."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from kt_lib import leaderboard as lb
from kt_lib import runner
from kt_lib.ablation import run_grid
from kt_lib.data import load_bundle
from kt_lib.train import TrainConfig

TINY_TRAIN = TrainConfig(epochs=1, batch_size=16, max_len=12, lr=1e-2, progress=False)
SIM = dict(num_students=30, seq_len=10, num_c=4)
CELLS = [
    {"label": "dkt", "model": "dkt", "factors": {"family": "rnn"}},
    {"label": "sakt d=8", "model": "sakt", "overrides": {"d": 8}},
    {"label": "bad", "model": "sakt", "overrides": {"no_such_field": 1}},  # fails to build
]
SEEDS = [0, 1]


@pytest.fixture(scope="module")
def bundle():
    return load_bundle(None, "synthetic", seed=0, **SIM)


@pytest.fixture(scope="module")
def serial(bundle):
    with pytest.warns(RuntimeWarning, match="2 of 6 runs failed"):
        return run_grid(CELLS, bundle, SEEDS, TINY_TRAIN, progress=False)


def assert_same_rows(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Same columns, same plan order, same metrics (timings aside)."""
    assert list(got.columns) == list(want.columns)
    assert got[["label", "seed"]].values.tolist() == want[["label", "seed"]].values.tolist()
    metrics = [c for c in want if c.startswith(("test_", "valid_"))]
    np.testing.assert_allclose(got[metrics], want[metrics], rtol=0, atol=1e-6)
    same = [c for c in want if c not in metrics and c not in ("train_seconds", "traceback")]
    pd.testing.assert_frame_equal(got[same], want[same])


def test_serial_grid_records_the_failed_run_and_finishes_the_others(serial):
    assert serial[["label", "seed"]].values.tolist() == [
        [c["label"], s] for c in CELLS for s in SEEDS
    ]
    ok, bad = serial[serial.label != "bad"], serial[serial.label == "bad"]
    assert np.isfinite(ok["test_auc"]).all() and ok["error"].isna().all()
    assert bad["test_auc"].isna().all()
    assert bad["error"].str.contains("no_such_field").all()
    assert bad["traceback"].str.startswith("Traceback").all()
    assert bad["traceback"].str.contains("build_model").all()
    with pytest.raises(runner.RunFailed, match="no_such_field"):
        run_grid(CELLS[2:], load_bundle(None, "synthetic", **SIM), [0], TINY_TRAIN,
                 progress=False, on_error="raise")  # fmt: skip


def test_worker_processes_give_the_same_rows(bundle, serial):
    with pytest.warns(RuntimeWarning, match="2 of 6 runs failed"):
        parallel = run_grid(CELLS, bundle, SEEDS, TINY_TRAIN, progress=False, workers=2)
    assert_same_rows(parallel, serial)
    assert parallel.loc[parallel.label == "bad", "traceback"].str.contains("build_model").all()


@pytest.mark.slow  # starting Ray takes 10-20 s
def test_ray_gives_the_same_rows(bundle, serial):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with pytest.warns(RuntimeWarning, match="2 of 6 runs failed"):
            table = run_grid(
                CELLS, bundle, SEEDS, TINY_TRAIN, progress=False, workers=2, executor="ray"
            )
    finally:
        ray.shutdown()
    assert_same_rows(table, serial)


def test_parallel_refusals(bundle):
    with pytest.raises(ValueError, match="callback"):
        run_grid(CELLS[:1], bundle, [0], TINY_TRAIN, callback=print, workers=2)
    with pytest.raises(ValueError, match="cannot be sent"):
        run_grid(
            [{"label": "x", "model": "dkt", "overrides": {"d": lambda: 1}}],
            bundle,
            [0],
            TINY_TRAIN,
            workers=2,
        )
    with pytest.raises(ValueError, match="executor"):
        run_grid(CELLS[:1], bundle, [0], TINY_TRAIN, executor="threads")
    with pytest.raises(ValueError, match="workers"):
        run_grid(CELLS[:1], bundle, [0], TINY_TRAIN, workers=0)
    assert runner.threads_per_worker(3, cores=16) == 5 and runner.threads_per_worker(4, 2) == 1


def test_leaderboard_workers_fill_the_results_file(tmp_path, capsys):
    """workers=2 merges each finished run into the file; rows in plan order, as workers=1 gives
    them; the failed run is in the file with its traceback and is retried on resume."""
    kw = dict(seeds=[0, 1], simulator=SIM, progress=False)
    models = ["dkt", "no_such_model", "sakt"]
    path, serial_path = tmp_path / "board.json", tmp_path / "serial.json"
    with pytest.warns(RuntimeWarning, match="2 of 6 runs failed"):
        serial = lb.run_leaderboard(
            [(None, "synthetic")], models, TINY_TRAIN, results_file=serial_path, **kw
        )
    with pytest.warns(RuntimeWarning, match="2 of 6 runs failed"):
        parallel = lb.run_leaderboard(
            [(None, "synthetic")], models, TINY_TRAIN, results_file=path, workers=2, **kw
        )
    assert parallel[["model", "seed"]].values.tolist() == [[m, s] for s in (0, 1) for m in models]
    assert list(parallel.columns) == list(serial.columns)
    np.testing.assert_allclose(parallel["test_auc"], serial["test_auc"], rtol=0, atol=1e-6)
    assert parallel["run_key"].tolist() == serial["run_key"].tolist()
    for col in ("wall_seconds", "device_name"):
        assert parallel[col].notna().all()
    assert "commit" in parallel
    bad = parallel[parallel.model == "no_such_model"]
    assert bad["error"].str.contains("KeyError").all() and bad["test_auc"].isna().all()

    rows = json.loads(path.read_text())["results"]
    assert len(rows) == 6 and len({r["run_key"] for r in rows}) == 6
    assert sum("traceback" in r for r in rows) == 2
    by_key = {r["run_key"]: r for r in rows}
    for _, r in parallel.iterrows():
        if isinstance(r["error"], float):  # a finished run: its row is in the file
            assert by_key[r["run_key"]]["test_auc"] == pytest.approx(r["test_auc"], abs=1e-12)

    # resuming runs only the failed runs again (in this process: quick)
    with pytest.warns(RuntimeWarning, match="2 of 2 runs failed"):
        again = lb.run_leaderboard(
            [(None, "synthetic")], models, TINY_TRAIN, results_file=path, **kw
        )
    assert again["test_auc"].tolist()[::3] == parallel["test_auc"].tolist()[::3]
    table = lb.load_results(path)
    board = lb.leaderboard(table, published=False)
    assert board.loc[("synthetic", "dkt"), "runs"] == 2
    assert board.loc[("synthetic", "no_such_model"), "failed"] == 2
    assert board.loc[("synthetic", "no_such_model"), "runs"] == 0
    assert {"wall s", "device"} <= set(board.columns)
    if table["commit"].notna().any():  # None outside a git checkout
        assert "commit" in board

    lb.main([str(path), "--no-published", "--pairs", "sakt:dkt"])
    out = capsys.readouterr().out
    assert "| sakt - dkt |" in out and "Wilcoxon p" in out and "wall s" in out
    with pytest.raises(SystemExit, match="nope"):
        lb.main([str(path), "--pairs", "sakt:nope"])
