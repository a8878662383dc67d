"""Bayesian Knowledge Tracing (Corbett & Anderson 1994) per skill, EM-fitted on training students.

# N students, C skills, R (student, skill) sequences, B batch, L steps
Two hidden states per (student, skill), unmastered/mastered; no forgetting:
    P(mastered at the first opportunity) = L0        P(unmastered -> mastered after one) = T
    P(correct | unmastered) = guess                  P(wrong | mastered) = slip
The response at an opportunity reads the state *before* that opportunity's transition, so
    p_t = m_t (1 - slip) + (1 - m_t) guess,   m_t = P(mastered before t | earlier responses),
and after observing r_t the posterior moves by Bayes, then through the transition T. Each skill's
chain only advances at that skill's opportunities: a student's filtering on skill c reads the
student's earlier responses on c only.

Fitting: Baum-Welch (EM) over all R sequences at once. Sequences are sorted by length so the
sequences still running at step t are a prefix; the observations are stored time-major, so the
scaled forward and backward passes are a loop over steps of vector ops over sequences (no loop
over students or skills). Guess and slip are kept below 0.5 (the usual identifiability
constraint: otherwise "mastered" and "unmastered" can swap meaning).

`targets(batch)` runs the causal forward filter over each window of the batch (vectorised over
students, a loop over steps), starting every window from L0: the reference then sees exactly the
history the neural model sees (a window, not earlier chunks of the log).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..data.dataset import Batch, BatchLoader, KTDataset
from .base import REFERENCES, ReferenceModel

PARAMS = ("L0", "T", "guess", "slip")
EPS = 1e-4  # keeps every probability strictly inside (0, 1)


@dataclass
class _Sequences:
    """All (student, skill) response sequences, time-major (see module docstring)."""

    skill: np.ndarray  # [R] skill of each sequence, sequences sorted by decreasing length
    n_active: np.ndarray  # [Tmax] number of sequences with more than t observations
    offset: np.ndarray  # [Tmax + 1] start of step t's block in the flat arrays
    obs: np.ndarray  # [total] float responses, step-t block = sequences 0..n_active[t]-1


def _sequences(data: KTDataset) -> _Sequences:
    """Group every student's log by skill (order kept) into time-major sequences."""
    if data.K != 2:
        raise ValueError(f"BKT needs binary responses (K=2), got K={data.K} for {data.name}")
    lengths = np.array([len(s) for s in data.students])
    if lengths.sum() == 0:
        raise ValueError(f"{data.name}: no interactions to fit BKT on")
    q = np.concatenate([s.q for s in data.students]).astype(np.int64)
    r = np.concatenate([s.r for s in data.students]).astype(np.float64)
    stu = np.repeat(np.arange(len(lengths)), lengths)
    order = np.lexsort((np.arange(len(q)), stu, q))  # by skill, student, then time
    q, r, stu = q[order], r[order], stu[order]
    new = np.r_[True, (q[1:] != q[:-1]) | (stu[1:] != stu[:-1])]
    seq_id = np.cumsum(new) - 1  # [n] sequence of each observation
    starts = np.flatnonzero(new)
    seq_len = np.diff(np.r_[starts, len(q)])
    t_in_seq = np.arange(len(q)) - starts[seq_id]
    rank = np.empty_like(seq_len)
    by_len = np.argsort(-seq_len, kind="stable")
    rank[by_len] = np.arange(len(seq_len))  # sequence -> row in length order
    n_active = np.bincount(t_in_seq)  # rows alive at step t (a prefix in length order)
    offset = np.r_[0, np.cumsum(n_active)]
    obs = np.empty(len(q))
    obs[offset[t_in_seq] + rank[seq_id]] = r
    return _Sequences(q[starts][by_len], n_active, offset, obs)


def _clip(params: dict[str, np.ndarray], max_guess: float, max_slip: float) -> None:
    params["L0"] = np.clip(params["L0"], EPS, 1 - EPS)
    params["T"] = np.clip(params["T"], EPS, 1 - EPS)
    params["guess"] = np.clip(params["guess"], EPS, max_guess - EPS)
    params["slip"] = np.clip(params["slip"], EPS, max_slip - EPS)


def _e_step(seqs: _Sequences, p: dict[str, np.ndarray], C: int):
    """Scaled forward-backward; returns the expected counts per skill and the log-likelihood."""
    row = {k: v[seqs.skill] for k, v in p.items()}  # [R] parameters of each row
    o, off, n_act = seqs.obs, seqs.offset, seqs.n_active
    total = len(o)
    a1 = np.empty(total)  # P(mastered at t | o_1..t), flat time-major
    scale = np.empty(total)
    e1 = np.where(o == 1, 1 - row["slip"][_rows_of(seqs)], row["slip"][_rows_of(seqs)])
    e0 = np.where(o == 1, row["guess"][_rows_of(seqs)], 1 - row["guess"][_rows_of(seqs)])
    prev = None
    for t in range(len(n_act)):
        blk = slice(off[t], off[t + 1])
        n = n_act[t]
        if t == 0:
            m = row["L0"][:n]
        else:
            m = prev[:n] + (1 - prev[:n]) * row["T"][:n]
        u1, u0 = m * e1[blk], (1 - m) * e0[blk]
        scale[blk] = u1 + u0
        a1[blk] = u1 / scale[blk]
        prev = a1[blk]
    # backward: b[s] = P(o_{t+1..} | s_t) / prod of later scales; b = 1 at each row's last step
    b1 = np.ones(total)
    b0 = np.ones(total)
    xi = np.zeros(total)  # expected unmastered(t) -> mastered(t+1) transitions
    for t in range(len(n_act) - 2, -1, -1):
        n = n_act[t + 1]
        nxt = slice(off[t + 1], off[t + 1] + n)
        cur = slice(off[t], off[t] + n)
        f1 = e1[nxt] * b1[nxt] / scale[nxt]
        f0 = e0[nxt] * b0[nxt] / scale[nxt]
        T = row["T"][:n]
        b1[cur] = f1  # mastered stays mastered
        b0[cur] = (1 - T) * f0 + T * f1
        xi[cur] = (1 - a1[cur]) * T * f1
    g1 = a1 * b1  # P(mastered at t | all observations of the row)
    g0 = 1 - g1
    skill = seqs.skill[_rows_of(seqs)]
    not_last = np.zeros(total, dtype=bool)
    for t in range(len(n_act) - 1):
        not_last[off[t] : off[t] + n_act[t + 1]] = True
    count = lambda w: np.bincount(skill, weights=w, minlength=C)  # noqa: E731
    first = slice(0, n_act[0])
    stats = {
        "L0": (
            np.bincount(seqs.skill, weights=g1[first], minlength=C),
            np.bincount(seqs.skill, minlength=C).astype(float),
        ),
        "T": (count(xi), count(g0 * not_last)),
        "guess": (count(g0 * o), count(g0)),
        "slip": (count(g1 * (1 - o)), count(g1)),
    }
    return stats, float(np.log(scale).sum())


def _rows_of(seqs: _Sequences) -> np.ndarray:
    """[total] row index of every flat observation (cached on the object)."""
    cached = getattr(seqs, "_rows", None)
    if cached is None:
        cached = np.concatenate([np.arange(n) for n in seqs.n_active])
        seqs._rows = cached  # type: ignore[attr-defined]
    return cached


@REFERENCES.register("bkt")
class BKTReference(ReferenceModel):
    """Per-skill BKT (L0, T, guess, slip), EM on training students; causal per-step targets."""

    provides = frozenset({"p", "mastery", "L0", "T"})

    def __init__(
        self,
        max_iter: int = 200,
        tol: float = 1e-7,
        max_guess: float = 0.5,
        max_slip: float = 0.5,
        init: dict[str, float] | None = None,
    ):
        self.max_iter, self.tol = max_iter, tol
        self.max_guess, self.max_slip = max_guess, max_slip
        self.init = {"L0": 0.4, "T": 0.1, "guess": 0.2, "slip": 0.1, **(init or {})}
        self.params: dict[str, torch.Tensor] = {}  # name -> [C] float64
        self.n_obs = torch.zeros(0, dtype=torch.long)  # [C] training observations per skill
        self.history: list[float] = []  # log-likelihood per EM iteration
        self.fitted = False

    def fit(self, train: KTDataset) -> BKTReference:
        C = train.num_c
        seqs = _sequences(train)
        p = {k: np.full(C, float(v)) for k, v in self.init.items()}
        _clip(p, self.max_guess, self.max_slip)
        self.history = []
        for _ in range(self.max_iter):
            stats, ll = _e_step(seqs, p, C)
            self.history.append(ll)
            for k, (num, den) in stats.items():
                p[k] = np.where(den > 0, num / np.maximum(den, 1e-300), p[k])
            _clip(p, self.max_guess, self.max_slip)
            if len(self.history) > 1 and abs(ll - self.history[-2]) <= self.tol * abs(ll):
                break
        self.params = {k: torch.from_numpy(v.copy()) for k, v in p.items()}
        self.n_obs = torch.from_numpy(
            np.bincount(np.concatenate([s.q for s in train.students]), minlength=C)
        ).long()
        self.fitted = True
        return self

    @property
    def num_c(self) -> int:
        return len(self.n_obs)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The fitted parameters as tensors (for checkpoints)."""
        self.check_fitted()
        return {**{k: v.clone() for k, v in self.params.items()}, "n_obs": self.n_obs.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        missing = [k for k in (*PARAMS, "n_obs") if k not in state]
        if missing:
            raise KeyError(f"BKT state is missing {missing}")
        self.params = {k: state[k].detach().cpu().double().clone() for k in PARAMS}
        self.n_obs = state["n_obs"].detach().cpu().long().clone()
        self.fitted = True

    def frame(self):
        """Per-skill parameters and training counts as a DataFrame."""
        import pandas as pd

        self.check_fitted()
        return pd.DataFrame(
            {
                "skill": np.arange(self.num_c),
                **{k: v.numpy() for k, v in self.params.items()},
                "n_obs": self.n_obs.numpy(),
            }
        )

    @torch.no_grad()
    def targets(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Causal filter per window: p [B, L] P(correct at t | r before t), mastery [B, L] (the
        P(mastered) behind p), L0 [B, L] and T [B, L] of the skill at t; zeros at padding."""
        self.check_fitted()
        q, r, mask = batch.q, batch.r, batch.mask
        B, L = q.shape
        dev, dtype = q.device, torch.float32
        par = {k: v.to(dev, dtype) for k, v in self.params.items()}
        g, s, T = par["guess"][q], par["slip"][q], par["T"][q]  # [B, L]
        right = torch.where(r == 1, 1 - s, s)  # P(r_t | mastered)
        wrong = torch.where(r == 1, g, 1 - g)  # P(r_t | unmastered)
        state = par["L0"].unsqueeze(0).repeat(B, 1)  # [B, C] P(mastered) before the next try
        mastery = torch.empty(B, L, device=dev, dtype=dtype)
        for t in range(L):
            c = q[:, t : t + 1]
            m = state.gather(1, c).squeeze(1)
            mastery[:, t] = m
            post = m * right[:, t] / (m * right[:, t] + (1 - m) * wrong[:, t])
            new = post + (1 - post) * T[:, t]
            state.scatter_(1, c, torch.where(mask[:, t], new, m).unsqueeze(1))
        valid = mask.to(dtype)
        p = (mastery * (1 - s) + (1 - mastery) * g) * valid
        return {"p": p, "mastery": mastery * valid, "L0": par["L0"][q] * valid, "T": T * valid}

    def predict(
        self, data: KTDataset, batch_size: int = 256, max_len: int = 200
    ) -> dict[str, np.ndarray]:
        """BKT as a predictor on the same windows the models see: y_true, prob, uid, step."""
        ys, ps, uids, steps = [], [], [], []
        for batch in BatchLoader(data, batch_size, max_len, shuffle=False):
            m = batch.mask
            ys.append(batch.r[m])
            ps.append(self.targets(batch)["p"][m])
            uids.append(batch.uid.unsqueeze(1).expand_as(m)[m])
            steps.append((batch.start.unsqueeze(1) + torch.arange(m.shape[1]))[m])
        cat = lambda xs: torch.cat(xs).numpy()  # noqa: E731
        return {"y_true": cat(ys), "prob": cat(ps), "uid": cat(uids), "step": cat(steps)}
