"""Process-level settings: faster CPU memory reuse, and the numeric precision of training.

`keep_freed_memory()`: glibc's malloc serves allocations above its mmap threshold (at most 32 MB,
adjusted at run time) with fresh `mmap` pages and gives them back on free, so every step of a
paper-size model pays page faults again for its large activations (AKT, B=64, L=200: the
[12800, 1024] FFN tensors are 52 MB; a copy into one ran at ~1 GB/s). Raising the mmap and trim
thresholds keeps freed memory in the heap for the next step. Measured with
`benchmarks/bench_models.py --models akt`: training step 1.27-1.41 s -> 1.09-1.11 s on 2 cores.
The cost: the process keeps its peak heap instead of returning it to the OS. A no-op where the C
library is not glibc (macOS, Windows, musl).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import sys
from pathlib import Path

import torch

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (glibc malloc.h)
MMAP_THRESHOLD = 1 << 30  # allocations below 1 GiB come from the heap and are reused
TRIM_THRESHOLD = 2**31 - 1  # never trim the heap top back to the OS
_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Tell glibc malloc to reuse freed large blocks (once per process); True when applied."""
    global _applied
    if _applied is None:
        _applied = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                mallopt = libc.mallopt
            except (OSError, AttributeError):  # not glibc
                return False
            mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
            _applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
                mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
            )
    return _applied


PRECISIONS = ("fp32", "tf32", "bf16", "auto")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # CPU flags of native bf16 matrix products


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags (/proc/cpuinfo; empty where that file is missing: not Linux)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return frozenset()
    return frozenset(
        next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    )


@functools.lru_cache(maxsize=1)
def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (a `BF16_FLAGS` flag in `cpu_flags`)."""
    return any(f in cpu_flags() for f in BF16_FLAGS)


def check_device(device: str) -> None:
    """Refuse a device this machine cannot train on, before any data is read (torch would fail
    at the first tensor moved, after the data were loaded; a study would record every run as a
    failed row): a name that is no torch device, a kind other than cpu and cuda, CUDA on a
    machine without one, or a CUDA index past its devices."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise ValueError(f"device {device!r} is not a device name (cpu, cuda, cuda:N)") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r}: the workbook trains on cpu or cuda")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: this machine has no CUDA device (use --device cpu)")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA "
                         "device(s)")  # fmt: skip


def resolve_precision(precision: str | None, device: str) -> str:
    """`precision` checked, or the device's default: tf32 on CUDA, fp32 elsewhere. "auto": bf16
    on a CPU that multiplies bf16 natively (the attention models' steps 0.4-0.9 of fp32's there,
    AKT's and SAKT's test AUC unchanged: docs/performance.md), else fp32; tf32 on CUDA (bf16 did not
    speed the models up on the H100 or H200 at the paper sizes: docs/gpu.md)."""
    cuda = str(device).startswith("cuda")
    if precision is None:
        return "tf32" if cuda else "fp32"
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS} or None, got {precision!r}")
    if precision == "auto":
        return "tf32" if cuda else ("bf16" if cpu_has_bf16() else "fp32")
    if precision == "tf32" and not cuda:  # it would run fp32 and be recorded as tf32
        raise ValueError(
            f"precision tf32 is a CUDA matrix-product mode; on {device} it is fp32: pass fp32"
        )
    return precision


@contextlib.contextmanager
def precision_context(precision: str | None, device: str):
    """Run the block at `precision`: fp32 (full float32 matrix products), tf32 (float32 with
    TensorFloat-32 matrix products on CUDA; refused elsewhere), bf16 (autocast to
    bfloat16 on the device, float32 master weights; attention softmax chains stay float32) or
    auto (`resolve_precision`). Yields the resolved precision; the previous matmul precision is
    restored afterwards."""
    precision = resolve_precision(precision, device)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest" if precision == "fp32" else "high")
    try:
        kind = torch.device(device).type
        # no weight cache: the cache keeps each parameter's bf16 copy until the outermost
        # autocast exits, and `fit` holds one context around its whole loop, so the optimizer's
        # in-place updates would never reach the forward (it trained on the first step's
        # weights: docs/performance.md, "bf16 trained on stale weights")
        with torch.autocast(kind, torch.bfloat16, enabled=precision == "bf16", cache_enabled=False):
            yield precision
    finally:
        torch.set_float32_matmul_precision(before)
