"""AKT's monotonic attention (Ghosh et al. 2020): context-aware distance, per-head decay.

# B batch, H heads, L query steps, S key steps, D model dim, Dh head dim
Masks are boolean, True = the query may read that key (as in `kt_lib.nn.attention`):
- inclusive `causal_mask(L)`: key j <= i (AKT's encoder and question self-attention, "mask=1");
- strict `causal_mask(L, strict=True)`: key j < i (AKT's knowledge retriever, "mask=0"); row 0 has
  no visible key and outputs exactly zero (AKT's zero-padded first row), never NaN.

For query i and key j, with raw scores s_ij = q_i.k_j / sqrt(Dh) and a_ij their masked softmax:
    dist_ij  = sqrt(|i - j| * sum_{j' > j} a_ij')        (no gradient, as in AKT)
    decay_ij = clamp(exp(-softplus(gamma_h) * dist_ij), 1e-5, 1e5)
    w_ij     = masked softmax_j(s_ij * decay_ij)
`sum_{j' > j} a_ij'` is the attention mass between key j and the query: a key followed by many
related (highly attended) steps counts as far away, one followed by unrelated steps stays close.
AKT takes the square root of the product; we keep it so learned decay rates compare with AKT's.

Public API (also used by SimAKT/DTransformer):
- `monotonic_attention(q, k, v, gamma, mask, dropout, need_weights)` on projected heads, a fused
  CPU-friendly implementation (query blocks, batch chunks, `BufferPool` scratch memory; forward
  and gradients equal the plain formula, see tests/test_akt_idkt.py);
- `MonotonicMultiHeadAttention` (kq_same: one projection for queries and keys) and
  `MonotonicLayer` (AKT's transformer layer);
- building blocks for custom variants: `context_distance`, `decay_factor`, `decay_rate`;
- `Dropout` / `ReLUDropout` (+ `FlatSequential`): dropout with a fast 16-bit Bernoulli (`draw_keep`:
  the rate is rounded to a multiple of 1/65536), several times cheaper than `nn.Dropout` on CPU.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .shapes import merge_heads, split_heads

DECAY_MIN, DECAY_MAX = 1e-5, 1e5  # AKT's clamp of exp(-gamma * dist)
DROP_LEVELS = 1 << 16  # dropout draws 16 random bits per element: p is rounded to 1 / 65536


def draw_keep(out: torch.Tensor, p: float) -> float:
    """Fill `out` with dropout keep decisions (1 keep, 0 drop); returns the scale 1 / (1 - p').

    A fast Bernoulli: 16 random bits per element (one int64 draw gives four), compared with
    round(p * 65536); p' = that / 65536 is the rate actually used (0.05 -> 0.0500030...).
    Several times cheaper on CPU than `bernoulli_`, and seeded by the same generator. `out` is
    bool, or float in the activations' dtype (no mixed-dtype products downstream).
    """
    t = round(p * DROP_LEVELS)
    n = out.numel()
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=out.device)
    bits.random_(-(2**63), 2**63 - 1)
    r = bits.view(torch.int16)[:n].view(out.shape)
    if out.dtype == torch.bool:
        torch.ge(r, t - DROP_LEVELS // 2, out=out)
    else:  # in place on floats: a comparison into a float `out` would go through a bool copy
        out.copy_(r).ge_(t - DROP_LEVELS // 2)
    return DROP_LEVELS / (DROP_LEVELS - t)


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p: float):
        keep = torch.empty_like(x, memory_format=torch.contiguous_format)
        ctx.scale = draw_keep(keep, p)
        ctx.save_for_backward(keep)
        return (x * keep).mul_(ctx.scale)

    @staticmethod
    def backward(ctx, g):
        (keep,) = ctx.saved_tensors
        return (g * keep).mul_(ctx.scale), None


def fast_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Training-mode dropout with `draw_keep`'s fast Bernoulli (identity for p = 0)."""
    return _Dropout.apply(x, p) if p > 0 else x


class _ReLUDropout(torch.autograd.Function):
    """relu then dropout, in place on its input (a fresh Linear output)."""

    @staticmethod
    def forward(ctx, x, p: float):
        x.clamp_min_(0.0)
        ctx.scale = 1.0
        if p > 0:
            keep = torch.empty_like(x)
            ctx.scale = draw_keep(keep, p)
            x.mul_(keep).mul_(ctx.scale)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        # out >= 0, and > 0 exactly where relu passed and dropout kept: sign() is that mask
        return torch.sign(out).mul_(g).mul_(ctx.scale), None


class FlatSequential(nn.Sequential):
    """`nn.Sequential` run on [N, D] rows: a Linear on a 3-D input returns a view, which the
    in-place `ReLUDropout` must not overwrite; flattening the leading dims avoids the view."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        out = super().forward(x.reshape(-1, x.shape[-1]))
        return out.view(*lead, out.shape[-1])


class Dropout(nn.Module):
    """`nn.Dropout` with the fast 16-bit Bernoulli of `draw_keep`."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Dropout.apply(x, self.p) if self.training and self.p > 0 else x


class ReLUDropout(Dropout):
    """ReLU followed by `Dropout`, fused and in place (use right after a Linear)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.p if self.training else 0.0
        # overwrite a fresh op output; never a view (autograd would copy its whole base back)
        if torch.is_grad_enabled() and x.grad_fn is not None and x._base is None:
            return _ReLUDropout.apply(x, p)
        x = torch.relu(x)
        return _Dropout.apply(x, p) if p > 0 else x


@dataclass
class MonotonicWeights:
    """Attention weights of one layer, [B, H, L, S]; rows without visible keys are all zero."""

    decayed: torch.Tensor  # the weights actually applied to the values
    undecayed: torch.Tensor  # masked softmax of the raw scores (what plain attention would use)


def decay_rate(gamma: torch.Tensor) -> torch.Tensor:
    """Positive per-head decay rate theta_h = softplus(gamma_h)."""
    return F.softplus(gamma)


def decay_factor(dist: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """exp(-softplus(gamma) * dist) clamped to [1e-5, 1e5]; gamma [H] broadcasts to [B, H, L, S]."""
    theta = decay_rate(gamma).view(1, -1, 1, 1)
    return torch.exp(dist * -theta).clamp(DECAY_MIN, DECAY_MAX)


def context_distance(scores: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dist, undecayed weights) from raw scores [..., L, S] and a bool mask, without gradient.

    The building block for custom attention variants (e.g. DTransformer's): combine with
    `decay_factor(dist, gamma)`. `monotonic_attention` computes the same thing fused.
    """
    with torch.no_grad():
        L, S = scores.shape[-2:]
        w0 = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
        w0 = w0 * mask  # a row without keys has no mass
        dist = torch.cumsum(w0, dim=-1)
        total = dist[..., -1:].clone()  # row mass (1, or 0 for empty rows)
        i = torch.arange(L, device=scores.device, dtype=scores.dtype).unsqueeze(1)
        j = torch.arange(S, device=scores.device, dtype=scores.dtype).unsqueeze(0)
        dist.neg_().add_(total).mul_((i - j).abs_()).clamp_(min=0.0).sqrt_()
    return dist, w0


CHUNK_ELEMS = 1 << 19  # ~2 MB of float32 per chunk: the elementwise chain stays in cache
QUERY_BLOCK = 64  # query rows per block; a block skips keys that none of its queries may read
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
    """Release the scratch memory kept by `monotonic_attention` (e.g. after training)."""
    POOL.clear()


def _masked_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask: 0 where visible, a large finite negative where masked (no inf, no NaN)."""
    neg = torch.finfo(dtype).min / 2  # finite after adding any score below finfo.max / 2
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, neg)


def _query_blocks(mask: torch.Tensor) -> list[tuple[int, int, int]]:
    """(l0, l1, s1) per block of query rows: keys >= s1 are masked for every query in l0:l1.

    With a causal mask the late blocks read all keys and the early ones few: about 40% of the
    [L, S] work disappears at L = 200 with no change to any weight (masked weights are 0).
    """
    L, S = mask.shape[-2:]
    visible = mask.reshape(-1, L, S).any(0)  # [L, S]
    n = max(1, -(-L // QUERY_BLOCK))
    edges = [round(i * L / n) for i in range(n + 1)]
    blocks = []
    for l0, l1 in zip(edges[:-1], edges[1:], strict=True):
        cols = visible[l0:l1].any(0).nonzero()
        blocks.append((l0, l1, int(cols.max()) + 1 if len(cols) else 0))
    return blocks


def _rows(t: torch.Tensor, b0: int, b1: int) -> torch.Tensor:
    """Batch rows b0:b1 of a tensor that may broadcast over the batch (size-1 batch dim)."""
    return t if t.shape[0] == 1 else t[b0:b1]


def _bh(t: torch.Tensor) -> torch.Tensor:
    """[n, H, L, X] -> [n * H, L, X] view (a slice of contiguous heads folds its batch dims)."""
    return t.flatten(0, 1)


def _chunks(B: int, per_row: int):
    rows = max(1, min(B, CHUNK_ELEMS // max(1, per_row)))
    return rows, [(b0, min(B, b0 + rows)) for b0 in range(0, B, rows)]


class _MonotonicCore(torch.autograd.Function):
    """Scores -> context distance -> decay -> masked softmax -> dropout -> weighted values.

    A hand-fused version of AKT's attention for CPU speed (the arithmetic is tiny, memory
    traffic is what costs):
    - query blocks: each block of query rows only computes the keys some of its queries see;
    - batch chunks: inside a block, a few batch rows at a time go through the whole chain -
      score matmul, elementwise ops in place (`out=`), value matmul - while in cache;
    - per block, backward keeps the weights W, the dropout's keep mask (0/1), the decay
      and s3 * (-y) (decayed scores times -theta * dist, zero where the decay clamp is active:
      it carries the gradient of theta), taken from `POOL`; backward recomputes the rest per
      chunk. With dropout, dW = dP * keep / (1 - p) and W * keep / (1 - p) = P, so
      ds = P * dP - W * sum_j(P * dP).
    Forward and gradients match the plain autograd formula (tests/test_akt_idkt.py).
    """

    @staticmethod
    def forward(ctx, q, k, v, theta, bias, pos, has_key, p: float, need_weights: bool):
        # q [B, H, L, Dh] k/v [B, H, S, Dh] theta [H] bias [B|1, H|1, L, S] pos [L, S]
        B, H, L, Dh = q.shape
        S = k.shape[2]
        # contiguous heads: every chunk slice below is then a strided view bmm reads in place
        qs = torch.mul(q, Dh**-0.5, out=q.new_empty(q.shape))  # contiguous
        k, v = k.contiguous(), v.contiguous()
        th = theta.detach().to(q.dtype)
        pos_theta2 = pos * th.view(H, 1, 1).square()  # [H, L, S]: (theta |t - tau|)^2
        neg_y_max = math.log(DECAY_MIN)  # exp(-y) < DECAY_MIN below this: the clamp is active
        blocks = _query_blocks(bias > torch.finfo(q.dtype).min / 4)
        out = q.new_zeros(B, H, L, v.shape[-1])
        full_w = q.new_zeros(B, H, L, S) if need_weights else None
        full_u = q.new_zeros(B, H, L, S) if need_weights else None
        keep_grad = any(ctx.needs_input_grad)
        saved: list[torch.Tensor] = []
        for l0, l1, s1 in blocks:
            shape = (B, H, l1 - l0, s1)
            if s1 == 0:  # no query of the block sees a key: zero output
                saved += [qs.new_empty(0)] * 4
                continue
            W, D, AY = (POOL.take(shape, q) for _ in range(3))
            keep = POOL.take(shape, q) if p > 0 else None  # 1 keep, 0 drop
            bias_b, neg_pos_b = bias[..., l0:l1, :s1], -pos_theta2[:, l0:l1, :s1]
            rows, chunks = _chunks(B, H * (l1 - l0) * s1)
            work = [POOL.take((rows, *shape[1:]), q) for _ in range(3)]
            for b0, b1 in chunks:
                n = b1 - b0
                a, w, m = (x[:n] for x in work)
                torch.bmm(_bh(qs[b0:b1, :, l0:l1]), _bh(k[b0:b1, :, :s1]).mT, out=_bh(a))
                a.add_(_rows(bias_b, b0, b1))  # masked keys: a large finite negative
                torch.softmax(a, -1, out=w)  # undecayed masked softmax
                if full_u is not None:
                    full_u[b0:b1, :, l0:l1, :s1] = w
                # cumsum accumulates in double: the rounded running sums never pass the row
                # total (their last entry), so the remainder is >= 0 without a clamp
                torch.cumsum(w, -1, out=w)
                total = w[..., -1:].clone()  # row mass
                # (running sum - total) * -(theta |t - tau|)^2 = (mass after key j) * ...
                w.sub_(total).mul_(neg_pos_b).sqrt_().neg_()  # -y = -theta * dist, no gradient
                torch.threshold(w, neg_y_max, 0.0, out=m)  # 0 where the clamp will be active
                w.exp_()
                d = D[b0:b1]
                torch.clamp(w, DECAY_MIN, DECAY_MAX, out=d)  # decay
                a.mul_(d)  # decayed scores s3 (masked keys stay hugely negative)
                torch.mul(a, m, out=AY[b0:b1])
                wts = W[b0:b1]
                torch.softmax(a, -1, out=wts)
                if keep is not None:
                    scale = draw_keep(keep[b0:b1], p)
                    torch.mul(wts, keep[b0:b1], out=w).mul_(scale)  # P
                    wts = w
                out[b0:b1, :, l0:l1] = wts @ v[b0:b1, :, :s1]
            POOL.give(*work)
            if full_w is not None:
                full_w[:, :, l0:l1, :s1] = W
            saved += [W, D, AY, keep if keep is not None else W.new_empty(0)]
        out.mul_(has_key)
        if keep_grad:
            ctx.save_for_backward(qs, k, v, theta, has_key, *saved)
            ctx.blocks, ctx.p = blocks, p
            ctx.scale = DROP_LEVELS / (DROP_LEVELS - round(p * DROP_LEVELS))
        else:
            POOL.give(*saved)
        if full_w is None:
            return out, None, None
        return out, full_w.mul_(has_key), full_u.mul_(has_key)

    @staticmethod
    def backward(ctx, g_out, _gw, _gu):
        if getattr(ctx, "done", False):  # its buffers went back to the pool after the first
            raise RuntimeError(
                "monotonic attention supports one backward per forward "
                "(no retain_graph=True second pass)"
            )
        ctx.done = True
        qs, k, v, theta, has_key, *saved = ctx.saved_tensors
        p = ctx.p
        B, H, L, Dh = qs.shape
        g_out = g_out * has_key
        gq, gk, gv = torch.zeros_like(qs), torch.zeros_like(k), torch.zeros_like(v)
        g_y = torch.zeros(H, dtype=torch.float64, device=qs.device)  # sum of ds * s3 * (-y)
        for i, (l0, l1, s1) in enumerate(ctx.blocks):
            if s1 == 0:
                continue
            W, D, AY, keep = saved[4 * i : 4 * i + 4]
            shape = W.shape
            rows, chunks = _chunks(B, H * (l1 - l0) * s1)
            work = [POOL.take((rows, *shape[1:]), W) for _ in range(3)]
            for b0, b1 in chunks:
                n = b1 - b0
                g, w, pw = (x[:n] for x in work)
                go, kc, vc = g_out[b0:b1, :, l0:l1], k[b0:b1, :, :s1], v[b0:b1, :, :s1]
                torch.bmm(_bh(go), _bh(vc).mT, out=_bh(g))  # d loss / d P
                wts = W[b0:b1]
                if p > 0:
                    torch.mul(wts, keep[b0:b1], out=pw).mul_(ctx.scale)  # P again
                else:
                    pw = wts
                gv[b0:b1, :, :s1] += pw.transpose(-2, -1) @ go
                torch.mul(pw, g, out=w)
                rowsum = w.sum(-1, keepdim=True)
                torch.addcmul(w, wts, rowsum, value=-1.0, out=g)  # softmax + dropout backward
                torch.mul(g, AY[b0:b1], out=w)
                g_y += w.sum((0, 2, 3), dtype=torch.float64)
                g.mul_(D[b0:b1])  # d loss / d raw scores
                gq[b0:b1, :, l0:l1] = g @ kc
                gk[b0:b1, :, :s1] += g.transpose(-2, -1) @ qs[b0:b1, :, l0:l1]
            POOL.give(*work)
        POOL.give(*saved)
        # s3 = s * exp(-theta dist): d s3 / d theta = -s3 dist = s3 (-y) / theta
        g_theta = (g_y / theta.detach().double()).to(theta.dtype)
        return gq.mul_(Dh**-0.5), gk, gv, g_theta, None, None, None, None, None


def monotonic_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    gamma: torch.Tensor,
    mask: torch.Tensor,
    dropout: float = 0.0,
    need_weights: bool = False,
) -> tuple[torch.Tensor, MonotonicWeights | None]:
    """AKT attention on projected heads: q [B, H, L, Dh], k/v [B, H, S, Dh], gamma [H] (raw).

    `mask` is boolean, broadcastable to [B, H, L, S]; rows with no visible key output zeros.
    Returns the output [B, H, L, Dh] and, if asked, the decayed and undecayed weights.
    """
    if q.dtype in (torch.float16, torch.bfloat16):  # e.g. under autocast: the distance,
        q, k, v = q.float(), k.float(), v.float()  # decay and softmax chain stays in float32
    L, S = q.shape[2], k.shape[2]
    mask = mask.to(torch.bool)
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    has_key = mask.any(-1, keepdim=True).to(q.dtype)  # [.., L, 1]
    bias = _masked_bias(mask, q.dtype)
    i = torch.arange(L, device=q.device, dtype=q.dtype).unsqueeze(1)
    j = torch.arange(S, device=q.device, dtype=q.dtype).unsqueeze(0)
    pos = (i - j).abs_()  # [L, S] |t - tau|
    out, w, u = _MonotonicCore.apply(
        q, k, v, decay_rate(gamma), bias, pos, has_key, float(dropout), need_weights
    )
    if not need_weights:
        return out, None
    return out, MonotonicWeights(decayed=w.detach(), undecayed=u.detach())


class MonotonicMultiHeadAttention(nn.Module):
    """Multi-head monotonic attention; `kq_same` shares the query and key projection (AKT)."""

    def __init__(
        self, d: int, n_heads: int, dropout: float = 0.0, kq_same: bool = True, bias: bool = True
    ):
        super().__init__()
        if d % n_heads:
            raise ValueError(f"model dim {d} is not divisible by {n_heads} heads")
        self.d, self.h, self.kq_same, self.dropout = d, n_heads, kq_same, dropout
        self.k_proj = nn.Linear(d, d, bias=bias)
        self.q_proj = None if kq_same else nn.Linear(d, d, bias=bias)
        self.v_proj = nn.Linear(d, d, bias=bias)
        self.out_proj = nn.Linear(d, d, bias=bias)
        self.gamma = nn.Parameter(torch.empty(n_heads))  # raw decay; rate = softplus(gamma)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """AKT's init: Xavier-uniform projections, zero biases, gamma ~ Xavier on [H, 1, 1]."""
        for lin in (self.k_proj, self.q_proj, self.v_proj, self.out_proj):
            if lin is None:
                continue
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
        bound = (6.0 / (1 + self.h)) ** 0.5  # xavier_uniform_ of AKT's [H, 1, 1] gammas
        nn.init.uniform_(self.gamma, -bound, bound)

    def decay_rates(self) -> torch.Tensor:
        """Per-head decay rates softplus(gamma) [H] (large: short memory)."""
        return decay_rate(self.gamma.detach())

    def split(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(x, self.h)  # [B, H, L, Dh]

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, MonotonicWeights | None]:
        """query [B, L, D], key/value [B, S, D], mask [L, S] bool -> [B, L, D] (+ weights)."""
        k = self.split(self.k_proj(key))
        if self.q_proj is not None:
            q = self.split(self.q_proj(query))
        else:
            q = k if query is key else self.split(self.k_proj(query))  # AKT: Q = K projection
        v = self.split(self.v_proj(value))
        p = self.dropout if self.training else 0.0
        out, weights = monotonic_attention(q, k, v, self.gamma, mask, p, need_weights)
        return self.out_proj(merge_heads(out)), weights


class MonotonicLayer(nn.Module):
    """AKT's layer: x = LN(q + Drop(MHA(q, k, v))); with `ffn`, x = LN(x + Drop(FFN(x))),
    FFN = Linear(D, F) - ReLU - Dropout - Linear(F, D)."""

    def __init__(
        self,
        d: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        kq_same: bool = True,
        ffn: bool = True,
    ):
        super().__init__()
        self.attn = MonotonicMultiHeadAttention(d, n_heads, dropout, kq_same)
        self.drop1 = Dropout(dropout)
        self.ln1 = nn.LayerNorm(d)
        self.ffn = (
            FlatSequential(nn.Linear(d, d_ff), ReLUDropout(dropout), nn.Linear(d_ff, d))
            if ffn
            else None
        )
        self.drop2 = Dropout(dropout) if ffn else None
        self.ln2 = nn.LayerNorm(d) if ffn else None

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, MonotonicWeights | None]:
        h, weights = self.attn(query, key, value, mask, need_weights)
        x = self.ln1(query + self.drop1(h))
        if self.ffn is not None:
            x = self.ln2(x + self.drop2(self.ffn(x)))
        return x, weights
