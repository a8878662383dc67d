"""The attention math of kt_lib, written plainly: the `reference` backend.

# B batch, H heads, L query steps, S key steps, Dh head dim, K knowledge slots
Every faster backend (kt_lib.nn.cpu, kt_lib.nn.cuda) is tested against these functions, outputs
and gradients, with the same dropout draws (`keep`: 1 keep, 0 drop, scaled by 1 / (1 - p)).
Masks are boolean, True = the query may read that key; a row with no readable key outputs zeros.
Masked keys get the dtype's most negative finite score, so no reduction ever sees inf or NaN.

Plain attention:      w_ij = softmax_j(q_i . k_j / sqrt(Dh) + b_ij),  out_i = sum_j w_ij v_j
(b an optional fixed additive bias, e.g. ALiBi's -m_h |i - j|; none: b = 0)
AKT's monotonic attention (Ghosh et al. 2020), with s_ij = q_i . k_j / sqrt(Dh) and a_ij its
masked softmax:
    dist_ij  = sqrt(|i - j| * sum_{j' > j} a_ij')        (no gradient, as in AKT)
    decay_ij = clamp(exp(-softplus(gamma_h) * dist_ij), 1e-5, 1e5)
    w_ij     = masked softmax_j(s_ij * decay_ij)
`sum_{j' > j} a_ij'` is the attention mass between key j and the query: a key followed by many
related (highly attended) steps counts as far away, one followed by unrelated steps stays close.
DTransformer's slot attention (Block 4) is the same with one query per knowledge slot (the same
at every step t, reading keys j < t), then "max-out": each row is divided by
max(largest weight, 0.2), so its largest weight becomes 1 (at most x5).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

DECAY_MIN, DECAY_MAX = 1e-5, 1e5  # AKT's clamp of exp(-gamma * dist)
MAXOUT_FLOOR = 0.2  # DTransformer's max-out divides by max(largest weight, 0.2)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax over the last dim restricted to `mask`; rows with no readable key are all zero."""
    if mask is None:
        return scores.softmax(-1)
    w = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
    return w * mask.any(-1, keepdim=True)


def safe_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """`mask` where rows with no readable key read every key instead (their output is zeroed
    afterwards): fused kernels then never take a softmax over an empty row."""
    return None if mask is None else mask | ~mask.any(-1, keepdim=True)


def dropped(w: torch.Tensor, p: float, keep: torch.Tensor | None) -> torch.Tensor:
    """Dropout on attention weights: the given keep draws, else fresh ones (F.dropout)."""
    if keep is not None:
        return w * keep / (1 - p)
    return F.dropout(w, p) if p > 0 else w


def attention(q, k, v, mask=None, dropout: float = 0.0, keep=None, bias=None):
    """Scaled dot-product attention -> (out [B, H, L, Dh], weights [B, H, L, S] before dropout);
    `bias` (broadcastable to [B, H, L, S], no gradient expected) is added to the scores."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if bias is not None:
        scores = scores + bias
    w = masked_softmax(scores, mask)
    return dropped(w, dropout, keep) @ v, w


def decay_rate(gamma: torch.Tensor) -> torch.Tensor:
    """Positive per-head decay rate theta_h = softplus(gamma_h)."""
    return F.softplus(gamma)


def decay_factor(dist: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """exp(-softplus(gamma) * dist) clamped to [1e-5, 1e5]; gamma [H] broadcasts on dim -3."""
    theta = decay_rate(gamma).view(-1, 1, 1)
    return torch.exp(dist * -theta).clamp(DECAY_MIN, DECAY_MAX)


def context_distance(scores: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dist, undecayed weights a) from raw scores [..., L, S] and a bool mask, no gradient."""
    with torch.no_grad():
        L, S = scores.shape[-2:]
        a = masked_softmax(scores, mask)
        after = a.sum(-1, keepdim=True) - a.cumsum(-1)  # attention mass after key j
        i = torch.arange(L, device=scores.device).unsqueeze(1)
        j = torch.arange(S, device=scores.device).unsqueeze(0)
        dist = (after * (i - j).abs()).clamp(min=0.0).sqrt()
    return dist, a


def monotonic(q, k, v, gamma, mask, dropout: float = 0.0, keep=None):
    """AKT attention -> (out [B, H, L, Dh], decayed weights, undecayed weights) [B, H, L, S]."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    dist, undecayed = context_distance(scores, mask)
    w = masked_softmax(scores * decay_factor(dist, gamma), mask)
    return dropped(w, dropout, keep) @ v, w, undecayed


def slot(r, v, gamma, mask):
    """DTransformer's Block 4 -> (out [B, K, H, L, Dh], weights [B, K, H, L, S]).

    r [B, K, H, 1, S]: each slot's score against every key (the same for every query step);
    v [B, 1, H, S, Dh]; mask broadcastable to [B, K, H, L, S] (keys j < t that are not hidden).
    """
    S = r.shape[-1]
    scores = r.expand(*r.shape[:-2], S, S)  # query step t = 0..S-1
    dist, _ = context_distance(scores, mask)
    w = masked_softmax(scores * decay_factor(dist, gamma), mask)
    w = w / w.amax(-1, keepdim=True).clamp(min=MAXOUT_FLOOR)  # max-out
    return w @ v, w


# ---- k-sparse attention (sparseKT, Huang et al. 2023) ------------------------------------------
# With a_ij the masked softmax of the scores over the keys query i may read:
#   top-k:  keep the k readable keys of largest a_ij (every readable key when there are <= k);
#   soft:   sort the readable keys by a_ij, largest first; keep the shortest prefix whose sum
#           reaches `ratio` (the keys before the one that crosses it, and that one);
#   w_ij  = a_ij / sum_{kept j'} a_ij' on kept keys, 0 elsewhere (= softmax of s_ij over kept);
#   or, reweight "softmax" (pyKT's sparsekt.py): w_ij = exp(a_ij) / sum_{kept j'} exp(a_ij'), a
#   second softmax over the kept *probabilities* (nearly uniform, as a_ij <= 1), in the rows where
#   the selection drops a key (top-k: rows with more than k readable keys; soft: every row).
# Ties: a stable sort, so of equal weights the earlier key ranks first. Unreadable keys rank
# after every readable one and add 0 to the sums: the selection reads readable keys only. The
# selection is a mask (no gradient); gradients flow through the kept weights.


def sparse_rank(a: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Rank [..., L, S] of each key in its row by weight, largest first (0 = largest); readable
    keys rank before unreadable ones, equal weights by key index."""
    with torch.no_grad():
        keyed = a.masked_fill(~mask, -1.0)  # weights are >= 0: unreadable keys sort last
        order = keyed.sort(dim=-1, descending=True, stable=True).indices
        pos = torch.arange(a.shape[-1], device=a.device).expand_as(order)
        return torch.empty_like(order).scatter_(-1, order, pos)


def topk_keep(a: torch.Tensor, mask: torch.Tensor, k: int) -> torch.Tensor:
    """Bool [..., L, S]: the k readable keys of largest weight in each row, i.e.
    `mask & (sparse_rank(a, mask) < k)` without the sort: with a_k the k-th largest readable
    weight, the keys above a_k, then of the keys equal to a_k the earliest ones up to k."""
    with torch.no_grad():
        keyed = a.masked_fill(~mask, -1.0)  # weights are >= 0: unreadable keys come last
        kk = min(k, a.shape[-1])
        kth = keyed.topk(kk, dim=-1).values[..., -1:]  # -1 in rows with fewer than k readable
        above = keyed > kth
        tied = keyed == kth
        room = kk - above.sum(-1, keepdim=True)  # how many of the tied keys fit
        count = torch.uint8 if a.shape[-1] < 256 else torch.int32  # a narrow running count
        return mask & (above | (tied & (tied.cumsum(-1, dtype=count) <= room)))


def threshold_keep(a: torch.Tensor, mask: torch.Tensor, ratio: float) -> torch.Tensor:
    """Bool [..., L, S]: the shortest prefix of the readable keys, by weight, whose sum >= ratio."""
    with torch.no_grad():
        rank = sparse_rank(a, mask)
        ranked = torch.zeros_like(a).scatter_(-1, rank, a.masked_fill(~mask, 0.0))  # sorted a
        before = ranked.cumsum(-1) - ranked  # weight ranked ahead of each position
        return mask & (before < ratio).gather(-1, rank)


def sparse_attention(
    q,
    k,
    v,
    mask,
    selection: str,
    k_top: int,
    ratio: float,
    dropout: float = 0.0,
    keep=None,
    reweight: str = "renormalise",
):
    """k-sparse attention -> (out [B, H, L, Dh], weights [B, H, L, S] before dropout).

    `selection` is "topk" (keep `k_top` keys) or "soft" (keep weight `ratio`); `mask` bool,
    broadcastable to [B, H, L, S] (None: every key); `reweight` "renormalise" or "softmax"
    (pyKT's second softmax over the kept probabilities)."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    mask = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask.expand_as(scores)
    a = masked_softmax(scores, mask)
    if selection == "topk":
        kept = topk_keep(a, mask, k_top)
    elif selection == "soft":
        kept = threshold_keep(a, mask, ratio)
    else:
        raise ValueError(f"selection must be 'topk' or 'soft', got {selection!r}")
    w = masked_softmax(scores, kept)
    if reweight == "softmax":
        second = masked_softmax(a, kept)
        w = (
            torch.where(mask.sum(-1, keepdim=True) > k_top, second, w)
            if selection == "topk"
            else second
        )
    elif reweight != "renormalise":
        raise ValueError(f"reweight must be 'renormalise' or 'softmax', got {reweight!r}")
    return dropped(w, dropout, keep) @ v, w


# ---- forgetting-aware linear bias (FoLiBiKT, Im et al. 2023) -----------------------------------
# AKT's monotonic attention on scores with ALiBi's linear bias (Press et al. 2022) added first:
#   s_ij = q_i . k_j / sqrt(Dh) - m_h * |i - j|
#   m_h  = 2^(-8 (h + 1) / H) for H a power of two (0.5, 0.25, ... for 8 heads); otherwise the
#          slopes of the power of two below H, then every other slope of twice that power
# then dist_ij, decay_ij and w_ij as in `monotonic`, all on the biased s_ij. The bias reads only
# the step distance, so what query i may read is the mask's business alone.
# extraKT (Li et al., ECAI 2024) keeps the bias and drops the decay: w_ij = masked softmax_j(s_ij)
# (`alibi_attention`, plain attention with the bias added to its scores).


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes m_h [H] (a geometric sequence; the FoLiBi bias is -m_h |i - j|)."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    p = 1 << (n_heads.bit_length() - 1)  # the largest power of two <= H
    slopes = power_of_two(p)
    if p < n_heads:
        slopes += power_of_two(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes)


def linear_bias(slopes: torch.Tensor, L: int, S: int) -> torch.Tensor:
    """-m_h |i - j| [H, L, S] for query steps i < L and key steps j < S."""
    i = torch.arange(L, device=slopes.device).unsqueeze(1)
    j = torch.arange(S, device=slopes.device).unsqueeze(0)
    return -slopes.view(-1, 1, 1) * (i - j).abs().to(slopes.dtype)


def alibi_attention(q, k, v, slopes, mask, dropout: float = 0.0, keep=None):
    """Plain attention on linearly biased scores (extraKT, Li et al. 2024: FoLiBi without AKT's
    decay) -> (out [B, H, L, Dh], weights [B, H, L, S] before dropout):
        s_ij = q_i . k_j / sqrt(Dh) - m_h |i - j|,   w_ij = masked softmax_j(s_ij)"""
    bias = linear_bias(slopes.to(q.dtype), q.shape[-2], k.shape[-2])
    return attention(q, k, v, mask, dropout, keep, bias=bias)


def folibi(q, k, v, gamma, slopes, mask, dropout: float = 0.0, keep=None):
    """FoLiBi attention -> (out [B, H, L, Dh], decayed weights, undecayed weights) [B, H, L, S];
    the undecayed weights are the masked softmax of the biased scores."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    scores = scores + linear_bias(slopes.to(scores.dtype), *scores.shape[-2:])
    dist, undecayed = context_distance(scores, mask)
    w = masked_softmax(scores * decay_factor(dist, gamma), mask)
    return dropped(w, dropout, keep) @ v, w, undecayed


# ---- StableKT (Li et al. AAAI 2024): linear biases and penumbral (hyperbolic) scores ---------
# The heads split in two halves, both with ALiBi's linear bias -m_h |i - j| (Press et al. 2022):
#   heads h < H/2:  s_ij = q_i . k_j / sqrt(Dh) - m_h |i - j|
#   heads h >= H/2: s_ij = P(q_i, k_j) / sqrt(Dh) - m_h |i - j|, with the penumbral score P:
#     psi(x)  = (u, z) = (r sigmoid(x_Dh) x_{1..Dh-1}, r sigmoid(x_Dh))   point u, height z < r
#     rho     = sqrt(r^2 - z^2 + eps),  delta = |u_q - u_k|
#     in cone = delta <= rho_q  or  (delta - rho_q)^2 + z_k^2 <= r^2
#     lca     = max(z_q^2, z_k^2, r^2 - ((rho_q + rho_k - delta) / 2)^2)   in cone
#               ((delta^2 + z_k^2 - z_q^2) / (2 delta + eps))^2 + z_q^2       otherwise
#     P       = -gamma * lca
#   w_ij = masked softmax_j(s_ij), out_i = sum_j w_ij v_j.
# The bias and P read the step distance and the two vectors only: what query i may read is the
# mask's business alone. delta comes from |u_q|^2 + |u_k|^2 - 2 u_q . u_k (as torch.cdist on long
# inputs), clamped before the square root so that equal vectors give no NaN gradient.
PENUMBRAL_EPS = 1e-6  # the authors' eps in rho and in the out-of-cone denominator
PENUMBRAL_SQ_MIN = 1e-30  # delta^2 is clamped to this before its square root


def penumbral_coords(x: torch.Tensor, radius: float) -> tuple[torch.Tensor, torch.Tensor]:
    """psi(x) = (u [..., Dh-1], z [..., 1]): z = r sigmoid(x_Dh), u = z x_{1..Dh-1}."""
    z = torch.sigmoid(x[..., -1:]) * radius
    return x[..., :-1] * z, z


def penumbral_points(q: torch.Tensor, k: torch.Tensor, radius: float):
    """(delta [..., L, S], z_q [..., L, 1], z_k [..., 1, S]): psi of each vector, and the
    distances |u_q - u_k| between the points."""
    (uq, zq), (uk, zk) = penumbral_coords(q, radius), penumbral_coords(k, radius)
    sq = uq.square().sum(-1, keepdim=True) + uk.square().sum(-1).unsqueeze(-2) - 2 * uq @ uk.mT
    return sq.clamp(min=PENUMBRAL_SQ_MIN).sqrt(), zq, zk.mT


def penumbral_scores(q: torch.Tensor, k: torch.Tensor, radius: float, gamma: float) -> torch.Tensor:
    """P(q_i, k_j) [..., L, S] for q [..., L, Dh], k [..., S, Dh] (before the 1 / sqrt(Dh))."""
    eps = PENUMBRAL_EPS
    delta, zq, zk = penumbral_points(q, k, radius)  # zk [..., 1, S] beside zq [..., L, 1]
    rho_q = (radius**2 - zq.square() + eps).sqrt()
    rho_k = (radius**2 - zk.square() + eps).sqrt()
    inside = torch.maximum(
        torch.maximum(zq.square(), zk.square()), radius**2 - ((rho_q + rho_k - delta) / 2) ** 2
    )
    outside = ((delta.square() + zk.square() - zq.square()) / (2 * delta + eps)) ** 2 + zq.square()
    cone = (delta <= rho_q) | ((delta - rho_q).square() + zk.square() <= radius**2)
    return -gamma * torch.where(cone, inside, outside)


def stable_attention(
    q,
    k,
    v,
    slopes,
    radius: float,
    gamma: float,
    mask,
    dropout: float = 0.0,
    keep=None,
    penumbral=penumbral_scores,
):
    """StableKT attention -> (out [B, H, L, Dh], weights [B, H, L, S] before dropout); the
    first H // 2 heads score by dot product, the others by `penumbral` (this module's
    `penumbral_scores`, or `kt_lib.nn.penumbral`'s, the same with a hand-written backward)."""
    half = q.shape[-3] // 2
    dot = q[..., :half, :, :] @ k[..., :half, :, :].mT
    pen = penumbral(q[..., half:, :, :], k[..., half:, :, :], radius, gamma)
    scores = torch.cat([dot, pen], dim=-3) / q.shape[-1] ** 0.5  # [B, H, L, S]
    scores = scores + linear_bias(slopes.to(scores.dtype), *scores.shape[-2:])
    w = masked_softmax(scores, mask)
    return dropped(w, dropout, keep) @ v, w
