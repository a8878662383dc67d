"""stableKT's penumbral score with a hand-written backward: `reference.penumbral_scores`' math
(read it there) as one autograd node for the lca height, so that autograd keeps two [..., L, S]
tensors (delta and the cone mask) instead of a dozen, and the backward of the `maximum`/`where`
chain is a few fused passes instead of one node per operation. Equal to the reference, values
and gradients (ties of `maximum` split half and half, as torch's), in tests/test_stablekt.py.

`penumbral_attention` is the `cpu` backend's kernel for stableKT's penumbral heads: the score
(`PenumbralScores`) plugged into `kt_lib.nn.cpu`'s blocked attention kernel, which adds the
linear bias and runs the masked softmax, dropout and the product with v per query block and
batch chunk (the causal triangle skipped, each chunk's chain in cache), keeping the weights and
the dropped weights; the score's backward recomputes the distances and the cone per chunk.
"""

from __future__ import annotations

import torch

from .cpu import fold_heads, scored_attention, write_grad
from .native import lca as native_lca
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
    torch.bmm(fold_heads(uq), fold_heads(uk).mT, out=fold_heads(work))
    sq = work.mul_(-2).add_(nq).add_(nk)
    live = sq >= PENUMBRAL_SQ_MIN
    return sq.clamp_min_(PENUMBRAL_SQ_MIN).sqrt_(), live


class PenumbralScores:
    """stableKT's penumbral score times `scale` (-gamma / sqrt(Dh)) as a plug-in of the blocked
    attention kernel (`kt_lib.nn.cpu.scored_attention`, whose interface `cpu.DotScores` states).
    Inputs: psi's points u_q [B, H, L, E], u_k [B, H, S, E] and heights z_q [B, H, L, 1],
    z_k [B, H, S, 1]. A chunk's distances come from one product; its backward recomputes them
    and the cone, runs `_lca_grads`, and takes delta^2 = |u_q|^2 + |u_k|^2 - 2 u_q . u_k back
    to u and z."""

    backward_work = True  # the distances, recomputed
    by_key = (1, 3)  # u_k, z_k

    def __init__(self, radius: float, scale: float):
        self.radius, self.scale = radius, scale

    def prepare(self, uq, uk, zq, zk):
        uq, uk = uq.contiguous(), uk.contiguous()
        nq, nk = uq.square().sum(-1, keepdim=True), uk.square().sum(-1).unsqueeze(-2)
        return uq, nq, uk, nk, zq, zk.mT  # z_k as [B, H, 1, S]

    def _chunk(self, saved, where, work):
        uq, nq, uk, nk, zq, zkt = saved
        b0, b1, l0, l1, s1 = where
        q_, k_ = (slice(b0, b1), slice(None), slice(l0, l1)), (slice(b0, b1), Ellipsis)
        delta, live = _distance(uq[q_], nq[q_], uk[b0:b1, :, :s1], nk[k_][..., :s1], work)
        return delta, live, zq[q_], zkt[k_][..., :s1]

    def scores(self, saved, where, work):
        delta, _, zq, zk = self._chunk(saved, where, work)
        if native_lca.forward(delta, zq, zk, self.radius, PENUMBRAL_EPS, self.scale):
            return delta  # scale * lca, written over delta (penumbral.c)
        return _lca(delta, zq, zk, self.radius)[0].mul_(self.scale)

    def backward(self, saved, grads, d, where, work, first):
        uq, _, uk, _, _, _ = saved
        g_uq, g_uk, g_zq, g_zk = grads
        b0, b1, l0, l1, s1 = where
        delta, live, zq, zk = self._chunk(saved, where, work)
        d = d.mul_(self.scale)
        native = native_lca.backward(d, delta, zq, zk, self.radius, PENUMBRAL_EPS)
        if native is not None:  # d becomes d/d delta (penumbral.c)
            d_delta, (d_zq, d_zk) = d, native
        else:
            _, cone = _lca(delta, zq, zk, self.radius)
            d_delta, d_zq, d_zk = _lca_grads(d, delta, zq, zk, cone, self.radius)
        # delta = sqrt(clamp(sq)): d sq = d delta / (2 delta) where the clamp passes
        d_sq = d_delta.div_(delta).mul_(0.5).masked_fill_(~live, 0.0)
        uqc, ukc = uq[b0:b1, :, l0:l1], uk[b0:b1, :, :s1]
        g_uq[b0:b1, :, l0:l1] = uqc * d_sq.sum(-1, keepdim=True).mul_(2) - 2 * (d_sq @ ukc)
        g_zq[b0:b1, :, l0:l1] = d_zq
        d_uk = ukc * d_sq.sum(-2).unsqueeze(-1).mul_(2) - 2 * (d_sq.mT @ uqc)
        write_grad(g_uk[b0:b1, :, :s1], d_uk, first)
        write_grad(g_zk[b0:b1, :, :s1], d_zk.mT, first)

    def finish(self, saved, grads):
        return grads


def penumbral_attention(q, k, v, radius: float, gamma: float, mask, dropout: float, extra):
    """The penumbral heads of `reference.stable_attention` on the `cpu` backend -> out [B, H, L,
    Dh]: softmax_j(P(q_i, k_j) / sqrt(Dh) + extra_ij) over the keys `mask` lets query i read,
    dropout on the weights, times v; rows without a readable key output zeros. q [B, H, L, Dh],
    k/v [B, H, S, Dh], mask bool broadcastable to [B, H, L, S], extra the fixed linear bias
    [H|1, L, S]. Weights are not returned (the reference gives them)."""
    (uq, zq), (uk, zk) = penumbral_coords(q, radius), penumbral_coords(k, radius)
    scorer = PenumbralScores(radius, -gamma / q.shape[-1] ** 0.5)
    return scored_attention(scorer, (uq, uk, zq, zk), v, mask, dropout, extra)
