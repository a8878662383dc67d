"""Marginal maximum-likelihood (MML) calibration of GPCM items: each item's discrimination and
step thresholds, with every student's ability integrated out.

# S students, N items, K response categories, Q quadrature nodes
Model: the formula of `kt_lib.heads.gpcm.gpcm_logits` (Muraki 1992). Student s answers item i in
category k with
    P(Y_si = k | theta_s) = softmax_k(Z_k),  Z_0 = 0,  Z_k = sum_{h<k} alpha_i (theta_s - beta_ih),
alpha_i = exp(a_i) > 0 and K-1 free step thresholds beta_i: the plain GPCM, as girth and other IRT
packages estimate it (the training head's ordering of the thresholds is not imposed here). The
abilities theta_s ~ N(0, 1) fix the latent scale, so the estimates are comparable with those of any
estimator that fixes the same one.

Marginal log-likelihood over the observed cells only (-1 marks a missing response, which carries
no information: missing at random given theta):
    log L = sum_s log sum_q w_q prod_{i observed for s} P(Y_si = y_si | theta = x_q),
with Q Gauss-Legendre nodes x_q on [-bound, bound] and w_q = legendre weight * N(x_q; 0, 1),
normalised to sum 1. The defaults (41 nodes on [-4.5, 4.5]) are girth 0.8.0's grid.

Computation: log P at every (item, category, node), [N*K, Q] (small), then the per-student sums
as one sparse product  A [S, N*K] @ log P [N*K, Q] -> [S, Q], where A holds a 1 at
(s, i*K + y_si) for each observed response: memory O(S Q), never [S, N, Q, K]. Full-batch L-BFGS
(strong Wolfe line search, float64) minimises -log L / S until every gradient component is below
`tol` (converged) or `max_iter` iterations have run (not converged). Start: alpha = 1 and the
adjacent-category log odds at theta = 0, beta_ih = log(n_ih / n_i,h+1).
EAP ability: the posterior mean over the nodes, sum_q x_q P(x_q | y_s); a student without any
response on the calibrated items gets the prior's (about 0).

Identification: an item needs `min_responses` observed responses, and every category observed at
least once (without it a threshold runs off to +-infinity). `drop_unidentified=False` (default)
raises an error naming each such item and what it lacks; True leaves them out and lists them, with
the reason, in `GPCMCalibration.dropped`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..heads.gpcm import gpcm_logits

MISSING = -1  # the response code of an item the student did not take


@dataclass
class GPCMCalibration:
    """Item parameters, abilities and optimiser state of an MML GPCM fit."""

    alpha: torch.Tensor  # [N'] discrimination of each calibrated item
    thresholds: torch.Tensor  # [N', K-1] step thresholds beta_ih
    items: torch.Tensor  # [N'] column in the input matrix of each calibrated item
    dropped: dict[int, str]  # column -> why it was left out (drop_unidentified=True)
    ability: torch.Tensor  # [S] EAP ability of each student
    log_likelihood: float  # marginal log-likelihood at the estimate (calibrated items)
    iterations: int  # L-BFGS iterations run
    converged: bool  # every gradient component of -log L / S below tol


def check_responses(responses: np.ndarray | torch.Tensor, K: int) -> torch.Tensor:
    """The [S, N] response matrix as int64, or an error naming the offending value."""
    if isinstance(K, bool) or not isinstance(K, int) or K < 2:
        raise ValueError(f"K must be an integer >= 2 (response categories), got {K!r}")
    y = torch.as_tensor(responses)
    if y.dim() != 2:
        raise ValueError(
            f"responses must be a 2-D [students, items] matrix, got {y.dim()} dimension(s), "
            f"shape {tuple(y.shape)}"
        )
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise TypeError(
            f"responses must be integers (0..K-1, {MISSING} missing), got dtype {y.dtype}"
        )
    if y.numel() == 0:
        raise ValueError(f"responses is empty: shape {tuple(y.shape)}")
    y = y.to(torch.int64)
    bad = (y < MISSING) | (y >= K)
    if bad.any():
        s, i = (int(v) for v in bad.nonzero()[0])
        raise ValueError(
            f"responses[{s}, {i}] = {int(y[s, i])}: categories are 0..{K - 1} (K={K}) and "
            f"{MISSING} marks a missing response"
        )
    return y


def category_counts(y: torch.Tensor, K: int) -> torch.Tensor:
    """Observed responses per item and category: y [S, N] -> counts [N, K]."""
    s, i = (y != MISSING).nonzero(as_tuple=True)
    counts = torch.zeros(y.shape[1] * K, dtype=torch.int64)
    counts.index_add_(0, i * K + y[s, i], torch.ones_like(i))
    return counts.view(-1, K)


def unidentified_items(counts: torch.Tensor, min_responses: int) -> dict[int, str]:
    """Items (columns) whose thresholds the data cannot identify, with the reason."""
    reasons = {}
    for i, row in enumerate(counts.tolist()):
        if sum(row) < min_responses:
            reasons[i] = f"{sum(row)} responses < min_responses={min_responses}"
        elif 0 in row:
            missing = [k for k, n in enumerate(row) if n == 0]
            reasons[i] = f"category {missing} never observed (counts {row})"
    return reasons


def quadrature(n_nodes: int = 41, bound: float = 4.5) -> tuple[torch.Tensor, torch.Tensor]:
    """Gauss-Legendre nodes x [Q] on [-bound, bound] and log weights [Q] of N(0, 1) (sum 1)."""
    x, w = np.polynomial.legendre.leggauss(n_nodes)
    x = bound * x
    w = w * np.exp(-0.5 * x**2)  # the density's constant cancels in the normalisation
    return torch.from_numpy(x), torch.from_numpy(np.log(w / w.sum()))


def _design(y: torch.Tensor, K: int) -> torch.Tensor:
    """Sparse A [S, N*K] with a 1 at (s, i*K + y_si) for every observed response."""
    s, i = (y != MISSING).nonzero(as_tuple=True)
    index = torch.stack([s, i * K + y[s, i]])  # [2, n]
    ones = torch.ones(s.shape[0], dtype=torch.float64)
    shape = (y.shape[0], y.shape[1] * K)
    return torch.sparse_coo_tensor(index, ones, shape, check_invariants=True).coalesce()


def _node_loglik(
    design: torch.Tensor, alpha: torch.Tensor, thresholds: torch.Tensor, nodes: torch.Tensor
) -> torch.Tensor:
    """log P(y_s | theta = x_q), summed over each student's observed items: [S, Q]."""
    N, K = thresholds.shape[0], thresholds.shape[1] + 1
    logits = gpcm_logits(nodes.view(1, -1), alpha.view(-1, 1), thresholds.unsqueeze(1))  # [N, Q, K]
    logp = logits.log_softmax(-1).transpose(1, 2).reshape(N * K, -1)  # [N*K, Q], row i*K + k
    return torch.sparse.mm(design, logp)


def marginal_log_likelihood(
    responses: np.ndarray | torch.Tensor,
    alpha: np.ndarray | torch.Tensor,
    thresholds: np.ndarray | torch.Tensor,
    n_nodes: int = 41,
    bound: float = 4.5,
) -> float:
    """log L of item parameters alpha [N], thresholds [N, K-1] on responses [S, N]: the objective
    `fit_gpcm_mml` maximises, to compare any estimator's items on the same footing."""
    thresholds = torch.as_tensor(thresholds, dtype=torch.float64)
    alpha = torch.as_tensor(alpha, dtype=torch.float64)
    K = thresholds.shape[-1] + 1
    y = check_responses(responses, K)
    if alpha.shape != (y.shape[1],) or thresholds.shape[0] != y.shape[1]:
        raise ValueError(
            f"{y.shape[1]} items in responses, but alpha {tuple(alpha.shape)} and thresholds "
            f"{tuple(thresholds.shape)}"
        )
    nodes, log_w = quadrature(n_nodes, bound)
    with torch.no_grad():
        ll = _node_loglik(_design(y, K), alpha, thresholds, nodes)
    return float(torch.logsumexp(ll + log_w, dim=1).sum())


def fit_gpcm_mml(
    responses: np.ndarray | torch.Tensor,
    K: int,
    min_responses: int = 20,
    drop_unidentified: bool = False,
    n_nodes: int = 41,
    bound: float = 4.5,
    tol: float = 1e-6,
    max_iter: int = 500,
) -> GPCMCalibration:
    """Calibrate the GPCM items of responses [S, N] (0..K-1, -1 missing) by MML (module doc)."""
    y = check_responses(responses, K)
    if isinstance(min_responses, bool) or not isinstance(min_responses, int) or min_responses < 1:
        raise ValueError(f"min_responses must be an integer >= 1, got {min_responses!r}")
    counts = category_counts(y, K)
    dropped = unidentified_items(counts, min_responses)
    if dropped and not drop_unidentified:
        listed = "; ".join(f"item {i}: {why}" for i, why in dropped.items())
        raise ValueError(
            f"{len(dropped)} item(s) have unidentified thresholds ({listed}); leave them out of "
            "the matrix, or pass drop_unidentified=True to drop and report them"
        )
    items = torch.tensor([i for i in range(y.shape[1]) if i not in dropped], dtype=torch.int64)
    if len(items) == 0:
        raise ValueError(f"no item left to calibrate: all {y.shape[1]} were unidentified")
    y, counts = y[:, items], counts[items].to(torch.float64)
    design = _design(y, K)
    nodes, log_w = quadrature(n_nodes, bound)
    S = y.shape[0]

    log_alpha = torch.zeros(len(items), dtype=torch.float64, requires_grad=True)
    beta = (counts[:, :-1] / counts[:, 1:]).log().requires_grad_(True)  # [N', K-1]
    opt = torch.optim.LBFGS(
        [log_alpha, beta],
        lr=1.0,
        max_iter=max_iter,
        max_eval=2 * max_iter,
        tolerance_grad=tol,
        tolerance_change=0.0,  # stop on the gradient (or max_iter) only
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        ll = _node_loglik(design, log_alpha.exp(), beta, nodes)  # [S, Q]
        loss = -torch.logsumexp(ll + log_w, dim=1).sum() / S
        loss.backward()
        return loss

    opt.step(closure)
    loss = closure()
    converged = max(log_alpha.grad.abs().max(), beta.grad.abs().max()).item() <= tol
    with torch.no_grad():
        alpha = log_alpha.exp()
        posterior = (_node_loglik(design, alpha, beta, nodes) + log_w).softmax(1)  # [S, Q]
    return GPCMCalibration(
        alpha=alpha.detach(),
        thresholds=beta.detach(),
        items=items,
        dropped=dropped,
        ability=posterior @ nodes,
        log_likelihood=-loss.item() * S,
        iterations=int(opt.state[log_alpha]["n_iter"]),
        converged=converged,
    )
