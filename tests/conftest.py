"""Shared fixtures: a seed, tiny datasets, the path of the real data (tests skip without it),
closing figures after plotting tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from kt_lib.data.dataset import KTDataset, StudentSeq

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# Tiny models are overhead-bound: one thread is as fast, and far cheaper on a shared machine.
torch.set_num_threads(1)


@pytest.fixture
def seed() -> int:
    torch.manual_seed(0)
    return 0


def make_tiny_dataset(
    num_c: int = 12, num_pid: int = 36, K: int = 2, n: int = 40, L: int = 30, seed: int = 0
) -> KTDataset:
    """Random students with ragged lengths; pids consistent with num_pid (0: none)."""
    rng = np.random.default_rng(seed)
    students = []
    for i in range(n):
        length = int(rng.integers(L // 2, L + 1))
        q = rng.integers(0, num_c, length)
        r = rng.integers(0, K, length)
        pid = rng.integers(0, num_pid, length) if num_pid else None
        students.append(StudentSeq(i, q, r, pid))
    return KTDataset(students, num_c=num_c, num_pid=num_pid, K=K, name="tiny")


@pytest.fixture
def tiny_data():
    return make_tiny_dataset


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip(f"real datasets not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _fresh_seed_warnings(monkeypatch):
    """Seed warnings are raised once per process; each test starts as a fresh process would."""
    from kt_lib import seed_warnings

    monkeypatch.setattr(seed_warnings, "_SEEN", set())


@pytest.fixture
def close_figures():
    """Close every figure a plotting test opened (used by the tests/test_viz_*.py files)."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.fixture
def poisoned_buffers(monkeypatch) -> None:
    """The CPU kernels' uninitialised output and gradient buffers (`new_heads(...,
    zeros=False)`) come filled with NaN: a part the kernel neither writes nor zeroes then shows
    in the compared outputs and gradients instead of passing on whatever memory held."""
    import kt_lib.nn.cpu as cpu_kernels

    plain = cpu_kernels.new_heads

    def poisoned(like, shape, step_major_layout, zeros=True):
        t = plain(like, shape, step_major_layout, zeros)
        return t if zeros else t.fill_(float("nan"))

    monkeypatch.setattr(cpu_kernels, "new_heads", poisoned)


@pytest.fixture
def kernel_draws(monkeypatch) -> list[torch.Tensor]:
    """The dropout keep masks the CPU attention kernels draw (one per query block, in block
    order), recorded so that a reference given the same draws can be compared with them."""
    import kt_lib.nn.cpu as cpu_kernels
    import kt_lib.nn.dropout as drop

    draws: list[torch.Tensor] = []

    def recording(out, p):
        scale = drop.draw_keep(out, p)
        draws.append(out.clone())
        return scale

    monkeypatch.setattr(cpu_kernels, "draw_keep", recording)
    return draws
