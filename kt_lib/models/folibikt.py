"""FoLiBiKT (Im, Choi, Kook & Lee, CIKM 2023): AKT with a forgetting-aware linear bias.

# B batch, L query steps, S key steps, D model dim, H heads, Dh head dim
AKT (kt_lib.models.akt: Rasch embeddings, encoder on y, retriever on x, MLP on [h, x]) with
every attention layer's scores biased by the step distance before AKT's decay:
    s_ij  = q_i . k_j / sqrt(Dh) - m_h |i - j|          m_h: ALiBi slopes, 2^(-8 (h+1) / H)
    dist_ij = sqrt(|i - j| * sum_{j' > j} softmax(s)_ij')     (no gradient)
    w_ij  = softmax_j(s_ij * clamp(exp(-softplus(gamma_h) dist_ij), 1e-5, 1e5))
(the math is kt_lib.nn.reference's FoLiBi section). What step t reads is AKT's: the bias
depends on i - j only, the masks are AKT's. The cpu/cuda backends run AKT's fused kernel with
the linear bias added to the additive bias it puts on the scores (`folibi_attention`).
Deviations from pyKT's folibikt.py, besides AKT's:
- the bias is computed for the window's length (pyKT precomputes 1000 x 1000 on CUDA, so its
  model fails on CPU and for windows over 1000 steps);
- the Rasch penalty is AKT's here (weight x mean of mu^2 over valid steps; pyKT sums mu^2 over
  every position, padding included, onto a mean BCE).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..nn import cpu, reference
from ..nn.attention import MonotonicWeights
from ..nn.backend import choose
from ..nn.monotonic import ExtraHeads, MonotonicAttention
from ..nn.shapes import merge_heads
from .akt import AKT, AKTConfig
from .base import register


@dataclass
class FoLiBiKTConfig(AKTConfig):
    """FoLiBiKT sizes: AKT's fields (the slopes are fixed by the number of heads)."""

    PRESETS = {
        "tiny": AKTConfig.PRESETS["tiny"],
        # pyKT's examples/wandb_folibikt_train.py defaults (kt_config.json has no folibikt
        # entry); its model passes final_fc_dim=512 and a second hidden layer of 256
        "paper": {"d": 64, "n_heads": 8, "n_blocks": 4, "d_ff": 64, "dropout": 0.3},
    }


def folibi_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    gamma: torch.Tensor,
    slopes: torch.Tensor,
    mask: torch.Tensor,
    dropout: float = 0.0,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """FoLiBi attention on heads q [B, H, L, Dh], k/v [B, H, S, Dh] -> (out, decayed weights,
    undecayed weights; the weights None unless asked), mask bool broadcastable to [B, H, L, S].

    `reference` computes kt_lib.nn.reference.folibi as written. The `cpu` and `cuda` backends run
    AKT's fused kernel, which adds an additive bias to the raw scores before the distance, the
    decay and both softmaxes: given the mask's bias plus the linear bias, it is the same math.
    """
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    backend = choose(q)
    if backend == "reference":
        out, w, u = reference.folibi(q, k, v, gamma, slopes, mask, dropout)
        return out, (w if need_weights else None), (u if need_weights else None)
    L, S = q.shape[-2], k.shape[-2]
    bias = cpu._masked_bias(mask, q.dtype) + reference.linear_bias(slopes.to(q.dtype), L, S)
    i = torch.arange(L, device=q.device, dtype=q.dtype).unsqueeze(1)
    j = torch.arange(S, device=q.device, dtype=q.dtype).unsqueeze(0)
    has_key = mask.any(-1, keepdim=True).to(q.dtype)  # [B|1, 1, L, 1]
    theta = reference.decay_rate(gamma)
    args = (bias, (i - j).abs(), has_key, float(dropout), need_weights, backend == "cuda")
    return cpu._MonotonicCore.apply(q, k, v, theta, *args)


class FoLiBiAttention(MonotonicAttention):
    """AKT's multi-head monotonic attention on scores with a linear bias per head."""

    def __init__(self, d: int, n_heads: int, dropout: float = 0.0, kq_same: bool = True):
        super().__init__(d, n_heads, dropout, kq_same)
        # fixed, not learned: outside the state dict, moved with the module's dtype and device
        self.register_buffer("slopes", reference.alibi_slopes(n_heads), persistent=False)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = False,
        extra: ExtraHeads | None = None,
    ) -> tuple[torch.Tensor, MonotonicWeights | None]:
        """query [B, L, D], key/value [B, S, D], bool mask broadcastable to [B, H, L, S] ->
        [B, L, D] (+ decayed and undecayed weights [B, H, L, S] if asked)."""
        if extra is not None:
            raise ValueError("FoLiBiAttention has no extra heads")
        k = self.keys(key)  # [B, H, S, Dh]
        q = k if query is key and self.k_proj is None else self.split(self.q_proj(query))
        v = self.split(self.v_proj(value))  # [B, H, S, Dh]
        dtype = v.dtype
        if dtype in (torch.float16, torch.bfloat16):  # distance, decay and softmax in float32
            q, k, v = q.float(), k.float(), v.float()
        p = self.dropout if self.training else 0.0
        mask = mask.to(torch.bool)
        out, w, u = folibi_attention(q, k, v, self.gamma, self.slopes, mask, p, need_weights)
        weights = MonotonicWeights(w.detach(), u.detach()) if need_weights else None
        return self.out_proj(merge_heads(out.to(dtype))), weights


@register("folibikt")
class FoLiBiKT(AKT):
    """AKT whose attention layers add a forgetting-aware linear bias to their scores."""

    config_cls = FoLiBiKTConfig

    def __init__(self, config: FoLiBiKTConfig):
        super().__init__(config)
        c = config
        for layer in (*self.encoder, *self.retriever):
            layer.attn = FoLiBiAttention(c.d, c.n_heads, c.dropout, c.kq_same)
