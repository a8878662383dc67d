"""benchmarks/bench_slots_revision.py: the Block 4 kernel of a git revision, loaded beside this
checkout's, runs that revision's C (not this checkout's) and computes what ours does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_slots_revision import base_module  # noqa: E402

from kt_lib.nn import native, slots  # noqa: E402


def test_a_revisions_kernel_loads_beside_ours_and_agrees(tmp_path):
    if native.load("slot_chain") is None:
        pytest.skip(f"no native chain here: {native.why_not('slot_chain')}")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True)  # fmt: skip
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    base = base_module("HEAD", tmp_path)
    assert base is not slots and base._BASE_LIB is not native.load("slot_chain")
    assert base._native(torch.zeros(1)) is base._BASE_LIB  # its own library, not ours
    torch.manual_seed(0)
    B, K, H, S, Dh = 2, 3, 2, 9, 4
    r = torch.randn(B, K, H, 1, S, requires_grad=True)
    v = torch.randn(B, 1, H, S, Dh, requires_grad=True)
    gamma, keep = torch.randn(H), torch.ones(1, S, dtype=torch.bool)
    outs = []
    for module in (slots, base):
        out, _ = module.slot(r, v, gamma, keep)
        (gr, gv) = torch.autograd.grad(out.square().sum(), (r, v))
        outs.append((out, gr, gv))
    for ours, theirs in zip(*outs, strict=True):
        assert torch.allclose(ours, theirs, atol=1e-6)
