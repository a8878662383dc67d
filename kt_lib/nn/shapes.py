"""Head reshaping shared by every multi-head attention in kt_lib."""

from __future__ import annotations

import torch


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[..., L, D] -> [..., H, L, D / H] (a view when x is contiguous)."""
    *lead, L, D = x.shape
    return x.view(*lead, L, n_heads, D // n_heads).transpose(-3, -2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[..., H, L, Dh] -> [..., L, H * Dh]; inverse of `split_heads`."""
    *lead, H, L, Dh = x.shape
    return x.transpose(-3, -2).reshape(*lead, L, H * Dh)
