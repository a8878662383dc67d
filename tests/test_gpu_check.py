"""benchmarks/gpu_check.py, the one-command GPU check, run at tiny sizes on CPU (what CI can run):
every step completes or is skipped for a stated reason, and the summary carries the figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_runs_on_cpu_at_tiny_sizes(tmp_path):
    p = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--quick", "--out",
         str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    status = {s["step"]: s["status"] for s in report["steps"]}
    assert set(status) == {"cuda tests", "models", "models bf16", "peers", "train"}
    assert all(v == "ok" or v.startswith("skipped") for v in status.values()), status
    models = {r["model"] for s in report["steps"] if s["step"] == "models" for r in s["results"]}
    assert {"akt", "dtransformer"} <= models
    trained = [r for s in report["steps"] if s["step"] == "train" for r in s["results"]]
    assert {r["model"] for r in trained if 0 < r.get("test_auc", 0) <= 1} == {"akt", "dtransformer"}
    md = (tmp_path / "gpu_check.md").read_text()
    assert "| models | dtransformer |" in md and report["device"] == "cpu"
