"""The `cuda` backend: whole-tensor attention programs, no Python loop over blocks or chunks.

# B batch, H heads, L query steps, S key steps, Dh head dim, K knowledge slots
- plain attention: `F.scaled_dot_product_attention` (flash / memory-efficient kernels on a GPU,
  `dropout_p` for dropout on the weights; an additive score bias goes into its float mask);
- AKT's monotonic attention: the fused chain of kt_lib.nn.cpu run as one block and one chunk
  (about 30 kernels per call, no host synchronisation; it keeps 4 [B, H, L, S] tensors for
  backward where autograd on the reference chain keeps about 8);
- DTransformer's slot attention (Block 4): kt_lib.nn.slots, chunked from a memory budget, the
  same code as on CPU with chunks large enough to fill a GPU.
Everything here runs on any device; tests compare it with kt_lib.nn.reference on CPU.
"""

from __future__ import annotations

import torch.nn.functional as F

from . import cpu
from .reference import safe_mask


def attention(q, k, v, mask, dropout: float, bias=None):
    """Plain attention (no weights returned) through SDPA; rows without a readable key output
    zeros. `bias`: a fixed additive score bias (ALiBi's) folded into SDPA's float mask."""
    attn_mask = safe_mask(mask) if bias is None else cpu.score_bias(mask, bias, q.dtype)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout)
    return cpu.zero_empty_rows(out, mask)


def monotonic(q, k, v, theta, mask, dropout: float, need_weights: bool):
    """AKT attention -> (out, decayed, undecayed): the fused chain as one whole-tensor block."""
    return cpu.monotonic(q, k, v, theta, mask, dropout, need_weights, whole=True)
