"""The `cuda` backend: whole-tensor attention programs, no Python loop over blocks or chunks.

# B batch, H heads, L query steps, S key steps, Dh head dim, K knowledge slots
- plain attention: `F.scaled_dot_product_attention` (flash / memory-efficient kernels on a GPU,
  `dropout_p` for dropout on the weights);
- AKT's monotonic attention: the fused chain of kt_lib.nn.cpu run as one block and one chunk
  (about 30 kernels per call, no host synchronisation; it keeps 4 [B, H, L, S] tensors for
  backward where autograd on the reference chain keeps about 8);
- DTransformer's slot attention: `slot_distance` from prefix sums and `_SlotAttention`, a
  hand-written backward that keeps 2 [B, K, H, L, S] tensors instead of about 10. It has no
  loop to block, so the `cpu` backend runs it too.
Everything here runs on any device; tests compare it with kt_lib.nn.reference on CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import cpu
from .cpu import without_autocast
from .reference import DECAY_MAX, DECAY_MIN, MAXOUT_FLOOR, safe_mask


def attention(q, k, v, mask, dropout: float):
    """Plain attention (no weights returned) through SDPA; rows without keys are zeroed by the
    caller."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=safe_mask(mask), dropout_p=dropout)


def monotonic(q, k, v, theta, mask, dropout: float, need_weights: bool):
    """AKT attention -> (out, decayed, undecayed): the fused chain as one whole-tensor block."""
    return cpu.monotonic(q, k, v, theta, mask, dropout, need_weights, whole=True)


def slot_distance(r: torch.Tensor, keep: torch.Tensor, strict: bool = True) -> torch.Tensor:
    """AKT's context distance for Block 4's slot queries, from prefix sums, without gradient.

    r [B, K, H, 1, S]: a slot's scores against every key, the same for every query step t;
    keep [B|1, S]: keys not hidden. Query t reads keys j < t with keep_j, so its masked softmax
    is e_j / C_t with e_j = exp(r_j) keep_j and C_t = sum_{j<t} e_j, and the attention mass after
    key j is 1 - P_j / C_t with P_j = sum_{j'<=j} e_j'. Both sums are prefix sums taken in log
    space (`logcumsumexp`), so each query's normaliser reads only the keys it may read: no
    stabilising max over the whole row, in which a future key's score would move the past.
    Returns dist [B, K, H, L, S] (L = S). `strict=False` lets query t read key t too (tests).
    """
    with torch.no_grad():
        S = r.shape[-1]
        keep = keep.view(keep.shape[0], 1, 1, 1, S)
        log_p = torch.logcumsumexp(r.masked_fill(~keep, float("-inf")), -1)  # log P_j
        log_c = F.pad(log_p[..., :-1], (1, 0), value=float("-inf")) if strict else log_p
        log_c = log_c.transpose(-1, -2)  # log C_t [B, K, H, S, 1]
        after = torch.where(torch.isfinite(log_c), -torch.expm1(log_p - log_c), 0.0)
        pos = torch.arange(S, device=r.device)
        gap = (pos.unsqueeze(1) - pos.unsqueeze(0)).abs().to(r.dtype)  # |t - j|
        return after.nan_to_num_(0.0).mul_(gap).clamp_(min=0.0).sqrt_()


class _SlotAttention(torch.autograd.Function):
    """softmax_j(r_j * decay(dist_tj)) over visible keys, max-out rescaled, times v.

    Fused by hand because autograd keeps about ten [B, K, H, L, S] tensors for this chain (the
    slot dimension makes them large: 64 x 16 x 8 x 200 x 200 floats = 1.3 GB each); this
    keeps two (dist and the weights) and recomputes the decay in the backward pass.
    """

    @staticmethod
    @without_autocast
    def forward(ctx, r, v, gamma, dist, mask):
        theta = F.softplus(gamma).view(-1, 1, 1)
        decay = torch.exp(dist * -theta).clamp_(DECAY_MIN, DECAY_MAX)
        s = decay.mul_(r).masked_fill_(~mask, torch.finfo(r.dtype).min)
        w = torch.softmax(s, dim=-1)
        del s, decay
        has_key = mask.any(-1, keepdim=True)
        w.mul_(has_key)
        c = w.amax(-1, keepdim=True).clamp_(min=MAXOUT_FLOOR)  # max-out: largest weight -> 1
        w.div_(c)
        ctx.save_for_backward(r, v, gamma, dist, w, c)
        ctx.mark_non_differentiable(w)
        return w @ v, w

    @staticmethod
    @without_autocast
    def backward(ctx, g, _gw):
        r, v, gamma, dist, w, c = ctx.saved_tensors
        grad_w = g @ v.transpose(-2, -1)  # [B, K, H, L, S]
        grad_v = (w.transpose(-2, -1) @ g).sum(1, keepdim=True) if ctx.needs_input_grad[1] else None
        # w = p / c with c = max(max_j p, 0.2): d/dp = 1/c, minus the path through c at the argmax
        dot = (grad_w * w).sum(-1, keepdim=True)
        grad_p = grad_w.div_(c)
        through_c = torch.where(c > MAXOUT_FLOOR, -dot / c, 0.0)
        grad_p.scatter_add_(-1, w.argmax(-1, keepdim=True), through_c)
        p = w * c
        grad_s = grad_p.sub_((grad_p * p).sum(-1, keepdim=True)).mul_(p)  # softmax backward
        del grad_p, p
        theta = F.softplus(gamma).view(-1, 1, 1)
        decay = torch.exp(dist * -theta)
        live = (decay >= DECAY_MIN) & (decay <= DECAY_MAX)  # the clamp passes gradient here
        decay.clamp_(DECAY_MIN, DECAY_MAX)
        grad_r = (grad_s * decay).sum(-2, keepdim=True)
        grad_gamma = None
        if ctx.needs_input_grad[2]:  # d decay / d gamma = -sigmoid(gamma) * dist * decay
            t = grad_s.mul_(r).mul_(decay).mul_(dist).mul_(live)
            dims = [d for d in range(t.dim()) if d != t.dim() - 3]
            grad_gamma = -t.sum(dims) * torch.sigmoid(gamma)
        return grad_r, grad_v, grad_gamma, None, None


def slot(r, v, gamma, mask, dist):
    """Block 4 -> (out [B, K, H, L, Dh], weights [B, K, H, L, S]); `dist` from slot_distance."""
    return _SlotAttention.apply(r, v, gamma, dist, mask)
