"""Which backend computes an attention: `reference`, `cpu` or `cuda`.

- `reference` (kt_lib.nn.reference): the formula in plain torch; the definition the others are
  tested against, and what a reader opens to learn a model.
- `cpu` (kt_lib.nn.cpu): cache-blocked kernels (query blocks, batch chunks, a buffer pool).
- `cuda` (kt_lib.nn.cuda): whole-tensor programs, no Python loop over blocks or chunks
  (`F.scaled_dot_product_attention` where the math is plain attention). They run on any device,
  which is how CPU-only machines test them.

By default the backend follows the tensors' device; `use_backend(name)` (and
`TrainConfig.backend`) forces one for everything computed inside the block. Under
`torch.compile` every attention is `reference`: the compiler fuses the plain formula itself,
and the other backends' Python loops, buffer pools and 64-bit draws each break its graph (37
breaks in AKT's training step, which then ran 1.6x slower than eager on an H200: docs/gpu.md).
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar

import torch

BACKENDS = ("reference", "cpu", "cuda")
_FORCED: ContextVar[str | None] = ContextVar("kt_lib_attention_backend", default=None)


def check_backend(name: str | None) -> str | None:
    """`name` if it is None or a known backend, else a ValueError listing the valid ones."""
    if name is not None and name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; valid: None (by device), {BACKENDS}")
    return name


def compiling() -> bool:
    """Whether `torch.compile` is tracing this call (then the plain torch paths run)."""
    return torch.compiler.is_compiling()


def choose(t: torch.Tensor) -> str:
    """The backend for tensors like `t`: `reference` under torch.compile, else the forced one,
    else `cuda` on CUDA and `cpu` elsewhere."""
    if compiling():  # before the ContextVar, which dynamo cannot read
        return "reference"
    return _FORCED.get() or ("cuda" if t.is_cuda else "cpu")


@contextlib.contextmanager
def use_backend(name: str | None):
    """Force an attention backend inside the block (None: follow the device)."""
    token = _FORCED.set(check_backend(name))
    try:
        yield
    finally:
        _FORCED.reset(token)
