"""kt_lib.nn.pool: the CPU kernels' recycled scratch tensors."""

from __future__ import annotations

import torch

from kt_lib.nn.pool import BufferPool


def test_buffer_pool_survives_eviction_with_changing_shapes():
    """Regression: batches of varying length (length bucketing) left an empty stack at the
    front of the pool, and eviction then popped from it (IndexError in AKT's backward)."""
    like = torch.zeros(1)
    pool = BufferPool(max_bytes=3 * 4 * 100)
    a = pool.take((10, 10), like)
    pool.give(a)
    assert pool.take((10, 10), like) is a and pool.bytes == 0  # reused, its stack removed
    pool.give(*(torch.empty(20, 10) for _ in range(2)))  # over budget: evicts the oldest
    assert 0 < pool.bytes <= pool.max_bytes
    assert all(stack for stack in pool.free.values())
