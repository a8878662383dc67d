"""Process settings (kt_lib.runtime)."""

from __future__ import annotations

import sys

import pytest
import torch

from kt_lib.runtime import precision_context


def test_keep_freed_memory_applies_once_on_glibc():
    import platform

    from kt_lib import runtime

    expected = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert runtime.keep_freed_memory() is expected
    assert runtime.keep_freed_memory() is expected  # idempotent
    x = torch.ones(64 << 20 >> 2)  # 64 MB: above glibc's default mmap threshold
    del x
    assert torch.ones(8).sum() == 8  # allocation still works after the settings


def test_bf16_forwards_see_the_optimizers_in_place_updates():
    """`fit` holds one precision context around its whole loop: a weight updated in place by
    the optimizer must reach the next forward (autocast's weight cache kept the first step's
    bf16 copy until the context exited, so bf16 training ran on frozen matrix weights)."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(lin.parameters(), lr=1.0)
    x = torch.randn(16, 8)
    with precision_context("bf16", "cpu"):
        before = lin(x)
        before.float().pow(2).mean().backward()
        opt.step()
        after = lin(x)
    with torch.no_grad():
        want = lin(x)  # fp32, outside the context: the updated weights
    assert not torch.allclose(before.float(), after.float(), atol=1e-2)
    torch.testing.assert_close(after.float(), want, atol=0.05, rtol=0.02)  # bf16 rounding only


def test_auto_precision_is_bf16_only_on_a_cpu_that_multiplies_bf16(monkeypatch):
    from kt_lib import runtime

    real = runtime.cpu_has_bf16
    for native, want in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(runtime, "cpu_has_bf16", lambda native=native: native)
        assert runtime.resolve_precision("auto", "cpu") == want
        assert runtime.resolve_precision("auto", "cuda:0") == "tf32"
        with precision_context("auto", "cpu") as resolved:
            assert resolved == want
            assert torch.is_autocast_enabled("cpu") == (want == "bf16")
    assert runtime.resolve_precision(None, "cpu") == "fp32"  # the default is unchanged
    with pytest.raises(ValueError, match="precision must be one of"):
        runtime.resolve_precision("fp8", "cpu")
    assert isinstance(real.__wrapped__(), bool)  # reads this machine's flags


def test_check_device_refuses_what_this_machine_cannot_train_on():
    from kt_lib.runtime import check_device

    check_device("cpu")
    for bad, says in [("cdua", "is not a device name"), ("meta", "trains on cpu or cuda")]:
        with pytest.raises(ValueError, match=says):
            check_device(bad)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            check_device("cuda:0")
    else:
        with pytest.raises(ValueError, match="CUDA device"):
            check_device(f"cuda:{torch.cuda.device_count()}")
