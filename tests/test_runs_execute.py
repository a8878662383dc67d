"""kt_lib.runs.execute: the same rows in plan order in this process, in worker processes and on
Ray; failed runs recorded with their traceback."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kt_lib.data import load_bundle
from kt_lib.runs import execute as runner
from kt_lib.runs.execute import ExecConfig
from kt_lib.runs.grid import run_grid
from kt_lib.train import TrainConfig

TINY_TRAIN = TrainConfig(epochs=1, batch_size=16, max_len=12, lr=1e-2, progress=False)
SIM = dict(num_students=30, seq_len=10, num_c=4)
CELLS = [
    {"label": "dkt", "model": "dkt", "factors": {"family": "rnn"}},
    {"label": "sakt d=8", "model": "sakt", "overrides": {"d": 8}},
    {"label": "bad", "model": "sakt", "overrides": {"no_such_field": 1}},  # fails to build
]
SEEDS = [0, 1]
TWO = ExecConfig(workers=2)


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
    timings = ("train_seconds", "prepare_seconds", "wall_seconds", "threads", "traceback")
    same = [c for c in want if c not in metrics and c not in timings]
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
                 progress=False, execution=ExecConfig(on_error="raise"))  # fmt: skip


def test_worker_processes_give_the_same_rows(bundle, serial):
    """... and each worker runs with the threads asked for (cores // workers when not asked)."""
    two = ExecConfig(workers=2, threads=2)  # not cores // 2 on a 2-core CI machine
    with pytest.warns(RuntimeWarning, match="2 of 6 runs failed"):
        parallel = run_grid(CELLS, bundle, SEEDS, TINY_TRAIN, progress=False, execution=two)
    assert_same_rows(parallel, serial)
    assert (parallel.loc[parallel.label != "bad", "threads"] == 2).all()
    assert parallel.loc[parallel.label == "bad", "traceback"].str.contains("build_model").all()


class _KillsItsWorker:
    """A run whose unpickling ends the worker process (as an out-of-memory kill would)."""

    def __reduce__(self):
        import os

        return (os._exit, (1,))


def test_a_dead_worker_fails_its_run_and_the_runs_not_started_not_the_plan():
    """Runs start one at a time (so `finished_elsewhere` is asked late): once a worker dies, the
    pool takes no more, and every run left comes back as a failed outcome, as before."""
    outs = list(runner._processes([_KillsItsWorker()] * 3, None, 1, 1, lambda index: False))
    assert sorted(o.index for o in outs) == [0, 1, 2]
    assert all("BrokenProcessPool" in o.error for o in outs)


@pytest.mark.slow  # starting Ray takes 10-20 s
def test_ray_gives_the_same_rows(bundle, serial, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("RAY_agent_register_timeout_ms", "120000")  # as kt_lib's own init does
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with pytest.warns(RuntimeWarning, match="2 of 6 runs failed"):
            table = run_grid(
                CELLS,
                bundle,
                SEEDS,
                TINY_TRAIN,
                progress=False,
                execution=ExecConfig(workers=2, executor="ray"),
            )
        greedy = ExecConfig(executor="ray", threads=3)  # Ray would hold such a task forever
        with pytest.raises(ValueError, match="threads=3 and gpus_per_run=0 per run: no live"):
            run_grid(CELLS[:1], bundle, [0], TINY_TRAIN, progress=False, execution=greedy)
    finally:
        ray.shutdown()
    assert_same_rows(table, serial)


def test_parallel_refusals(bundle):
    with pytest.raises(ValueError, match="callback"):
        run_grid(CELLS[:1], bundle, [0], TINY_TRAIN, callback=print, execution=TWO)
    with pytest.raises(ValueError, match="cannot be sent"):
        run_grid(
            [{"label": "x", "model": "dkt", "overrides": {"d": lambda: 1}}],
            bundle,
            [0],
            TINY_TRAIN,
            execution=TWO,
        )
    with pytest.raises(ValueError, match="executor"):
        ExecConfig(executor="threads")
    with pytest.raises(ValueError, match="workers"):
        ExecConfig(workers=0)
    with pytest.raises(ValueError, match="on_error"):
        ExecConfig(on_error="ignore")
    with pytest.raises(ValueError, match="ray_address is read by executor='ray' only"):
        ExecConfig(ray_address="auto")
    with pytest.raises(ValueError, match="gpus_per_run is read by executor='ray' only"):
        ExecConfig(workers=2, gpus_per_run=0.5)
    assert runner.threads_per_worker(3, cores=16) == 5 and runner.threads_per_worker(4, 2) == 1


def test_a_worker_ends_when_the_process_that_started_it_is_killed(tmp_path):
    """Kill a pool's parent with SIGKILL (no cleanup runs): its worker, busy with a long task,
    ends within seconds instead of training on."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import multiprocessing as mp, os, sys, time\n"
        "from concurrent.futures import ProcessPoolExecutor\n"
        "from kt_lib.runs.execute import _init_worker\n"
        "if __name__ == '__main__':\n"
        "    pool = ProcessPoolExecutor(1, mp_context=mp.get_context('spawn'),\n"
        "        initializer=_init_worker, initargs=(1, None, os.getpid()))\n"
        "    print(pool.submit(os.getpid).result(), flush=True)\n"
        "    pool.submit(time.sleep, 120)\n"
        "    time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.kill(worker, 0)  # still there?
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(worker, signal.SIGKILL)
    raise AssertionError(f"worker {worker} outlived its killed parent by 15 s")


def test_a_row_names_the_native_kernels_its_run_used(bundle):
    """AKT's attention runs its C chain on a CPU that builds it; DKT uses none (the row leaves
    the field out rather than name a kernel another run in the process loaded)."""
    from kt_lib.nn import native

    cells = [{"label": "akt", "model": "akt", "overrides": {"d": 8, "n_heads": 2, "d_ff": 8}}]
    table = run_grid(cells + CELLS[:1], bundle, [0], TINY_TRAIN, progress=False)
    akt, dkt = table.iloc[0], table.iloc[1]
    if native.load("akt_chain") is not None:
        assert akt["native"] == "akt_chain"
    assert pd.isna(dkt.get("native"))
