"""benchmarks/bench_models.py at tiny sizes on CPU: a model that needs problem ids is timed with
them (the H200 run of 2026-11-26 lost AT-DKT and DIMKT to "needs problem ids"), and the seed-004
SAKT class is found where the house issue moved it (kt_lib.models.sakt_interface)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_models import NUM_PID, bench_one, bench_seed_sakt  # noqa: E402


def test_a_model_that_needs_problem_ids_is_timed_with_them():
    res = bench_one("qdkt", repeats=1, b=2, n=8)
    assert "error" not in res
    assert res["num_pid"] == NUM_PID
    assert res["train_step_s"] > 0 and res["params"] > 0


def test_a_skill_model_carries_no_problem_ids():
    res = bench_one("dkt", repeats=1, b=2, n=8)
    assert "num_pid" not in res


def test_seed_sakt_latency_runs_on_the_public_class():
    res = bench_seed_sakt(repeats=1)
    assert res["target_ms"] == 100.0
    assert res["median_ms"] > 0
    assert res["forward_ms_all_100_queries"] >= res["median_ms"] * 0.5
