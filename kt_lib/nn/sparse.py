"""sparseKT's k-sparse attention: the interface over `kt_lib.nn.reference.sparse_attention`.

# B batch, H heads, L query steps, S key steps, Dh head dim
The math (top-k or cumulative-threshold selection of the softmax weights over readable keys,
renormalised over the kept ones) is written once in kt_lib.nn.reference. On CPU the renormalised
selection runs in the fused attention kernel (kt_lib.nn.cpu: query blocks and batch chunks, the
selection applied to each chunk's weights, fast dropout); the weights asked for, pyKT's second
softmax, and other devices run the reference as written.
"""

from __future__ import annotations

import functools

import torch

from . import cpu, reference
from .backend import choose

SELECTIONS = ("topk", "soft")
REWEIGHTS = ("renormalise", "softmax")


def sparse_attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    selection: str,
    k_top: int,
    ratio: float,
    dropout: float = 0.0,
    need_weights: bool = False,
    reweight: str = "renormalise",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """k-sparse attention on heads q [B, H, L, Dh], k/v [B, H, S, Dh], bool mask broadcastable
    to [B, H, L, S] -> (out [B, H, L, Dh], weights before dropout if asked); rows with no
    readable key output zeros. Under autocast the selection runs in float32."""
    dtype = v.dtype
    if q.dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    if selection not in SELECTIONS:
        raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
    if mask is not None:
        mask = mask.to(torch.bool)
    if not need_weights and reweight == "renormalise" and choose(q) == "cpu":
        if selection == "topk":
            select = functools.partial(reference.topk_keep, k=k_top)
        else:
            select = functools.partial(reference.threshold_keep, ratio=ratio)
        out = cpu.sparse_attention(q, k, v, mask, dropout, select)  # empty rows: zeros
        return out.to(dtype), None
    out, w = reference.sparse_attention(
        q, k, v, mask, selection, k_top, ratio, dropout, reweight=reweight
    )
    return out.to(dtype), (w.detach() if need_weights else None)
