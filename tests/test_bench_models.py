"""benchmarks/bench_models.py at tiny sizes on CPU: a model that needs problem ids is timed with
them (the H200 run of 2026-11-26 lost AT-DKT and DIMKT to "needs problem ids"), and the seed-004
SAKT class is found where the house issue moved it (kt_lib.models.sakt_interface)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_models import NUM_PID, bench_one, bench_seed_sakt, run_subprocess  # noqa: E402


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
    # no ratio between the two: back-to-back medians on a shared CPU can come out either way
    assert res["forward_ms_all_100_queries"] > 0 and res["forward_ms_next_query_padded"] > 0


def test_shared_process_runs_every_model_in_one_interpreter(tmp_path):
    """`--process shared` (the CUDA default): one row per name, an unknown name an error row that
    does not stop the rest, no per-model RSS claimed on CPU, the file written."""
    import json
    import subprocess

    out = tmp_path / "m.json"
    p = subprocess.run(
        [sys.executable, "benchmarks/bench_models.py", "--models", "dkt", "no_such_model", "sakt",
         "--batch", "2", "--len", "8", "--repeats", "1", "--process", "shared", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads(out.read_text())
    # named models only: seed 004's SAKT latency case joins a run of every model, or when named
    assert [r["model"] for r in rows] == ["dkt", "no_such_model", "sakt"]
    assert all(r["process"] == "shared" for r in rows)
    assert "error" in rows[1] and "no_such_model" in rows[1]["error"]
    assert rows[0]["train_step_s"] > 0 and "peak_rss_mb" not in rows[0]


def test_compile_times_the_compiled_model_and_checks_it_against_eager():
    """`--compile BACKEND`: the steps run the compiled forward, the row says which backend, adds
    the first (compiling) step and inference, and the compiled eval logits' distance from the
    eager ones (the "eager" backend: dynamo's tracing without code generation, cheap on CI)."""
    res = bench_one("sakt", repeats=1, b=2, n=8, compile_backend="eager")
    assert res["compiled"] == "eager"
    assert res["first_step_s"] > 0 and res["first_inference_s"] > 0
    assert res["compiled_max_abs_diff"] < 1e-5
    assert res["train_step_s"] > 0
    assert "compiled" not in bench_one("dkt", repeats=1, b=2, n=8)


def test_compile_with_a_forced_backend_is_refused_not_ignored(monkeypatch, capsys, tmp_path):
    import bench_models

    argv = ["bench_models.py", "--models", "sakt", "--compile", "--backend", "cpu"]
    argv += ["--out", str(tmp_path / "m.json")]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        bench_models.main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--compile runs the reference attention; --backend cpu would be ignored" in err


def test_sizes_with_the_seed_sakt_case_are_refused_not_ignored(monkeypatch, capsys, tmp_path):
    """seed_sakt times seed 004's fixed case: a size flag would change nothing there (even one
    equal to the benchmark's default), so naming it with one is an error."""
    import bench_models

    argv = ["bench_models.py", "--models", "sakt", "seed_sakt", "--batch", "64", "--set", "d=32"]
    argv += ["--out", str(tmp_path / "m.json")]  # a regression must not overwrite the record
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        bench_models.main()
    assert exc.value.code == 2
    assert "--set, --batch: seed_sakt times seed 004's fixed case" in capsys.readouterr().err


def test_compile_travels_to_the_per_model_subprocess():
    import argparse

    from bench_models import device_argv

    a = argparse.Namespace(device="cpu", repeats=1, batch=2, len=8, precision=None, backend=None,
                           compile="aot_eager")  # fmt: skip
    assert device_argv(a)[-2:] == ["--compile", "aot_eager"]
    a.compile = None
    assert "--compile" not in device_argv(a)


def test_compile_refuses_the_seed_sakt_latency_case_rather_than_ignore_it():
    import argparse

    import pytest
    from bench_models import bench_named

    a = argparse.Namespace(repeats=1, device="cpu", precision=None, backend=None, compile="eager")
    with pytest.raises(ValueError, match="seed_sakt is not compiled"):
        bench_named("seed_sakt", a)


def test_matmul_share_counts_the_matrix_products_and_nothing_else():
    """`count_per_step`'s CPU share: a step of matrix products only is ~all products, an
    elementwise step none; the floor `bench_peers` derives from it rests on this."""
    import torch
    from timing import count_per_step

    a = torch.randn(256, 256)
    products = count_per_step(lambda: [a @ a for _ in range(4)], "cpu")
    elementwise = count_per_step(lambda: [(a * a).exp_() for _ in range(4)], "cpu")
    assert products["matmul_share"] > 0.9
    assert elementwise["matmul_share"] == 0


def test_a_failed_model_process_names_its_error_not_the_profilers_log(tmp_path):
    script = tmp_path / "fails.py"  # what a dying per-model process leaves on stderr
    script.write_text(
        "import sys\n"
        "print('MemoryError: the real cause', file=sys.stderr)\n"
        "print('USDT:2026-11-27 23:23:32 SyncActivityProfilerHandler.cpp:59] profiler_stop',"
        " file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    res = run_subprocess(str(script), "extrakt", [])
    assert res == {"model": "extrakt", "error": "exit status 3: MemoryError: the real cause"}
