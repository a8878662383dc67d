"""Every GPU figure of the workbook in one command (GPUs are rarely at hand for this project).

    make gpu-check                                   # = python benchmarks/gpu_check.py
    python benchmarks/gpu_check.py [--device cuda] [--out benchmarks/results/]
                                   [--data-dir ../shared/data/assist2009] [--quick]
    python benchmarks/gpu_check.py --device cpu --quick --out /tmp/check   # what CI runs
    python benchmarks/gpu_check.py --zoo --pykt-src CHECKOUT/pykt/models --budget 540
                                   # step 3 over the whole peer zoo; all within 540 s
    python benchmarks/gpu_check.py --models gkt kqn --peer-models gkt kqn --zoo
                                   # a short lease: only the models not measured yet

Runs, one after another, each as a subprocess with its own time limit (the whole within 10
minutes on one H100):
  1. the `cuda`-marked tests (tests/test_attention.py; they skip without a GPU);
  2. `bench_models.py` on the device, at the device's default precision and at bf16 (every model:
     step time, kernels per step, peak memory);
  3. `bench_peers.py --models dkt sakt akt` (our DKT/SAKT/AKT against pykt-toolkit's in the same
     process, within the step's time limit; the whole zoo: `bench_peers.py --device cuda`;
     recorded as skipped when pykt-toolkit is not installed);
  4. a short AKT / DTransformer training run (3 epochs) on ASSIST2009 fold 1 (`--data-dir`).
and writes `gpu_check.json` (every step's command, exit status, seconds and parsed JSON lines)
and `gpu_check.md` (a summary table) into `--out`, rewritten after every step so that a check cut
off by its lease keeps what finished. `--budget` bounds the whole: each step gets its own limit
or what is left of the budget, whichever is less (a device lease is short: fit it, don't overrun
it). `--zoo` runs step 3 over every model of bench_peers' zoo (the repository-only ones with
`--pykt-src`) and moves it last, so the standard steps finish first. `--quick` (the default on
CPU) shrinks every step to tiny sizes (and step 3 to SAKT alone) so that the check itself is
tested in CI; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "assist2009"


def steps(
    device: str,
    quick: bool,
    data_dir: Path,
    tmp: Path,
    zoo: bool = False,
    pykt_src: str | None = None,
    only: list[str] | None = None,
    peers_only: list[str] | None = None,
    compiled: list[str] | None = None,
) -> list[tuple[str, list[str], int]]:
    """(name, argv, seconds allowed) of each step; `only` / `peers_only`: the models of steps 2 /
    3 (None: every registered model / dkt sakt akt, or the zoo); `compiled`: models to time
    under torch.compile too (a step after bf16; None: no such step)."""
    py = sys.executable
    dev = ["--device", device]
    if quick:  # tiny sizes in one process: what CI and a loaded CPU can run
        small = ["--batch", "4", "--len", "20", "--repeats", "1"]
        models = ["--models", "akt", "dtransformer"]
        train_data = ["--preset", "tiny", "--epochs", "1", "--max-len", "16"]
    else:
        small, models = [], []
        train_data = [
            "--data-dir",
            str(data_dir),
            "--data-format",
            "auto",
            "--fold",
            "1",
            "--preset",
            "paper",
        ]
        train_data += ["--epochs", "3"]
    if only:
        models = ["--models", *only]
    bench = [py, "benchmarks/bench_models.py", *dev, *models, *small]
    if quick:
        bench += ["--process", "shared"]
    # quick: one peer (SAKT): each model costs two fresh processes for peak memory, and
    # tests/test_bench_peers.py runs the benchmark end to end on its own
    peer_models = [] if zoo else ["--models", *(["sakt"] if quick else ["dkt", "sakt", "akt"])]
    if peers_only:
        peer_models = ["--models", *peers_only]
    src = ["--pykt-src", pykt_src] if pykt_src else []
    peers = ("peers", [py, "benchmarks/bench_peers.py", *dev, *small, *peer_models, *src, "--out",
                       str(tmp / "peers.json")], 400 if zoo else 90)  # fmt: skip
    out = [
        ("cuda tests", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda",
                        "tests/test_attention.py"], 120),
        ("models", [*bench, "--out", str(tmp / "models.json")], 200),
        ("models bf16", [*bench, "--precision", "bf16", "--out",
                         str(tmp / "models_bf16.json")], 120),
        *([("models compiled", [py, "benchmarks/bench_models.py", *dev, "--models", *compiled,
                                *small, "--compile", "--out", str(tmp / "models_compiled.json")],
            240)] if compiled else []),
        peers,
        ("train", [py, "-m", "kt_lib.runs.experiment", "--models", "akt", "dtransformer", *dev,
                   *train_data, "--out", str(tmp / "train.json")], 150),
    ]  # fmt: skip
    if quick:  # a step's limit guards a lease's minutes; on a shared CPU it only guards a hang
        out = [(name, argv, 3 * limit) for name, argv, limit in out]
    if zoo:
        out = [s for s in out if s[0] != "peers"] + [s for s in out if s[0] == "peers"]
    return out


def json_lines(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def run_step(name: str, argv: list[str], limit: int) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    t0 = time.perf_counter()
    # a session of its own: at the limit the whole group is killed, the step's own children
    # too (bench_peers' fresh processes for peak memory), which subprocess.run's kill left
    # running, on the device and the cores the next step is timed on
    p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)  # fmt: skip
    try:
        stdout, stderr = p.communicate(timeout=limit)
        rc, out = p.returncode, stdout + stderr
    except subprocess.TimeoutExpired:  # its output so far, then "timed out"
        os.killpg(p.pid, signal.SIGKILL)
        stdout, stderr = p.communicate()
        rc, out = 124, stdout + stderr + "\ntimed out"
    status = "ok" if rc == 0 else "timed out (partial results)" if rc == 124 else "failed"
    if name == "peers" and "pykt" in out and "install" in out.lower() and rc != 0:
        status = "skipped: pykt-toolkit is not installed"
    return {
        "step": name,
        "argv": argv[1:],
        "rc": rc,
        "status": status,
        "seconds": round(time.perf_counter() - t0, 1),
        "results": json_lines(out),
        "tail": out[-2000:],
    }


def summary_md(report: dict) -> str:
    lines = [
        f"# GPU check: {report['device_name']} ({report['device']}), commit {report['commit']}",
        "",
        "| step | status | seconds |",
        "|---|---|---|",
        *[f"| {s['step']} | {s['status']} | {s['seconds']} |" for s in report["steps"]],
        "",
        "| step | model | train step s | peak memory MB | kernels / ops per step | ours / pykt |",
        "|---|---|---|---|---|---|",
    ]
    for s in report["steps"]:
        for r in s["results"]:
            if "model" not in r or ("train_step_s" not in r and "ours" not in r):
                continue
            ours = r.get("ours", r)
            mem = ours.get("peak_gpu_mb", ours.get("peak_rss_mb", ""))
            count = ours.get("kernels_per_step", ours.get("ops_per_step", ""))
            ratio = r.get("ours_over_theirs", {}).get("train_step", "")
            row = f"| {s['step']} | {r['model']} | {ours.get('train_step_s', '')} | {mem} | {count}"
            lines.append(row + f" | {ratio} |")
    for s in report["steps"]:
        if s["step"] == "train":
            for r in s["results"]:
                if "test_auc" in r:
                    lines.append(
                        f"\n- train: {r['model']} test AUC {r['test_auc']:.4f}, "
                        f"{r.get('train_seconds')} s training, best epoch {r.get('best_epoch')}"
                    )
    return "\n".join(lines) + "\n"


def write_report(out: Path, report: dict) -> None:
    for name, text in (
        ("gpu_check.json", json.dumps(report, indent=1)),
        ("gpu_check.md", summary_md(report)),
    ):
        part = out / (name + ".tmp")
        part.write_text(text)
        part.replace(out / name)  # atomic: a reader never sees half a report


def main(argv: list[str] | None = None) -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--data-dir", default=str(DATA))
    p.add_argument("--quick", action="store_true", help="tiny sizes (the default on CPU)")
    p.add_argument("--budget", type=float, default=600.0, help="seconds for the whole check")
    p.add_argument("--zoo", action="store_true", help="step 3 over the whole peer zoo, run last")
    p.add_argument("--pykt-src", default=None, help="a checkout's pykt/models (bench_peers)")
    p.add_argument("--models", nargs="+", default=None,
                   help="step 2's models (default: every registered model)")  # fmt: skip
    p.add_argument("--peer-models", nargs="+", default=None,
                   help="step 3's models (default: dkt sakt akt; --zoo: the zoo)")  # fmt: skip
    p.add_argument("--compile-models", nargs="+", default=None,
                   help="also time these under torch.compile (inductor), after bf16")  # fmt: skip
    a = p.parse_args(argv)
    if a.budget <= 0:
        p.error(f"--budget {a.budget}: must be positive seconds")
    t_start = time.perf_counter()
    quick = a.quick or not a.device.startswith("cuda")
    out = Path(a.out)
    tmp = out / "gpu_check_parts"
    tmp.mkdir(parents=True, exist_ok=True)
    if not quick and not Path(a.data_dir).is_dir():
        p.error(f"--data-dir {a.data_dir}: no such folder (ASSIST2009 in the 3-line layout)")
    sys.path.insert(0, str(ROOT))
    from kt_lib.provenance import device_name, git_commit

    report = {
        "device": a.device,
        "device_name": device_name(a.device),
        "quick": quick,
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "steps": [],
    }
    plan = steps(a.device, quick, Path(a.data_dir), tmp, a.zoo, a.pykt_src,
                 only=a.models, peers_only=a.peer_models, compiled=a.compile_models)  # fmt: skip
    for name, cmd, limit in plan:
        left = int(a.budget - (time.perf_counter() - t_start))
        why = None
        if left < 5:
            why = f"skipped: the {a.budget:g} s budget was spent"
        elif name == "cuda tests" and not a.device.startswith("cuda"):
            why = f"skipped: --device {a.device} (the cuda-marked tests need a CUDA device)"
        if why:
            res = {"step": name, "argv": cmd[1:], "rc": None, "seconds": 0.0, "results": [],
                   "status": why, "tail": ""}  # fmt: skip
        else:
            print(f"== {name} (at most {min(limit, left)} s)", flush=True)
            res = run_step(name, cmd, min(limit, left))
        print(f"   {res['status']} in {res['seconds']} s", flush=True)
        report["steps"].append(res)
        write_report(out, report)  # after every step: a cut-off check keeps what finished
    print(summary_md(report))
    done = all(s["status"] == "ok" or s["status"].startswith("skipped") for s in report["steps"])
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
