"""Process-level settings that make CPU training faster.

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

import ctypes
import ctypes.util
import sys

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
