"""Where a result came from: the workbook's git commit, package versions, the device and the
CPU cores. A bottom-layer module: it imports nothing of kt_lib, so every layer may record it."""

from __future__ import annotations

import functools
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [
    "torch",
    "numpy",
    "pandas",
    "scikit-learn",
    "matplotlib",
    "seaborn",
    "papermill",
    "nbconvert",
    "nbval",
]


# what decides a run's numbers: an edit here marks a row's commit "+dirty" (results/, docs/
# and notebooks/ do not)
CODE_PATHS = ("kt_lib", "benchmarks", ":(exclude)benchmarks/results", "pyproject.toml",
              "constraints.txt")  # fmt: skip


def git_commit() -> str:
    """`git rev-parse --short HEAD` (+dirty); KT_COMMIT when set (a copy of the tree without its
    .git, e.g. on a lent GPU machine, names the commit it was copied from); else "unknown"."""
    if os.environ.get("KT_COMMIT"):
        return os.environ["KT_COMMIT"]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(  # the code only: the studies' own results files change as
            ["git", "status", "--porcelain", "--", *CODE_PATHS],  # they run, which says nothing
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return out + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@functools.cache  # one git call per pair of commits (adopt asks per row)
def contains(later: str | None, earlier: str | None) -> bool:
    """Whether commit `later` holds commit `earlier` (git ancestry, each maybe "+dirty"); False
    where either is unknown or git cannot tell (a copy of the tree without its history)."""
    if not later or not earlier or "unknown" in (later, earlier):
        return False
    a, b = earlier.split("+")[0], later.split("+")[0]
    try:
        return (
            subprocess.run(
                ["git", "merge-base", "--is-ancestor", a, b], cwd=ROOT, capture_output=True
            ).returncode
            == 0
        )
    except OSError:
        return False


def run_commit() -> str | None:
    """The commit a results row records: `git_commit()`, None where it is unknown."""
    found = git_commit()
    return None if found == "unknown" else found


def versions() -> dict[str, str]:
    """Python's and the main packages' versions ("-" for a package not installed)."""
    found = {"python": platform.python_version()}
    for pkg in PACKAGES:
        try:
            found[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            found[pkg] = "-"
    return found


def cpu_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


GPU_MARKERS = ("nvidia", "tesla", "geforce", "quadro", "radeon", "instinct", "gpu")


# a CPU's name that mentions its integrated graphics ("AMD Ryzen 7 5800H with Radeon Graphics",
# "... w/ Radeon 780M Graphics", "AMD Ryzen AI 9 HX 370 w/ Radeon 890M") is still a CPU
_INTEGRATED = re.compile(r"\b(with|w/)\s+radeon\b.*")
_MISSING = {"", "nan", "none", "null", "<na>"}


def device_kind(name: str | None) -> str:
    """The kind, "gpu" or "cpu", of a run's `device_name`; "unknown" for a missing name (None,
    NaN, empty), which pairs with nothing. Runs pair within a kind: a GPU's TF32 and kernels
    move a result systematically (the same SimAKT run: 0.7927 on an H100, 0.7897 on a CPU); two
    CPU models differ only in rounding, which the spread over folds already holds."""
    low = str(name).strip().lower() if name is not None else ""
    if low in _MISSING:
        return "unknown"
    low = _INTEGRATED.sub("", low)
    return "gpu" if any(m in low for m in GPU_MARKERS) else "cpu"


def device_name(device: str = "cpu") -> str:
    """The GPU's name for a CUDA device, else the CPU model (from /proc/cpuinfo where it exists)."""
    if str(device).startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.device(device))
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"
