"""DTransformer's Block 4 (slot attention) computed chunk by chunk: the `cpu` and `cuda` backends.

# B batch, K knowledge slots, H heads, L query steps, S key steps (L = S), Dh head dim
The math is kt_lib.nn.reference.slot: slot k's score against key j is r_j (the same for every
query step t); query t reads the kept keys j < t; AKT's distance decay from the masked weights;
masked softmax; max-out (each row divided by max(its largest weight, 0.2)); weights times values.
Whole, that chain holds [B, K, H, L, S] tensors (64 x 16 x 8 x 200 x 200 floats = 1.3 GB each),
and autograd keeps about ten of them. Here it never exists whole:

- the softmax normalisers of the distance are prefix sums over keys, [B, K, H, S], computed once
  in log space (`logcumsumexp`), so each query's normaliser reads only keys it may read;
- the rest runs per chunk of (batch rows, block of query steps); a query block [t0, t1) reads
  keys j < t1 only, so the causal upper triangle (about 40% of the work at L = 200) is skipped;
- the backward pass recomputes each chunk's weights from the small inputs (r, v, gamma, keep)
  instead of saving them: nothing of size [B, K, H, L, S] is kept between the passes.

Chunk sizes come from a memory budget (bytes per [b, K, H, Lq, S'] scratch tensor; by default
`CPU_BUDGET` on CPU, where the elementwise chain should stay in cache, and `CUDA_BUDGET` on a GPU,
where chunks must be large enough to fill it). The same code runs on both devices. Tests compare
outputs and gradients with the reference in float64 (tests/test_attention.py).
"""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F

from . import native
from .cpu import without_autocast
from .reference import DECAY_MIN, MAXOUT_FLOOR

CPU_BUDGET = 4 << 20  # bytes per scratch tensor of a chunk on CPU (the chain stays in L2/L3)
CUDA_BUDGET = 256 << 20  # on a GPU: few, large chunks (few kernel launches)
QUERY_BLOCKS = 4  # query blocks per sequence: block i reads keys < its last step only


def budget_for(device: torch.device) -> int:
    return CUDA_BUDGET if device.type == "cuda" else CPU_BUDGET


def plan(B: int, K: int, H: int, S: int, budget: int, strict: bool = True, itemsize: int = 4):
    """[(b0, b1, t0, t1, s1)]: batch rows b0:b1, query steps t0:t1, keys 0:s1 (the keys any of
    those queries may read). Blocks of query steps first (causal skipping), then as many batch
    rows as the budget holds (at least one; a row wider than the budget is split into more
    query blocks)."""
    blocks = max(1, min(S, QUERY_BLOCKS))
    while blocks < S and K * H * (-(-S // blocks)) * S * itemsize > budget:
        blocks *= 2  # one batch row's block must fit the budget
    edges = [round(i * S / blocks) for i in range(blocks + 1)]
    out = []
    for t0, t1 in zip(edges[:-1], edges[1:], strict=True):
        if t1 <= t0:
            continue
        s1 = t1 - 1 if strict else t1  # query t reads keys j < t (strict) or j <= t
        if s1 <= 0:
            out.append((0, B, t0, t1, 0))  # no query here reads any key: zeros
            continue
        per_row = K * H * (t1 - t0) * s1 * itemsize
        rows = max(1, min(B, budget // per_row))
        out.extend((b0, min(B, b0 + rows), t0, t1, s1) for b0 in range(0, B, rows))
    return out


def prefix_logsums(r: torch.Tensor, keep: torch.Tensor, strict: bool = True):
    """(log P, log C), both [B, H, K, S], without gradient, from r [B, H, K, S]: P_j = sum over
    kept j' <= j of exp(r_j'); C_t = the same sum over the keys query t reads (j < t; j <= t
    when not strict). -inf where the sum is empty."""
    with torch.no_grad():
        S = r.shape[-1]
        kept = keep.view(keep.shape[0], 1, 1, S)
        log_p = torch.logcumsumexp(r.masked_fill(~kept, float("-inf")), -1)
        log_c = F.pad(log_p[..., :-1], (1, 0), value=float("-inf")) if strict else log_p
    return log_p, log_c


def _rows(t: torch.Tensor, b0: int, b1: int) -> torch.Tensor:
    return t if t.shape[0] == 1 else t[b0:b1]


_P, _L = ctypes.c_void_p, ctypes.c_long
# r, log P, log C, keep, keep rows, theta, B, H, K, S; chunk b0, b1, t0, t1, s1, strict
_SIG = [_P] * 4 + [_L, _P] + [_L] * 4 + [_L] * 5 + [ctypes.c_int]


def _native(r: torch.Tensor):
    """The compiled chain (kt_lib/nn/native/slot_chain.c) where it applies: float32 on CPU."""
    if not (native.enabled() and r.device.type == "cpu" and r.dtype == torch.float32):
        return None
    lib = native.load("slot_chain")
    if lib is not None and lib.slot_weights.argtypes is None:
        # pairs p0, p1; scratch [b * H, K, S'] (each pair's ratio bases); w
        lib.slot_weights.argtypes = [*_SIG, _L, _L, _P, _P]
        # pairs; scratch; dL/dw, w, dL/dr, dL/dtheta
        lib.slot_backward.argtypes = [*_SIG, _L, _L] + [_P] * 5
    return lib


class _Inputs:
    """The small inputs in the kernel's layout: head-major, the slots of a query step side by
    side ([b, H, Lq, K, S'] per chunk), so that one matrix product per (row, head) serves every
    slot and step of a chunk (M = Lq * K rows) and the heads' outputs merge with one copy.

    With the native chain (`lib`), a chunk's weights and its score gradients come from one C
    pass per row (kt_lib/nn/native/slot_chain.c) instead of `chunk`'s torch passes."""

    def __init__(self, r, v, gamma, keep, strict: bool):
        self.r = r.squeeze(3).transpose(1, 2).contiguous()  # [B, H, K, S]
        self.v = v.squeeze(1)  # [B, H, S, Dh]
        self.theta = F.softplus(gamma).view(-1, 1, 1, 1)
        self.keep, self.strict = keep, strict
        self.log_p, log_c = prefix_logsums(self.r, keep, strict)
        # a query with nothing to read (C_t = 0): +inf gives it finite, unused distances
        self.log_c = log_c.masked_fill(log_c == float("-inf"), float("inf"))
        self.lib = _native(self.r)
        if self.lib is not None:  # finite sentinels (the C is built with -ffast-math)
            B, H, K, S = self.r.shape
            self.c_in = (
                self.log_p.clamp(min=-1e30).contiguous(),
                self.log_c.clamp(max=1e30).contiguous(),
                keep.to(torch.float32).contiguous(),
                self.theta.detach().reshape(-1).contiguous(),
            )
            lp, lc, kf, th = self.c_in
            ptrs = (self.r.data_ptr(), lp.data_ptr(), lc.data_ptr(), kf.data_ptr())
            self.c_head = (*ptrs, kf.shape[0], th.data_ptr(), B, H, K, S)
            seen = F.pad(keep.to(torch.int32).cumsum(-1), (1, 0))  # [Bk, S + 1]: kept j < i
            self.seen = seen if strict else seen[:, 1:]

    def native_weights(self, c):
        """(w [b, H, Lq, K, S'] the max-out weights, zero in rows that read no key; rows
        [b|1, 1, Lq, 1, 1] whether a query reads any key) from the native chain."""
        b0, b1, t0, t1, s1 = c
        _, H, K, _ = self.r.shape
        w = self.r.new_empty(b1 - b0, H, t1 - t0, K, s1)
        bases = self.r.new_empty(b1 - b0, H, K, s1)
        chunk = (*self.c_head, b0, b1, t0, t1, s1, int(self.strict))
        tail = (bases.data_ptr(), w.data_ptr())
        native.run_split(self.lib.slot_weights, chunk, (b1 - b0) * H, tail)
        rows = _rows(self.seen, b0, b1)[:, t0:t1] > 0
        return w, rows.view(rows.shape[0], 1, -1, 1, 1)

    def native_backward(self, c, grad_w: torch.Tensor, grad_r: torch.Tensor):
        """(w, dL/dtheta [H]) of chunk c from dL/dw [b, H, Lq, K, S'] (contiguous), adding its
        dL/dr to grad_r [B, H, K, S]: the native chain's backward, which recomputes the weights
        w [b, H, Lq, K, S'] in the same pass (returned for the products with the values)."""
        b0, b1, t0, t1, s1 = c
        _, H, K, _ = self.r.shape
        w = self.r.new_empty(b1 - b0, H, t1 - t0, K, s1)
        bases, part = self.r.new_empty(b1 - b0, H, K, s1), self.r.new_zeros(b1 - b0, H)
        chunk = (*self.c_head, b0, b1, t0, t1, s1, int(self.strict))
        tail = tuple(t.data_ptr() for t in (bases, grad_w, w, grad_r, part))
        native.run_split(self.lib.slot_backward, chunk, (b1 - b0) * H, tail)
        return w, part.sum(0)

    def chunk(self, c: tuple[int, int, int, int, int], grad: bool = False):
        """(p, cap, rows, decay, dist, live, arg) of one chunk: p the masked softmax
        [b, H, Lq, K, S'], cap = max(max_j p, 0.2) [b, H, Lq, K, 1], rows [b, 1, Lq, 1, 1]
        whether a query reads any key; with `grad`, decay, dist, where the decay clamp does not
        bind and arg, the index of max_j p (from the same pass as the max), all the backward's;
        else None for those four (the forward computes decay in place).

        A row that reads no key (t = 0, or every earlier key hidden) has a uniform p here; the
        callers zero what it feeds, the [.., Dh] outputs and their gradients, rather than p:
        that is a pass over [b, H, Lq, K, 1]-sized rows instead of one over p."""
        b0, b1, t0, t1, s1 = c
        dev, dtype = self.r.device, self.r.dtype
        rc = self.r[b0:b1, :, None, :, :s1]  # [b, H, 1, K, S']
        lp = self.log_p[b0:b1, :, None, :, :s1]  # [b, H, 1, K, S']
        lc = self.log_c[b0:b1, :, :, t0:t1].transpose(-1, -2).unsqueeze(-1)  # [b, H, Lq, K, 1]
        t = torch.arange(t0, t1, device=dev).view(-1, 1, 1)
        j = torch.arange(s1, device=dev).view(1, 1, -1)
        readable = (j < t) if self.strict else (j <= t)  # [Lq, 1, S']
        mask = readable & _rows(self.keep, b0, b1)[:, None, None, None, :s1]
        with torch.no_grad():  # AKT's distance carries no gradient; mass after j = 1 - P_j/C_t
            # lp_j <= lc_t wherever query t reads key j; elsewhere the clamp keeps expm1 finite
            # (scores rising by more than ~88 within a block made it inf, and 0 * inf nan)
            dist = torch.expm1((lp - lc).clamp_(max=0.0)).mul_((j - t).to(dtype))
            dist = dist.clamp_(min=0.0).sqrt_()
        if grad:
            decay = torch.exp(dist * -self.theta)
            live = decay >= DECAY_MIN  # dist >= 0: decay <= 1, only the lower clamp can bind
            decay = decay.clamp_(min=DECAY_MIN)
            s = decay * rc
        else:  # dist's buffer becomes decay, then the scores
            s = dist.mul_(-self.theta).exp_().clamp_(min=DECAY_MIN).mul_(rc)
            decay = dist = live = None
        p = torch.softmax(s.masked_fill_(~mask, torch.finfo(dtype).min), -1)
        top, arg = p.max(-1, keepdim=True) if grad else (p.amax(-1, keepdim=True), None)
        cap = top.clamp_(min=MAXOUT_FLOOR)
        return p, cap, mask.any(-1, keepdim=True), decay, dist, live, arg

    def values(self, c, w: torch.Tensor) -> torch.Tensor:
        """w [b, H, Lq, K, S'] times the values -> [b, H, Lq, K, Dh]."""
        b0, b1, t0, t1, s1 = c
        b, H, Lq, K, _ = w.shape
        return (w.view(b, H, Lq * K, s1) @ self.v[b0:b1, :, :s1]).view(b, H, Lq, K, -1)


class _SlotChunked(torch.autograd.Function):
    """Block 4 chunk by chunk; with `proj` = (weight [D, D], bias [D], base [K, D], drop_keep
    [B, L, K, D] bool or None, drop scale) the output is base + dropout(merge(w @ v) @ W^T + b),
    [B, L, K, D], computed in the same chunks (DTransformer's residual input to the LayerNorm),
    so that neither the merged heads nor the projection's output exist whole either."""

    @staticmethod
    @without_autocast
    def forward(ctx, r, v, gamma, weight, bias, base, keep, drop_keep, scale, strict, budget, nw):
        B, K, H, _, S = r.shape
        Dh = v.shape[-1]
        x = _Inputs(r, v, gamma, keep, strict)
        project = weight is not None
        if project:
            out = r.new_empty(B, S, K, weight.shape[0])
        else:  # step-major [B, L, K, H, Dh] returned as a [B, K, H, L, Dh] view
            out = r.new_zeros(B, S, K, H, Dh)
        w_all = r.new_zeros(B, K, H, S, S) if nw else None
        for c in plan(B, K, H, S, budget, strict, r.element_size()):
            b0, b1, t0, t1, s1 = c
            if s1 == 0:
                o = r.new_zeros(b1 - b0, H, t1 - t0, K, Dh)
            else:
                if x.lib is not None:
                    w, rows = x.native_weights(c)
                else:
                    p, cap, rows, *_ = x.chunk(c)
                    w = p.div_(cap)
                if nw:
                    w.mul_(rows)  # a row without keys: zero weights
                    w_all[b0:b1, :, :, t0:t1, :s1] = w.permute(0, 3, 1, 2, 4)
                o = x.values(c, w)
                if x.lib is None:  # the torch chain's rows without keys hold uniform weights
                    o = torch.where(rows, o, 0.0)  # not * 0: an inf would give nan
            if not project:
                out[b0:b1, t0:t1] = o.permute(0, 2, 3, 1, 4)
                continue
            y = _merge(o) @ weight.T + bias  # [b, Lq, K, D]
            if drop_keep is not None:
                y.mul_(drop_keep[b0:b1, t0:t1]).mul_(scale)
            out[b0:b1, t0:t1] = y.add_(base)
        ctx.save_for_backward(r, v, gamma, weight, keep, drop_keep)
        ctx.strict, ctx.budget, ctx.scale = strict, budget, scale
        if nw:
            ctx.mark_non_differentiable(w_all)
        return (out if project else out.permute(0, 2, 3, 1, 4)), w_all

    @staticmethod
    @without_autocast
    def backward(ctx, g, _gw):
        r, v, gamma, weight, keep, drop_keep = ctx.saved_tensors
        B, K, H, _, S = r.shape
        Dh = v.shape[-1]
        x = _Inputs(r, v, gamma, keep, ctx.strict)
        need_r, need_v, need_gamma, need_w, need_b, need_base = ctx.needs_input_grad[:6]
        project = weight is not None
        grad_r = torch.zeros_like(x.r) if need_r else None  # [B, H, K, S]
        grad_v = torch.zeros_like(x.v) if need_v else None  # [B, H, S, Dh]
        grad_theta = torch.zeros(H, dtype=r.dtype, device=r.device) if need_gamma else None
        grad_weight = torch.zeros_like(weight) if project and need_w else None
        grad_bias = g.new_zeros(weight.shape[0]) if project and need_b else None
        grad_base = g.sum((0, 1)) if project and need_base else None
        for c in plan(B, K, H, S, ctx.budget, ctx.strict, r.element_size()):
            b0, b1, t0, t1, s1 = c
            b, Lq = b1 - b0, t1 - t0
            # the native chain's backward recomputes w and takes dL/dw in one pass (dL/dw comes
            # from the values alone): w exists only after it
            fused = s1 > 0 and x.lib is not None and (need_r or need_gamma)
            w = None
            if s1 > 0 and x.lib is not None and not fused:
                w, rows = x.native_weights(c)
            elif s1 > 0 and x.lib is None:
                p, cap, rows, decay, dist, live, arg = x.chunk(c, grad=True)
                w = p / cap
            if project:  # back through base + dropout(merged @ W^T + b)
                gy = g[b0:b1, t0:t1]  # [b, Lq, K, D]
                if drop_keep is not None:
                    gy = gy * drop_keep[b0:b1, t0:t1] * ctx.scale
                if grad_bias is not None:
                    grad_bias += gy.sum((0, 1, 2))
                gc = (gy @ weight).view(b, Lq, K, H, Dh).permute(0, 3, 1, 2, 4)
            else:
                gc = g[b0:b1, :, :, t0:t1].permute(0, 2, 3, 1, 4)  # [b, H, Lq, K, Dh]
            if s1 == 0:
                continue
            # a row without keys passes no gradient back (its output is zero; the native chain's
            # weights are zero there already); contiguous: gc may be a permuted view
            gc = (gc if x.lib is not None else gc * rows).contiguous()
            flat = gc.view(b, H, Lq * K, Dh)
            vc = x.v[b0:b1, :, :s1]  # [b, H, S', Dh]
            grad_w = None
            if fused or x.lib is None:
                grad_w = (flat @ vc.transpose(-1, -2)).view(b, H, Lq, K, s1)
            if fused:  # the rest of the chain, with w, in one C pass per row
                if grad_r is None:
                    grad_r = torch.zeros_like(x.r)  # scratch: the kernel writes both
                w, g_theta = x.native_backward(c, grad_w, grad_r)
                if need_gamma:
                    grad_theta += g_theta
            o = None
            if project and (grad_weight is not None or x.lib is None):
                o = x.values(c, w)  # the forward's output of the chunk, recomputed
                if x.lib is None:
                    o = torch.where(rows, o, 0.0)
                if grad_weight is not None:
                    grad_weight += gy.flatten(0, 2).T @ _merge(o).flatten(0, 2)
            if need_v:  # w^T g, summed over the slots and steps of the chunk
                grad_v[b0:b1, :, :s1] += w.view(b, H, Lq * K, s1).transpose(-1, -2) @ flat
            if x.lib is not None:
                continue
            # w = p / cap, cap = max(max_j p_j, 0.2): d/dp = 1/cap, and through cap at the argmax.
            # dot = sum_j grad_w_j w_j = g . (w @ v) = g . o: a dot over Dh, not a pass over S'
            if o is not None:
                dot = (gc * o).sum(-1, keepdim=True)
            else:
                dot = (grad_w * w).sum(-1, keepdim=True)
            grad_p = grad_w.div_(cap)
            bound = cap > MAXOUT_FLOOR
            through = torch.where(bound, -dot / cap, 0.0)
            grad_p.scatter_add_(-1, arg, through)
            # softmax backward: grad_s = (grad_p - sum_j grad_p_j p_j) p, where that sum is
            # dot + through * max_j p_j: 0 where the cap binds (max_j p_j = cap), else dot
            grad_s = grad_p.sub_(torch.where(bound, 0.0, dot)).mul_(p)
            grad_s.mul_(decay)  # s = r * decay: d/dr sums over the query steps
            if need_r:
                grad_r[b0:b1, :, :, :s1] += grad_s.sum(2)
            if need_gamma:  # d decay / d theta = -dist * decay where the clamp does not bind
                t = grad_s.mul_(dist).mul_(live).sum(2).mul_(x.r[b0:b1, :, :, :s1])
                grad_theta -= t.sum((0, 2, 3))
        grad_gamma = grad_theta * torch.sigmoid(gamma) if need_gamma else None
        # [B, K, H, 1, S]; without need_r, grad_r may be the native chain's scratch
        grad_r = grad_r.transpose(1, 2).unsqueeze(3) if need_r else None
        if need_v:
            grad_v = grad_v.unsqueeze(1)
        return (grad_r, grad_v, grad_gamma, grad_weight, grad_bias, grad_base) + (None,) * 6


def _merge(o: torch.Tensor) -> torch.Tensor:
    """[b, H, Lq, K, Dh] -> [b, Lq, K, H * Dh] (the heads of each slot and step side by side)."""
    b, H, Lq, K, Dh = o.shape
    return o.permute(0, 2, 3, 1, 4).reshape(b, Lq, K, H * Dh)


def _budget(r: torch.Tensor, budget) -> int:
    budget = budget_for(r.device) if budget is None else int(budget)
    if budget <= 0:
        raise ValueError(f"slot attention budget must be a positive number of bytes, got {budget}")
    return budget


def slot(r, v, gamma, keep, strict: bool = True, need_weights: bool = False, budget=None):
    """Block 4 -> (out [B, K, H, L, Dh], weights [B, K, H, L, S] or None): r [B, K, H, 1, S] slot
    scores, v [B, 1, H, S, Dh], gamma [H] raw decay parameters, keep [B|1, S] bool (keys not
    hidden). `budget`: bytes per chunk scratch tensor (default by device)."""
    keep = keep.to(torch.bool)
    args = (None, None, None, keep, None, 1.0, strict, _budget(r, budget), need_weights)
    return _SlotChunked.apply(r, v, gamma, *args)


def slot_project(
    r,
    v,
    gamma,
    weight,
    bias,
    base,
    keep,
    drop_keep=None,
    scale: float = 1.0,
    strict=True,
    need_weights: bool = False,
    budget=None,
):
    """Block 4 with its output projection, dropout and residual: (y [B, L, K, D], weights or
    None), y = base + dropout(merge_heads(slot(...)) @ weight^T + bias), base [K, D] (the slot
    queries), drop_keep [B, L, K, D] bool (None: no dropout) scaled by `scale`."""
    keep = keep.to(torch.bool)
    args = (keep, drop_keep, scale, strict, _budget(r, budget), need_weights)
    return _SlotChunked.apply(r, v, gamma, weight, bias, base, *args)
