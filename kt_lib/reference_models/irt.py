"""Rasch (1PL) IRT reference: skill difficulties, student abilities and causal per-step mastery.

# B batch, L steps (t target step, s earlier step), C skills, U training students
Fit (training students only): P(r = 1 | u, c) = sigmoid(theta_u - beta_c), a MAP fit with priors
theta ~ N(0, theta_prior_sd^2) (identifies the Rasch location) and beta ~ N(0, beta_prior_sd^2).
It is one convex L2-penalised logistic regression, so scikit-learn's `LogisticRegression` (lbfgs,
no intercept) solves it on sparse one-hot [student | skill] features: a well-kept solver, a few
seconds on ASSIST2009, the MAP to lbfgs's tolerance (`tol` bounds the gradient of sklearn's
objective divided by the number of responses, so a tighter `tol` still moves theta by up to
~2e-2 on the simulator). A training set whose responses are all alike (sklearn needs two
classes) is solved by scipy's L-BFGS on the same objective. The student columns hold
theta_prior_sd and the skill columns -beta_prior_sd, so each coefficient has a unit-variance
penalty while theta_u = theta_prior_sd * w_u and beta_c = beta_prior_sd * w_c get their priors;
with C = 1 sklearn's objective 0.5 ||w||^2 + sum(log-loss) is exactly the negative log
posterior.

Causal targets: at step t the ability is re-estimated from the responses before t only,
    theta_hat_<t = argmax_theta  sum_{s<t} log P(r_s | theta, beta_IRT[q_s])
                                 - theta^2 / (2 theta_prior_sd^2),
and M_ref[t] = sigmoid(theta_hat_<t - beta_IRT[q_t]). All prefixes of all rows are solved at once:
damped Newton steps on [B, L] abilities, each until its own step is below 1e-6 (at most
`newton_iter`; a stop shared by the batch would let other rows and later steps move it), the
evidence before t entering through cumulative sums (exclusive per-skill counts [B, L, C]) or a
strict-past [B, L, L] mask when C >= L; no loop over students or steps. The empty prefix at
t = 0 gives the prior mean theta = 0.
The published iKT3 targets used r_t (and, after a shift, r_{t+1}); these never read r_s for s >= t.

Windows (`Batch.start > 0`): the prefix is the window's own past, the same evidence the model sees
for that window, so the target is a function of the model's inputs. Ability from earlier windows
would be a target the model cannot reach from its input (and would differ between chunkings).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from sklearn.linear_model import LogisticRegression

from ..data.dataset import Batch, KTDataset
from .base import REFERENCES, ReferenceModel


def prefix_abilities(
    q: torch.Tensor,
    r: torch.Tensor,
    mask: torch.Tensor,
    beta: torch.Tensor,
    prior_sd: float = 1.0,
    n_iter: int = 50,
    max_step: float = 1.0,
    tol: float = 1e-6,
) -> torch.Tensor:
    """MAP ability from the strict past at every step: [B, L], row t reads steps < t only.

    q, r, mask [B, L]; beta [C] skill difficulties. Damped Newton (steps clipped to `max_step`) on
    the concave log posterior of every prefix at once, each until its own step is below `tol` (at
    most `n_iter` steps: a wide prior and an all-correct prefix need more than a few). The
    evidence before t enters through
    counts: when C < L, exclusive cumulative skill counts n[b, t, c] (sum over C skills),
    otherwise a strict-past [B, L, L] mask over the earlier steps; both are exact.
    """
    B, L = q.shape
    C = beta.shape[0]
    dtype = beta.dtype
    valid = mask.to(dtype)
    rf = r.to(dtype) * valid
    correct = rf.cumsum(1) - rf  # [B, L] correct responses before t
    if C < L:
        onehot = F.one_hot(q, C).to(dtype) * valid.unsqueeze(-1)  # [B, L, C]
        weight = onehot.cumsum(1) - onehot  # [B, L, C] earlier opportunities on each skill
        diff = beta.view(1, 1, C)  # [1, 1, C]
    else:
        past = torch.ones(L, L, dtype=torch.bool, device=q.device).tril(-1)  # [t, s]: s < t
        weight = past.to(dtype).unsqueeze(0) * valid.unsqueeze(1)  # [B, L, L] evidence s for t
        diff = beta[q].unsqueeze(1)  # [B, 1, L] difficulty of each earlier step
    prec = 1.0 / prior_sd**2
    theta = torch.zeros(B, L, dtype=dtype, device=q.device)
    active = torch.ones(B, L, dtype=torch.bool, device=q.device)
    for _ in range(n_iter):
        p = torch.sigmoid(theta.unsqueeze(-1) - diff)  # [B, L, C] or [B, L, L]
        wp = weight * p
        grad = correct - wp.sum(-1) - prec * theta
        hess = (wp * (1 - p)).sum(-1) + prec
        step = (grad / hess).clamp(-max_step, max_step)
        # an ability stops once its own step is below tol, so each prefix's iterations depend
        # on its own evidence only (a stop decided over the batch would let later steps move it)
        active = active & (step.abs() >= tol)
        if not active.any():
            break
        theta = theta + step * active
    return theta


def _map_one_class(X: sp.csr_matrix, r: np.ndarray) -> np.ndarray:
    """The MAP weights of `LogisticRegression`'s objective, 0.5 ||w||^2 + sum log-loss, when every
    response is alike (sklearn refuses one class): scipy's L-BFGS on the same convex objective."""
    from scipy.optimize import minimize

    y = np.where(r > 0, 1.0, -1.0)

    def objective(w):
        z = y * (X @ w)
        loss = np.logaddexp(0.0, -z).sum() + 0.5 * w @ w
        grad = X.T @ (-y * 0.5 * (1 - np.tanh(z / 2))) + w  # d log(1 + e^-z) = -sigmoid(-z)
        return loss, grad

    return minimize(objective, np.zeros(X.shape[1]), jac=True, method="L-BFGS-B").x


@REFERENCES.register("irt")
class IRTReference(ReferenceModel):
    """Rasch reference: beta_IRT per skill, theta_IRT per training uid, causal M_ref per step."""

    provides = frozenset({"mastery", "beta", "theta_prefix", "theta_student", "seen"})

    def __init__(
        self,
        beta_prior_sd: float = 3.0,
        theta_prior_sd: float = 1.0,
        newton_iter: int = 50,
        tol: float = 1e-6,
        max_iter: int = 1000,
    ):
        self.beta_prior_sd = beta_prior_sd  # prior sd of skill difficulties (weak)
        self.theta_prior_sd = theta_prior_sd  # prior sd of abilities (fit and per-step MAP)
        self.newton_iter = newton_iter  # at most this many Newton steps per prefix ability MAP
        self.tol = tol
        self.max_iter = max_iter
        self.beta: torch.Tensor | None = None  # [C] float64
        self.uids: torch.Tensor | None = None  # [U] sorted training uids
        self.theta: torch.Tensor | None = None  # [U] ability of each uid in `uids`
        self._cache: dict = {}

    def fit(self, train: KTDataset) -> IRTReference:
        if train.K != 2:
            raise ValueError(f"the Rasch reference is binary: K must be 2, got {train.K}")
        if not train.students:
            raise ValueError("cannot fit the IRT reference on an empty training set")
        uids = train.uids
        order = np.argsort(uids, kind="stable")
        if len(np.unique(uids)) != len(uids):
            raise ValueError("training uids must be unique")
        U, C = len(uids), train.num_c
        lengths = np.array([len(s) for s in train.students])
        row_student = np.repeat(np.argsort(order), lengths)  # position of the uid in sorted order
        q = np.concatenate([s.q for s in train.students]).astype(np.int64)
        r = np.concatenate([s.r for s in train.students]).astype(np.int64)
        n = len(q)
        rows = np.repeat(np.arange(n), 2)
        cols = np.stack([row_student, U + q], axis=1).ravel()
        vals = np.tile([self.theta_prior_sd, -self.beta_prior_sd], n)
        X = sp.csr_matrix((vals, (rows, cols)), shape=(n, U + C))
        if len(np.unique(r)) < 2:  # one class: sklearn refuses, the MAP is still finite
            w = _map_one_class(X, r)
        else:
            clf = LogisticRegression(
                C=1.0, fit_intercept=False, solver="lbfgs", tol=self.tol, max_iter=self.max_iter
            )
            w = clf.fit(X, r).coef_.ravel()
        self.uids = torch.from_numpy(uids[order].copy())
        self.theta = torch.from_numpy(w[:U] * self.theta_prior_sd)
        self.beta = torch.from_numpy(w[U:] * self.beta_prior_sd)
        self.fitted = True
        self._cache = {}
        return self

    # -- lookups ------------------------------------------------------------------------------

    def _on(self, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        key = str(device)
        if key not in self._cache:
            self._cache[key] = (
                self.beta.to(device, torch.float32),
                self.uids.to(device),
                self.theta.to(device, torch.float32),
            )
        return self._cache[key]

    def student_theta(self, uid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """theta_IRT of each uid [B] and whether the reference saw that student [B] bool."""
        self.check_fitted()
        _, uids, theta = self._on(uid.device)
        if len(uids) == 0:
            return torch.zeros(uid.shape, dtype=theta.dtype, device=uid.device), uid < uid
        pos = torch.searchsorted(uids, uid).clamp(max=len(uids) - 1)
        seen = uids[pos] == uid
        return torch.where(seen, theta[pos], torch.zeros((), dtype=theta.dtype)), seen

    @torch.no_grad()
    def targets(self, batch: Batch) -> dict[str, torch.Tensor]:
        """beta [B, L] (beta_IRT[q]), theta_prefix [B, L], mastery M_ref [B, L] (causal),
        theta_student [B] (theta_IRT, 0 when unseen), seen [B] bool."""
        self.check_fitted()
        beta, _, _ = self._on(batch.q.device)
        q = batch.q.clamp(0, len(beta) - 1)
        theta_t = prefix_abilities(
            q, batch.r, batch.mask, beta, self.theta_prior_sd, self.newton_iter
        )
        out = {
            "beta": beta[q],
            "theta_prefix": theta_t,
            "mastery": torch.sigmoid(theta_t - beta[q]),
        }
        if batch.uid is not None:
            out["theta_student"], out["seen"] = self.student_theta(batch.uid)
        return out

    # -- persistence (tensors only, so checkpoints stay pickle-free) ---------------------------

    def state_dict(self) -> dict[str, torch.Tensor]:
        if not self.fitted:
            return {}
        return {"beta": self.beta, "uids": self.uids, "theta": self.theta}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if not state:
            return
        self.beta = state["beta"].detach().cpu().to(torch.float64)
        self.uids = state["uids"].detach().cpu().to(torch.int64)
        self.theta = state["theta"].detach().cpu().to(torch.float64)
        self.fitted = True
        self._cache = {}
