"""Seeded knowledge-tracing simulator: the workbook's embedded default dataset, with ground truth.

Dimensions: N students, L steps (`seq_len`), C skills (`num_c`), P problems (`num_pid`),
A archetypes, K response categories.

Generative story (every draw comes from `np.random.default_rng(seed)`):

1. Skills and problems. Skill difficulty `beta_c ~ N(0, 1)`, centred to mean 0 (Rasch
   identification). Problem p belongs to skill `pid_skill[p] = p // problems_per_c` and has a
   Rasch offset `pid_offset_p ~ N(0, 0.3^2)`.
   Population BKT parameters per skill: `L0_c ~ U(0.1, 0.6)`, `T_c ~ U(0.05, 0.3)`,
   `guess_c ~ U(0.1, 0.3)`, `slip_c ~ U(0.05, 0.2)`.
2. Archetypes (latent learner clusters). Archetype a has a prior level `z_a = linspace(-1, 1, A)_a`
   and a pace `w_a = (-1)^(a+1)` (both 0 when A = 1), so for A = 4 the archetypes are
   low-prior/slow ("strugglers"), low-prior/fast ("fast learners"), high-prior/slow and
   high-prior/fast. Each archetype uses
       logit(arch_L0[a, c]) = logit(L0_c) + 1.5 z_a
       arch_T[a, c]         = clip(T_c * exp(0.7 w_a), 0.01, 0.9)
   and shifts ability by `0.6 z_a`. With A = 1, arch_L0 = L0 and arch_T = T exactly.
3. Students. `archetype_i ~ U{0..A-1}`, `theta_i = N(0, 1) + 0.6 z_{archetype_i}`.
4. Practice schedule (structured so mastery can grow): each student walks through its own random
   permutation of the skills in blocks, wrapping around after C blocks; a new block starts with
   prob 1/m per step, m = max(2, L / (2 C)), so a full-length sequence covers the skills about
   twice (first pass introduces, second consolidates, so correctness rises along the sequence).
   With prob 0.2 a step instead reviews a uniformly drawn skill of an earlier block. The problem
   is uniform among the skill's problems.
5. Latent BKT mastery per (student, skill), no forgetting: mastered at the first opportunity with
   prob `arch_L0[a, c]`; after each opportunity an unmastered skill becomes mastered with prob
   `arch_T[a, c]`. The response at an opportunity reads the state *before* that transition.
6. Binary emission, logit `eta_t` of P(r_t = 1), for step (i, t) on skill c, problem p, mastery m,
   n earlier opportunities of c:
       hybrid: eta = theta_i - beta_c - pid_offset_p + 2.0 m - 0.2
       bkt:    P   = (1 - slip_c) if m else guess_c               (no theta, beta or offset)
       irt:    eta = theta_i + 0.6 s_a log(1 + n) - beta_c - pid_offset_p,  s_a = exp(0.7 w_a)
7. Ordinal mode (K > 2): a GPCM on ability `a_t = eta_t + beta_c` with discrimination
   `alpha_c = exp(N(0, 0.2^2))` and ordered thresholds `b_{c,h} = beta_c + d_{c,h}`, where
   `d_c = cumsum(steps) - mean(cumsum(steps))`, steps ~ U(0.6, 1.4) (so d is centred at 0):
       P(r_t = k) ∝ exp(sum_{h<k} alpha_c (a_t - b_{c,h})),  k = 0..K-1  (empty sum for k = 0).

Independent child streams draw the parameters, the students and the responses, so with one seed
the skill parameters do not depend on N, and the emissions share schedule and mastery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .dataset import KTDataset, StudentSeq

ARCH_THETA = 0.6  # ability shift per unit of archetype prior level z
ARCH_L0 = 1.5  # logit(L0) shift per unit of z
ARCH_T = 0.7  # log learning-rate scale per unit of archetype pace w
PID_SD = 0.3  # spread of problem Rasch offsets around their skill
PASSES = 2.0  # times a full-length sequence walks through all skills (later passes consolidate)
MIN_BLOCK = 2.0  # shortest mean block, so a skill is practised a few times in a row
P_REVIEW = 0.2  # probability that a step reviews an earlier skill
HYBRID_GAIN = 2.0  # logit gain of mastering a skill (hybrid emission)
HYBRID_SHIFT = 0.2  # centres the hybrid logit so mean correctness lands near 0.65
IRT_GROWTH = 0.6  # logit gain per log practice count (irt emission)


@dataclass
class SimTruth:
    """Ground truth of one simulation (numpy arrays)."""

    archetype: np.ndarray  # [N] int archetype of each student
    theta: np.ndarray  # [N] student ability (N(0, 1) + archetype shift)
    beta: np.ndarray  # [C] skill IRT difficulty
    pid_offset: np.ndarray  # [P] Rasch offset of each problem around its skill
    pid_skill: np.ndarray  # [P] int skill of each problem
    L0: np.ndarray  # [C] population BKT initial mastery
    T: np.ndarray  # [C] population BKT learning (transition) rate
    guess: np.ndarray  # [C] BKT guess (used by the bkt emission)
    slip: np.ndarray  # [C] BKT slip (used by the bkt emission)
    arch_L0: np.ndarray  # [A, C] initial mastery each archetype actually uses
    arch_T: np.ndarray  # [A, C] learning rate each archetype actually uses
    arch_theta_shift: np.ndarray  # [A] ability shift of each archetype
    arch_T_scale: np.ndarray  # [A] multiplicative learning-rate scale (before clipping)
    arch_names: list[str]  # [A] readable labels, e.g. "low-prior/fast"
    lengths: np.ndarray  # [N] int observed sequence length
    mastery: np.ndarray  # [N, L] bool latent mastery of the practised skill (before the step)
    expected: np.ndarray  # [N, L] true E[r_t] (= P(correct) when K = 2); oracle for metrics
    gpcm_alpha: np.ndarray | None = None  # [C] GPCM discrimination > 0 (K > 2 only)
    gpcm_thresholds: np.ndarray | None = None  # [C, K-1] increasing GPCM thresholds (K > 2)
    params: dict = field(default_factory=dict)  # scalar settings (emission, K, gain, ...)


@dataclass
class SimResult:
    """Simulated dataset plus its ground truth."""

    data: KTDataset
    truth: SimTruth

    def to_frame(self) -> pd.DataFrame:
        """Per-student table: uid, archetype, theta, length, mean response in [0, 1]."""
        t = self.truth
        scale = max(self.data.K - 1, 1)
        return pd.DataFrame(
            {
                "uid": self.data.uids,
                "archetype": t.archetype,
                "arch_name": np.asarray(t.arch_names)[t.archetype],
                "theta": t.theta,
                "length": t.lengths,
                "mean_response": [s.r.mean() / scale for s in self.data.students],
            }
        )

    def skills_frame(self) -> pd.DataFrame:
        """Per-skill table: true parameters and mean response in [0, 1]."""
        t = self.truth
        q = np.concatenate([s.q for s in self.data.students])
        r = np.concatenate([s.r for s in self.data.students]) / max(self.data.K - 1, 1)
        counts = np.bincount(q, minlength=self.data.num_c)
        mean = np.bincount(q, weights=r, minlength=self.data.num_c) / np.maximum(counts, 1)
        return pd.DataFrame(
            {
                "skill": np.arange(self.data.num_c),
                "beta": t.beta,
                "L0": t.L0,
                "T": t.T,
                "guess": t.guess,
                "slip": t.slip,
                "count": counts,
                "mean_response": mean,
            }
        )


@dataclass
class _Steps:
    """Per-step arrays the emissions read."""

    q: np.ndarray  # [N, L] skill
    pid: np.ndarray  # [N, L] problem
    mastered: np.ndarray  # [N, L] bool mastery before the step
    count: np.ndarray  # [N, L] earlier opportunities of the same skill


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p) - np.log1p(-p)


def _hybrid(t: SimTruth, s: _Steps) -> np.ndarray:
    """IRT ability/difficulty plus a BKT mastery gain."""
    irt = t.theta[:, None] - t.beta[s.q] - t.pid_offset[s.pid]
    return irt + HYBRID_GAIN * s.mastered - HYBRID_SHIFT


def _bkt(t: SimTruth, s: _Steps) -> np.ndarray:
    """Pure BKT: 1 - slip if mastered, else guess."""
    return _logit(np.where(s.mastered, 1.0 - t.slip[s.q], t.guess[s.q]))


def _irt(t: SimTruth, s: _Steps) -> np.ndarray:
    """Rasch with practice growth scaled by the archetype's pace."""
    growth = IRT_GROWTH * t.arch_T_scale[t.archetype][:, None]  # [N, 1]
    irt = t.theta[:, None] - t.beta[s.q] - t.pid_offset[s.pid]
    return irt + growth * np.log1p(s.count)


EMISSIONS: dict[str, Callable[[SimTruth, _Steps], np.ndarray]] = {
    "hybrid": _hybrid,
    "bkt": _bkt,
    "irt": _irt,
}


def _archetypes(A: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Prior level z [A], pace w [A] and labels of A archetypes."""
    if A == 1:
        return np.zeros(1), np.zeros(1), ["average"]
    z = np.linspace(-1.0, 1.0, A)
    w = np.where(np.arange(A) % 2 == 1, 1.0, -1.0)
    names = [
        f"{'low' if zi < 0 else 'high'}-prior/{'fast' if wi > 0 else 'slow'}"
        for zi, wi in zip(z, w, strict=True)
    ]
    return z, w, names


def _schedule(rng: np.random.Generator, N: int, L: int, C: int) -> np.ndarray:
    """Skill practised at each step [N, L]: blocks along a per-student permutation, plus reviews."""
    order = np.argsort(rng.random((N, C)), axis=1)  # [N, C] each student's skill order
    block_mean = max(MIN_BLOCK, L / (PASSES * C))
    advance = rng.random((N, L)) < 1.0 / block_mean
    advance[:, 0] = False
    block = np.cumsum(advance, axis=1)  # [N, L] block index
    rows = np.arange(N)[:, None]
    q = order[rows, block % C]
    # a review draws among the skills of earlier blocks (all skills once the order wrapped)
    seen = np.minimum(block, C)
    review = (rng.random((N, L)) < P_REVIEW) & (seen > 0)
    earlier = (rng.random((N, L)) * seen).astype(np.int64)
    return np.where(review, order[rows, earlier], q)


def simulate(
    num_students: int = 1000,
    seq_len: int = 100,
    num_c: int = 20,
    problems_per_c: int = 5,
    num_archetypes: int = 4,
    K: int = 2,
    emission: str = "hybrid",
    min_len: int | None = None,
    seed: int = 0,
) -> SimResult:
    """Simulate `num_students` learners (see the module docstring for the generative story)."""
    if emission not in EMISSIONS:
        raise KeyError(f"unknown emission {emission!r}; valid: {sorted(EMISSIONS)}")
    for name, value, low in [
        ("num_students", num_students, 1),
        ("seq_len", seq_len, 1),
        ("num_c", num_c, 1),
        ("problems_per_c", problems_per_c, 1),
        ("num_archetypes", num_archetypes, 1),
        ("K", K, 2),
    ]:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an integer >= {low}, got {value!r}")
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
    if min_len is not None and not 1 <= min_len <= seq_len:
        raise ValueError(f"min_len must be in [1, seq_len={seq_len}], got {min_len}")
    N, L, C, A = num_students, seq_len, num_c, num_archetypes
    P = C * problems_per_c
    par_rng, stu_rng, resp_rng = np.random.default_rng(seed).spawn(3)

    # skills, problems, archetypes
    beta = par_rng.normal(0.0, 1.0, C)
    beta -= beta.mean()  # Rasch identification; keeps correctness stable
    pid_offset = par_rng.normal(0.0, PID_SD, P)
    pid_skill = np.arange(P) // problems_per_c
    L0 = par_rng.uniform(0.1, 0.6, C)
    T = par_rng.uniform(0.05, 0.3, C)
    guess = par_rng.uniform(0.1, 0.3, C)
    slip = par_rng.uniform(0.05, 0.2, C)
    z, w, names = _archetypes(A)
    T_scale = np.exp(ARCH_T * w)
    arch_L0 = 1.0 / (1.0 + np.exp(-(_logit(L0)[None, :] + ARCH_L0 * z[:, None])))  # [A, C]
    arch_T = np.clip(T[None, :] * T_scale[:, None], 0.01, 0.9)  # [A, C]
    if A == 1:  # exact, so a BKT fit on one archetype recovers truth.L0 / truth.T
        arch_L0, arch_T = L0[None, :].copy(), T[None, :].copy()

    # students and their practice
    arch = stu_rng.integers(0, A, N)
    theta = stu_rng.normal(0.0, 1.0, N) + ARCH_THETA * z[arch]
    lengths = stu_rng.integers(min_len, L + 1, N) if min_len is not None else np.full(N, L)
    q = _schedule(stu_rng, N, L, C)
    pid = q * problems_per_c + stu_rng.integers(0, problems_per_c, (N, L))
    rows = np.arange(N)
    state = stu_rng.random((N, C)) < arch_L0[arch]  # [N, C] latent mastery
    learn = stu_rng.random((N, L)) < arch_T[arch[:, None], q]  # [N, L] transition succeeds
    count = np.zeros((N, C), dtype=np.int64)
    mastered = np.empty((N, L), dtype=bool)
    n_prev = np.empty((N, L), dtype=np.int64)
    for t in range(L):  # sequential in time only; vector ops over students
        c = q[:, t]
        mastered[:, t] = state[rows, c]
        n_prev[:, t] = count[rows, c]
        count[rows, c] += 1
        state[rows, c] |= learn[:, t]

    truth = SimTruth(
        archetype=arch,
        theta=theta,
        beta=beta,
        pid_offset=pid_offset,
        pid_skill=pid_skill,
        L0=L0,
        T=T,
        guess=guess,
        slip=slip,
        arch_L0=arch_L0,
        arch_T=arch_T,
        arch_theta_shift=ARCH_THETA * z,
        arch_T_scale=T_scale,
        arch_names=names,
        lengths=lengths,
        mastery=mastered,
        expected=np.empty((N, L)),
        params={
            "emission": emission,
            "K": K,
            "hybrid_gain": HYBRID_GAIN,
            "hybrid_shift": HYBRID_SHIFT,
            "irt_growth": IRT_GROWTH,
            "passes": PASSES,
            "p_review": P_REVIEW,
        },
    )
    eta = EMISSIONS[emission](truth, _Steps(q, pid, mastered, n_prev))  # [N, L] logit
    u = resp_rng.random((N, L))
    if K == 2:
        p = 1.0 / (1.0 + np.exp(-eta))
        r = (u < p).astype(np.int64)
        truth.expected = p
    else:
        alpha = np.exp(par_rng.normal(0.0, 0.2, C))
        steps = np.cumsum(par_rng.uniform(0.6, 1.4, (C, K - 1)), axis=1)
        thresholds = beta[:, None] + steps - steps.mean(axis=1, keepdims=True)  # [C, K-1]
        ability = eta + beta[q]
        # cumulative GPCM scores: s_k = sum_{h<k} alpha (ability - b_h), s_0 = 0 -> [N, L, K]
        terms = alpha[q][..., None] * (ability[..., None] - thresholds[q])
        scores = np.concatenate([np.zeros((N, L, 1)), np.cumsum(terms, axis=-1)], axis=-1)
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        r = (u[..., None] > np.cumsum(probs, axis=-1)[..., :-1]).sum(axis=-1).astype(np.int64)
        truth.expected = (probs * np.arange(K)).sum(axis=-1)
        truth.gpcm_alpha, truth.gpcm_thresholds = alpha, thresholds

    students = [
        StudentSeq(uid=i, q=q[i, :n], r=r[i, :n], pid=pid[i, :n])
        for i, n in enumerate(lengths.tolist())
    ]
    data = KTDataset(
        students=students,
        num_c=C,
        num_pid=P,
        K=K,
        name="synthetic",
        source=f"simulate(seed={seed})",
    )
    return SimResult(data=data, truth=truth)
