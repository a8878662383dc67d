"""benchmarks/gpu_check.py, the one-command GPU check, run at tiny sizes on CPU (what CI can run):
every step completes or is skipped for a stated reason, and the summary carries the figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_runs_on_cpu_at_tiny_sizes(tmp_path):
    p = subprocess.run(  # a generous budget: CI shares two cores among two pytest workers and nbval
        [sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--quick", "--budget",
         "3000", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=3100,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    status = {s["step"]: s["status"] for s in report["steps"]}
    assert set(status) == {"cuda tests", "models", "models bf16", "peers", "train"}
    assert all(v == "ok" or v.startswith("skipped") for v in status.values()), status
    assert status["cuda tests"].startswith("skipped: --device cpu")
    models = {r["model"] for s in report["steps"] if s["step"] == "models" for r in s["results"]}
    assert {"akt", "dtransformer"} <= models
    peers = [r["model"] for s in report["steps"] if s["step"] == "peers" for r in s["results"]]
    if not status["peers"].startswith("skipped"):  # skipped where pykt-toolkit is not installed
        assert peers == ["sakt"]  # quick: one peer, each costs two fresh processes
    trained = [r for s in report["steps"] if s["step"] == "train" for r in s["results"]]
    assert {r["model"] for r in trained if 0 < r.get("test_auc", 0) <= 1} == {"akt", "dtransformer"}
    md = (tmp_path / "gpu_check.md").read_text()
    assert "| models | dtransformer |" in md and report["device"] == "cpu"


def test_zoo_moves_the_peers_step_last_over_every_model():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_check import steps

    plain = steps("cuda", False, Path("d"), Path("t"))
    zoo = steps("cuda", False, Path("d"), Path("t"), zoo=True, pykt_src="src/models")
    assert [s[0] for s in plain][-2:] == ["peers", "train"]
    assert [s[0] for s in zoo][-1] == "peers"
    peers = zoo[-1][1]
    assert "--models" not in peers and peers[peers.index("--pykt-src") + 1] == "src/models"
    assert "--models" in dict((s[0], s[1]) for s in plain)["peers"]


def test_a_spent_budget_skips_the_remaining_steps_and_still_writes_the_report(tmp_path):
    p = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--quick", "--budget",
         "2", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [s["status"] for s in report["steps"]] == ["skipped: the 2 s budget was spent"] * 5
    bad = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--budget", "0", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "--budget 0" in bad.stderr


def test_models_and_peer_models_narrow_steps_2_and_3():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_check import steps

    plan = steps("cuda", False, Path("d"), Path("t"), zoo=True, only=["gkt", "kqn"],
                 peers_only=["skvmn"])  # fmt: skip
    got = {name: argv for name, argv, _ in plan}
    for step in ("models", "models bf16"):
        i = got[step].index("--models")
        assert got[step][i + 1 : i + 3] == ["gkt", "kqn"] and got[step][i + 3].startswith("--")
    peers = got["peers"]
    assert peers[peers.index("--models") + 1] == "skvmn"


def test_compile_models_add_a_compiled_step_after_bf16_and_none_without_them():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_check import steps

    names = [n for n, _, _ in steps("cuda", False, Path("d"), Path("t"))]
    assert "models compiled" not in names
    plan = steps("cuda", False, Path("d"), Path("t"), compiled=["akt", "dkt"])
    names = [n for n, _, _ in plan]
    assert names.index("models compiled") == names.index("models bf16") + 1
    argv = dict((n, a) for n, a, _ in plan)["models compiled"]
    i = argv.index("--models")
    assert argv[i + 1 : i + 3] == ["akt", "dkt"] and "--compile" in argv
    assert argv[argv.index("--device") + 1] == "cuda"


def test_a_step_past_its_limit_ends_with_its_children(tmp_path):
    """A step's children (bench_peers' fresh processes for peak memory) outlived a step killed at
    its limit, still using the device and the cores the next step is timed on. The whole group
    goes, at the limit, and the output so far is kept."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_check import run_step

    pid_file = tmp_path / "child.pid"
    child = (f"import time, pathlib, os; pathlib.Path({str(pid_file)!r})"
             ".write_text(str(os.getpid())); time.sleep(120)")  # fmt: skip
    parent = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); "
              "print('started', flush=True); time.sleep(120)")  # fmt: skip
    t0 = time.perf_counter()
    step = run_step("peers", [sys.executable, "-c", parent], limit=5)
    assert time.perf_counter() - t0 < 60
    assert step["rc"] == 124 and step["status"] == "timed out (partial results)"
    assert "started" in step["tail"] and step["tail"].endswith("timed out")
    pid = int(pid_file.read_text())
    for _ in range(50):  # killed at once; its reaping (it is an orphan) may take a moment
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        raise AssertionError(f"the step's child {pid} outlived the step")
