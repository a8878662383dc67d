"""sparseKT's k-sparse attention: the interface over `kt_lib.nn.reference.sparse_attention`.

# B batch, H heads, L query steps, S key steps, Dh head dim
The math (top-k or cumulative-threshold selection of the softmax weights over readable keys,
renormalised over the kept ones) is written once in kt_lib.nn.reference; it runs as written on
every device (sorts and scatters over [B, H, L, S], the size of the weights themselves).
"""

from __future__ import annotations

import torch

from . import reference

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
    if mask is not None:
        mask = mask.to(torch.bool)
    out, w = reference.sparse_attention(
        q, k, v, mask, selection, k_top, ratio, dropout, reweight=reweight
    )
    return out.to(dtype), (w.detach() if need_weights else None)
