"""Recycled CPU scratch tensors for the `cpu` backend's kernels (kt_lib.nn.cpu)."""

from __future__ import annotations

from collections import OrderedDict

import torch

POOL_MAX_BYTES = 2 << 30  # scratch memory kept for reuse between steps (CPU only)


class BufferPool:
    """Recycles large CPU scratch tensors between calls.

    A fresh multi-megabyte CPU allocation is a new mapping: every page faults on first touch,
    which costs more than the arithmetic done on it. The attention below takes its [B, H, L, S]
    buffers from here and gives them back after backward (or right away without autograd). A
    buffer reused by a later forward bumps its version counter, so a second backward through a
    stale graph fails loudly instead of reading overwritten values.
    """

    def __init__(self, max_bytes: int = POOL_MAX_BYTES):
        self.max_bytes = max_bytes
        self.free: OrderedDict[tuple, list[torch.Tensor]] = OrderedDict()
        self.bytes = 0

    def take(
        self, shape: tuple[int, ...], like: torch.Tensor, dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        dtype = dtype or like.dtype
        key = (tuple(shape), dtype, like.device)
        stack = self.free.get(key)
        if stack:
            t = stack.pop()
            if not stack:  # no empty stacks: eviction below pops from the oldest key
                del self.free[key]
            self.bytes -= t.numel() * t.element_size()
            return t
        return torch.empty(shape, dtype=dtype, device=like.device)

    def give(self, *tensors: torch.Tensor | None) -> None:
        seen = set()
        for t in tensors:
            if t is None or id(t) in seen or t.device.type != "cpu" or t.numel() == 0:
                continue
            seen.add(id(t))
            key = (tuple(t.shape), t.dtype, t.device)
            self.free.setdefault(key, []).append(t)
            self.free.move_to_end(key)
            self.bytes += t.numel() * t.element_size()
        while self.bytes > self.max_bytes and self.free:  # evict the least recently used shapes
            key, stack = next(iter(self.free.items()))
            if not stack:
                del self.free[key]
                continue
            t = stack.pop(0)
            self.bytes -= t.numel() * t.element_size()
            if not stack:
                del self.free[key]

    def clear(self) -> None:
        self.free.clear()
        self.bytes = 0


POOL = BufferPool()


def clear_buffer_pool() -> None:
    """Release the scratch memory kept by the CPU attention kernels (e.g. after training)."""
    POOL.clear()
