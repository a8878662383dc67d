"""stableKT's penumbral score with a hand-written backward: `reference.penumbral_scores`' math
(read it there) as one autograd node for the lca height, so that autograd keeps two [..., L, S]
tensors (delta and the cone mask) instead of a dozen, and the backward of the `maximum`/`where`
chain is a few fused passes instead of one node per operation. Equal to the reference, values
and gradients (ties of `maximum` split half and half, as torch's), in tests/test_stablekt.py.

`penumbral_attention` is the `cpu` backend's kernel for stableKT's penumbral heads: the score,
ALiBi's bias, the masked softmax, dropout and the product with v in one autograd node, computed
per query block and batch chunk as `kt_lib.nn.cpu`'s attention kernel is (the causal triangle
skipped, each chunk's chain in cache); it keeps the weights and the dropped weights and
recomputes the distances and the cone in backward.
"""

from __future__ import annotations

import torch

from .cpu import POOL, _bh, _chunks, _masked_bias, _query_blocks, _rows, draw_keep, without_autocast
from .reference import PENUMBRAL_EPS, PENUMBRAL_SQ_MIN, penumbral_coords, penumbral_points


def _branches(delta, zq2, zk2, r2: float):
    """(gap, inner) of the in-cone height: gap = rho_q + rho_k - delta, inner = r^2 - gap^2 / 4;
    and (rho_q, rho_k)."""
    eps = PENUMBRAL_EPS
    rho_q, rho_k = (r2 - zq2 + eps).sqrt(), (r2 - zk2 + eps).sqrt()
    gap = (rho_q - delta).add_(rho_k)
    inner = torch.addcmul(gap.new_tensor(r2), gap, gap, value=-0.25)
    return gap, inner, rho_q, rho_k


def _outside_ratio(delta, zq2, zk2):
    """(ratio, den): the out-of-cone height is ratio^2 + z_q^2, ratio = num / den with
    num = delta^2 + z_k^2 - z_q^2 and den = 2 delta + eps."""
    den = delta * 2 + PENUMBRAL_EPS
    return torch.addcmul(zk2 - zq2, delta, delta).div_(den), den


def _half_ties(a, b):
    """torch.maximum(a, b)'s share of the gradient for a: 1 where a > b, 1/2 on ties, else 0."""
    return (a > b).to(a.dtype).add_((a == b).to(a.dtype), alpha=0.5)


def _lca(delta, zq, zk, radius: float):
    """(lca [..., L, S], cone [..., L, S] bool) from delta [..., L, S], z_q [..., L, 1] and
    z_k [..., 1, S]."""
    r2 = radius**2
    zq2, zk2 = zq.square(), zk.square()
    gap, inner, rho_q, _ = _branches(delta, zq2, zk2, r2)
    inside = torch.maximum(inner, torch.maximum(zq2, zk2))
    ratio, _ = _outside_ratio(delta, zq2, zk2)
    off = delta - rho_q
    cone = (delta <= rho_q).logical_or_(torch.addcmul(zk2, off, off) <= r2)
    return torch.where(cone, inside, torch.addcmul(zq2, ratio, ratio)), cone


def _lca_grads(G, delta, zq, zk, cone, radius: float):
    """Gradients of sum(G * lca) for delta [..., L, S], z_q [..., L, 1] and z_k [..., 1, S]."""
    zq2, zk2 = zq.square(), zk.square()
    gap, inner, rho_q, rho_k = _branches(delta, zq2, zk2, radius**2)
    m0 = torch.maximum(zq2, zk2)
    # in the cone: inside = max(inner, max(z_q^2, z_k^2))
    g_in = torch.where(cone, G, 0.0)
    d_inner = g_in * _half_ties(inner, m0)
    d_m0 = g_in.sub_(d_inner)
    share_q = _half_ties(zq2, zk2)  # [..., L, S]
    d_zq2 = (d_m0 * share_q).sum(-1, keepdim=True)
    d_zk2 = (d_m0.mul_(share_q.neg_().add_(1))).sum(-2, keepdim=True)
    d_gap = d_inner.mul_(gap).mul_(-0.5)  # inner = r^2 - gap^2 / 4
    d_delta = d_gap.neg()  # gap = rho_q + rho_k - delta
    d_rho_q, d_rho_k = d_gap.sum(-1, keepdim=True), d_gap.sum(-2, keepdim=True)
    # out of it: ratio^2 + z_q^2
    g_out = torch.where(cone, 0.0, G)
    ratio, den = _outside_ratio(delta, zq2, zk2)
    d_num = (g_out * ratio).mul_(2).div_(den)  # d/d num; d num/d delta = 2 delta, d den = 2
    d_delta.add_(d_num * (delta - ratio), alpha=2)
    d_zk2 = d_zk2 + d_num.sum(-2, keepdim=True)
    d_zq2 = d_zq2 + (g_out - d_num).sum(-1, keepdim=True)
    d_zq2 = d_zq2 - d_rho_q / (2 * rho_q)  # rho = sqrt(r^2 - z^2 + eps)
    d_zk2 = d_zk2 - d_rho_k / (2 * rho_k)
    return d_delta, d_zq2 * 2 * zq, d_zk2 * 2 * zk


class _LCA(torch.autograd.Function):
    """lca [..., L, S] from delta [..., L, S], z_q [..., L, 1] and z_k [..., 1, S]."""

    @staticmethod
    def forward(ctx, delta, zq, zk, radius: float):
        lca, cone = _lca(delta, zq, zk, radius)
        ctx.radius = radius
        ctx.save_for_backward(delta, zq, zk, cone)
        return lca

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, G):
        delta, zq, zk, cone = ctx.saved_tensors
        return *_lca_grads(G, delta, zq, zk, cone, ctx.radius), None


def penumbral_scores(q: torch.Tensor, k: torch.Tensor, radius: float, gamma: float) -> torch.Tensor:
    """`reference.penumbral_scores`, the lca height through `_LCA`."""
    return _LCA.apply(*penumbral_points(q, k, radius), radius) * -gamma


def _distance(uq, nq, uk, nk, work):
    """(delta, live) for one chunk: delta = sqrt(max(|u_q|^2 + |u_k|^2 - 2 u_q . u_k, SQ_MIN))
    written into `work` [n, H, l, s], and where the clamp passes a gradient (as torch's clamp)."""
    torch.bmm(_bh(uq), _bh(uk).mT, out=_bh(work))
    sq = work.mul_(-2).add_(nq).add_(nk)
    live = sq >= PENUMBRAL_SQ_MIN
    return sq.clamp_min_(PENUMBRAL_SQ_MIN).sqrt_(), live


class _PenumbralAttention(torch.autograd.Function):
    """softmax_j(lca_ij * scale + bias_ij + extra_ij) -> dropout -> @ v, by query block and batch
    chunk (see kt_lib.nn.cpu._DropoutAttention, whose layout, pool and draws this follows).

    Inputs: u_q [B, H, L, E], u_k [B, H, S, E], z_q [B, H, L, 1], z_k [B, H, S, 1] (psi of the
    heads, from autograd ops outside), v [B, H, S, Dh]; `bias` the mask's additive bias
    [B|1, H|1, L, S] and `extra` the fixed score bias [H|1, L, S] (no gradients); `scale` the
    factor on lca (-gamma / sqrt(Dh)). Saved: the weights W and the dropped weights P per block;
    delta and the cone are recomputed per chunk in backward, whose gradient chain is
    d scores = P (g v^T) - W (g . out), d lca = scale d scores, then `_lca_grads` and
    delta^2 = |u_q|^2 + |u_k|^2 - 2 u_q . u_k back to u and z.
    """

    @staticmethod
    @without_autocast
    def forward(ctx, uq, uk, zq, zk, v, bias, extra, blocks, radius: float, scale: float, p: float):
        B, H, L, _ = uq.shape
        uq, uk, v = uq.contiguous(), uk.contiguous(), v.contiguous()
        nq, nk = uq.square().sum(-1, keepdim=True), uk.square().sum(-1).unsqueeze(-2)
        zkt = zk.mT  # [B, H, 1, S]
        out = v.new_zeros(B, H, L, v.shape[-1])
        saved: list[torch.Tensor] = []
        keep = 1.0
        for l0, l1, s1 in blocks:
            shape = (B, H, l1 - l0, s1)
            if s1 == 0:  # no query of the block reads a key: zero output
                saved += [uq.new_empty(0)] * 2
                continue
            W = POOL.take(shape, uq)
            P = POOL.take(shape, uq) if p > 0 else None  # the keep mask, then the dropped W
            if P is not None:
                keep = draw_keep(P, p)  # 0/1; the scale goes onto the output
            rows, chunks = _chunks(B, H * (l1 - l0) * s1)
            work = POOL.take((rows, *shape[1:]), uq)
            for b0, b1 in chunks:
                q_, k_ = (b0, b1, l0, l1), (b0, b1, 0, s1)
                delta, _ = _distance(*_at(uq, nq, q_), *_at(uk, nk, k_, keys=True), work[: b1 - b0])
                lca, _ = _lca(delta, zq[b0:b1, :, l0:l1], zkt[b0:b1, ..., :s1], radius)
                a = lca.mul_(scale).add_(_rows(bias, b0, b1)[..., l0:l1, :s1])
                a.add_(extra[..., l0:l1, :s1])
                w = torch.softmax(a, -1, out=W[b0:b1])
                if P is not None:
                    w = P[b0:b1].mul_(w)  # dropped weights (unscaled), kept for backward
                out[b0:b1, :, l0:l1] = w @ v[b0:b1, :, :s1]
            POOL.give(work)
            saved += [W, P if P is not None else W.new_empty(0)]
        out.mul_(keep)
        if any(ctx.needs_input_grad):
            ctx.save_for_backward(uq, uk, zq, zk, v, out, *saved)
            ctx.blocks, ctx.keep, ctx.radius, ctx.scale = blocks, keep, radius, scale
        else:
            POOL.give(*saved)
        return out

    @staticmethod
    @without_autocast
    def backward(ctx, g):
        if getattr(ctx, "done", False):  # its buffers went back to the pool after the first
            raise RuntimeError("penumbral attention supports one backward per forward")
        ctx.done = True
        uq, uk, zq, zk, v, out, *saved = ctx.saved_tensors
        nq, nk = uq.square().sum(-1, keepdim=True), uk.square().sum(-1).unsqueeze(-2)
        zkt = zk.mT
        g = g.contiguous()
        dot = (g * out).sum(-1, keepdim=True)  # sum_j dW_j W_j (see cpu._DropoutAttention)
        gs = g * ctx.keep
        g_uq, g_uk, g_v = torch.zeros_like(uq), torch.zeros_like(uk), torch.zeros_like(v)
        g_zq, g_zkt = torch.zeros_like(zq), torch.zeros_like(zkt)
        for i, (l0, l1, s1) in enumerate(ctx.blocks):
            if s1 == 0:
                continue
            W, P = saved[2 * i : 2 * i + 2]
            rows, chunks = _chunks(uq.shape[0], W[0].numel())
            work, t_buf = POOL.take((rows, *W.shape[1:]), W), POOL.take((rows, *W.shape[1:]), W)
            for b0, b1 in chunks:
                n, q_, k_ = b1 - b0, (b0, b1, l0, l1), (b0, b1, 0, s1)
                go, vc = gs[b0:b1, :, l0:l1], v[b0:b1, :, :s1]
                pw = P[b0:b1] if P.numel() else W[b0:b1]  # dropped weights (W: no dropout)
                g_v[b0:b1, :, :s1] += pw.mT @ go
                t = t_buf[:n]
                torch.bmm(_bh(go), _bh(vc).mT, out=_bh(t))  # d loss / d dropped weights
                t.mul_(pw).addcmul_(W[b0:b1], dot[b0:b1, :, l0:l1], value=-1.0).mul_(ctx.scale)
                uqc, nqc = _at(uq, nq, q_)
                ukc, nkc = _at(uk, nk, k_, keys=True)
                delta, live = _distance(uqc, nqc, ukc, nkc, work[:n])
                zqc, zkc = zq[b0:b1, :, l0:l1], zkt[b0:b1, ..., :s1]
                _, cone = _lca(delta, zqc, zkc, ctx.radius)
                d_delta, d_zq, d_zk = _lca_grads(t, delta, zqc, zkc, cone, ctx.radius)
                # delta = sqrt(clamp(sq)): d sq = d delta / (2 delta) where the clamp passes
                d_sq = d_delta.div_(delta).mul_(0.5).masked_fill_(~live, 0.0)
                g_uq[b0:b1, :, l0:l1] += uqc * d_sq.sum(-1, keepdim=True).mul_(2) - 2 * (d_sq @ ukc)
                g_uk[b0:b1, :, :s1] += ukc * d_sq.sum(-2).unsqueeze(-1).mul_(2) - 2 * (
                    d_sq.mT @ uqc
                )
                g_zq[b0:b1, :, l0:l1] += d_zq
                g_zkt[b0:b1, ..., :s1] += d_zk
            POOL.give(work, t_buf)
        POOL.give(*saved)
        return g_uq, g_uk, g_zq, g_zkt.mT, g_v, None, None, None, None, None, None


def _at(u, n, where, keys: bool = False):
    """(u, |u|^2) of batch rows b0:b1 and steps l0:l1; |u|^2 as [.., 1, S] for keys."""
    b0, b1, l0, l1 = where
    return u[b0:b1, :, l0:l1], (n[b0:b1, ..., l0:l1] if keys else n[b0:b1, :, l0:l1])


def penumbral_attention(q, k, v, radius: float, gamma: float, mask, dropout: float, extra):
    """The penumbral heads of `reference.stable_attention` on the `cpu` backend -> out [B, H, L,
    Dh]: softmax_j(P(q_i, k_j) / sqrt(Dh) + extra_ij) over the keys `mask` lets query i read,
    dropout on the weights, times v; rows without a readable key output zeros. q [B, H, L, Dh],
    k/v [B, H, S, Dh], mask bool broadcastable to [B, H, L, S], extra the fixed linear bias
    [H|1, L, S]. Weights are not returned (the reference gives them)."""
    L, S = q.shape[-2], k.shape[-2]
    if mask is None:
        mask = torch.ones(L, S, dtype=torch.bool, device=q.device)
    mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    (uq, zq), (uk, zk) = penumbral_coords(q, radius), penumbral_coords(k, radius)
    scale = -gamma / q.shape[-1] ** 0.5
    bias, blocks = _masked_bias(mask, q.dtype), _query_blocks(mask)
    extra = extra.to(q.dtype)
    out = _PenumbralAttention.apply(
        uq, uk, zq, zk, v, bias, extra, blocks, radius, scale, float(dropout)
    )
    return out * mask.any(-1, keepdim=True).to(out.dtype)
