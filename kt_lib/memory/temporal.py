"""Temporal-mismatch strategies (seed 000): similarity of a partial trajectory to complete ones.

# B batch, L current steps, M memory slots, S memory steps, D state dim
A current student who has reached step t (t + 1 steps known) is compared with M complete
historical sequences [M, S, D]. Every strategy returns [B, L, M] where row t reads the current
student's states 0..t only; later memory steps belong to OTHER (training) students, and may be
read. Steps count from the start of the current window: the heads hand each window the bank
positions it covers in the log (`BaseSimilarityHead.trajectory_similarity`), so i = t is the same
step of the log for both students. The seed describes four strategies; each is registered in
`TEMPORAL_STRATEGIES`:

- `prefix_aligned` (strategy 1): cos(mean of the current states 0..t, mean of the memory's states
  0..t), i.e. both prefixes encoded the way `kt_lib.memory.encoders` encodes a whole log.
- `position_weighted` (strategy 2, the seed's selected one), per step i:
      past   i <= t: weight decay^(t - i),                   sim cos(cur_i, mem_i)
      future i >  t: weight future_weight * decay^(i - t - 1), sim cos(mem_{i-1}, mem_i) (the
                     historical student's step-to-step consistency; 0.5 at i = 0)
      sim = sum_i weight_i * sim_i / sum_i weight_i
- `multiscale` (strategy 3): trailing-window means of the states at several window sizes (seed:
  10, 20, 50), each through a learned projection (the seed's per-scale encoders), concatenated;
  cosine of the current encoding at t with the memory's encoding at the same step t.
- `completion` (strategy 4): position weighting whose future part compares a PREDICTED
  completion of the current student, g(cur_t) (the seed's completion MLP, from step t only),
  with where each historical student actually went: future_weight * decay^(i - t - 1) *
  cos(g(cur_t), mem_i) for i > t. Only bank futures are read, never the current student's.
  (The seed rolls g forward step by step, one state per future step; a single predicted state
  keeps the cost at [L, M, D] instead of [B, L, S, D].)

Memory positions that do not exist (shorter sequences, empty cluster positions) get weight 0; the
seed instead repeats the last state, which would count padding as perfect consistency. Every
normaliser (step counts, weight sums) runs over the steps a row may read. The seed loops over
students and positions in Python; here einsums and [L, S] weight matrices do every (b, t, m).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from ..registry import Registry

TEMPORAL_STRATEGIES: Registry = Registry("temporal strategy")


class TemporalSettings(Protocol):
    """What the strategies read from a head's temporal configuration."""

    decay_factor: float
    future_weight: float
    window_sizes: Sequence[int]


def position_weights(
    L: int,
    S: int,
    decay: float,
    future_weight: float,
    device=None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(past [L, S], future [L, S]) weights; row t is the current step (t + 1 steps known)."""
    t = torch.arange(L, device=device).unsqueeze(1)
    i = torch.arange(S, device=device).unsqueeze(0)
    lag = (t - i).to(dtype)  # >= 0 on the past side
    base = torch.tensor(decay, device=device, dtype=dtype)
    past = torch.where(
        lag >= 0, base.pow(lag.clamp(min=0)), torch.zeros((), dtype=dtype, device=device)
    )
    ahead = (-lag - 1).clamp(min=0)  # i - t - 1 on the future side
    future = torch.where(
        lag < 0, future_weight * base.pow(ahead), torch.zeros((), dtype=dtype, device=device)
    )
    return past, future


def decayed_mean_weights(
    L: int, decay: float, device=None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """[L, L] row-normalised weights decay^(t - i) over i <= t: a causal, recency-weighted mean."""
    past, _ = position_weights(L, L, decay, 0.0, device, dtype)
    return past / past.sum(1, keepdim=True)


def self_consistency(
    mem: torch.Tensor, valid: torch.Tensor, unit: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos(mem_{i-1}, mem_i) [M, S] with 0.5 at i = 0, where both steps exist [M, S]).

    `unit` may pass mem already normalised along D.
    """
    unit = F.normalize(mem, dim=-1) if unit is None else unit
    cons = torch.full(mem.shape[:2], 0.5, dtype=mem.dtype, device=mem.device)
    cons[:, 1:] = torch.linalg.vecdot(unit[:, 1:], unit[:, :-1])
    both = valid.clone()
    both[:, 1:] &= valid[:, :-1]
    return cons, both


def _valid(mem: torch.Tensor, mem_valid: torch.Tensor | None) -> torch.Tensor:
    M, S, _ = mem.shape
    if mem_valid is None:
        return torch.ones(M, S, dtype=torch.bool, device=mem.device)
    return mem_valid.to(torch.bool)


def _aligned_past(
    cur: torch.Tensor, mem_u: torch.Tensor, v: torch.Tensor, past: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decayed past terms: numerator [L, B, M] of sum_i past[t, i] cos(cur_i, mem_i), and the
    weight sum [L, M] over the memory steps that exist."""
    B, L, _ = cur.shape
    M = mem_u.shape[0]
    n = min(L, mem_u.shape[1])  # steps where both the current student and the memory have one
    cur_u = F.normalize(cur[:, :n], dim=-1)
    # [n, B, D] @ [n, D, M] -> [n, B, M]: one cosine per (step, row, memory)
    cos = torch.bmm(cur_u.transpose(0, 1), mem_u[:, :n].permute(1, 2, 0)) * v[:, :n].T.unsqueeze(1)
    num = (past[:, :n] @ cos.reshape(n, B * M)).view(L, B, M)
    return num, past[:, :n] @ v[:, :n].T


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num [L, B, M] / den [L, M] where den > 0, else 0 -> [B, L, M]."""
    den = den.unsqueeze(1)
    sim = torch.where(den > 0, num / den.clamp(min=torch.finfo(num.dtype).tiny), 0.0)
    return sim.transpose(0, 1)


def position_weighted_similarity(
    cur: torch.Tensor,
    mem: torch.Tensor,
    mem_valid: torch.Tensor | None,
    decay: float,
    future_weight: float,
) -> torch.Tensor:
    """Strategy 2: similarity [B, L, M] of every current step to every memory sequence.

    cur [B, L, D] states of the current students (row t may use steps <= t: it does),
    mem [M, S, D] states of historical sequences, mem_valid [M, S] bool (True: step exists).
    Rows with no weight at all (e.g. an empty memory sequence) are 0.
    """
    L, S = cur.shape[1], mem.shape[1]
    valid = _valid(mem, mem_valid)
    v = valid.to(cur.dtype)
    past, future = position_weights(L, S, decay, future_weight, cur.device, cur.dtype)
    mem_u = F.normalize(mem, dim=-1)
    num, den = _aligned_past(cur, mem_u, v, past)
    cons, both = self_consistency(mem, valid, mem_u)
    w_future = both.to(cur.dtype)
    num = num + (future @ (cons * w_future).T).unsqueeze(1)  # future: memory only, [L, M]
    return _ratio(num, den + future @ w_future.T)


def _trailing_mean(
    x: torch.Tensor, valid: torch.Tensor, window: int, L: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean of x [N, S, D] over the existing steps in (t - window, t], t = 0..L-1 (clamped to the
    last step S - 1), and whether any step existed [N, L]."""
    N, S, D = x.shape
    v = valid.to(x.dtype)
    zero = x.new_zeros(N, 1, D)
    sums = torch.cat([zero, (x * v.unsqueeze(-1)).cumsum(1)], 1)  # [N, S + 1, D]
    counts = torch.cat([v.new_zeros(N, 1), v.cumsum(1)], 1)  # [N, S + 1]
    end = torch.arange(1, L + 1, device=x.device).clamp(max=S)  # exclusive end of the window
    start = (end - window).clamp(min=0)
    total = sums[:, end] - sums[:, start]
    count = counts[:, end] - counts[:, start]
    return total / count.clamp(min=1).unsqueeze(-1), count > 0


def prefix_aligned_similarity(
    cur: torch.Tensor, mem: torch.Tensor, mem_valid: torch.Tensor | None = None
) -> torch.Tensor:
    """Strategy 1: cos(mean cur_0..t, mean of the memory's existing steps 0..t) -> [B, L, M]."""
    B, L, _ = cur.shape
    valid = _valid(mem, mem_valid)
    ones = torch.ones(B, L, dtype=torch.bool, device=cur.device)
    cur_mean, _ = _trailing_mean(cur, ones, L, L)  # window L: the whole prefix
    mem_mean, seen = _trailing_mean(mem, valid, mem.shape[1], L)  # [M, L, D], [M, L]
    sim = torch.einsum("bld,mld->blm", F.normalize(cur_mean, dim=-1), F.normalize(mem_mean, dim=-1))
    return sim * seen.T.unsqueeze(0).to(sim.dtype)


class TemporalStrategy(nn.Module):
    """A registered strategy: forward(cur [B, L, D], mem [M, S, D], valid [M, S]) -> [B, L, M].

    `reads`: the temporal settings (decay_factor, future_weight, window_sizes) it uses; the
    configuration refuses the others (kt_lib.heads.inter.base).
    """

    reads: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, d: int, settings: TemporalSettings):
        super().__init__()
        self.d = d
        self.decay = float(settings.decay_factor)
        self.future_weight = float(settings.future_weight)

    @classmethod
    def check(cls, settings: TemporalSettings) -> None:
        """Raise ValueError for settings the strategy cannot use (called by config validation)."""

    def forward(
        self, cur: torch.Tensor, mem: torch.Tensor, valid: torch.Tensor | None
    ) -> torch.Tensor:
        raise NotImplementedError


@TEMPORAL_STRATEGIES.register("prefix_aligned")
class PrefixAligned(TemporalStrategy):
    """Strategy 1: compare equally long prefixes (the memory truncated to the current step)."""

    def forward(self, cur, mem, valid):
        return prefix_aligned_similarity(cur, mem, valid)


@TEMPORAL_STRATEGIES.register("position_weighted")
class PositionWeighted(TemporalStrategy):
    """Strategy 2: decayed per-step cosines; future_weight for the memory's later steps."""

    reads = frozenset({"decay_factor", "future_weight"})

    def forward(self, cur, mem, valid):
        return position_weighted_similarity(cur, mem, valid, self.decay, self.future_weight)


@TEMPORAL_STRATEGIES.register("multiscale")
class MultiScale(TemporalStrategy):
    """Strategy 3: trailing-window means at several scales through learned projections."""

    reads = frozenset({"window_sizes"})

    def __init__(self, d: int, settings: TemporalSettings):
        super().__init__(d, settings)
        self.windows = [int(w) for w in settings.window_sizes]
        width = d // len(self.windows)
        if width < 1:
            raise ValueError(
                f"multiscale: {len(self.windows)} window sizes need a state dim >= "
                f"{len(self.windows)}, got {d}"
            )
        self.proj = nn.ModuleList([nn.Linear(d, width, bias=False) for _ in self.windows])

    @classmethod
    def check(cls, settings: TemporalSettings) -> None:
        sizes = list(settings.window_sizes)
        if not sizes or any(isinstance(w, bool) or int(w) != w or w < 1 for w in sizes):
            raise ValueError(f"window_sizes must be a non-empty list of integers >= 1, got {sizes}")

    def forward(self, cur, mem, valid):
        B, L, _ = cur.shape
        valid = _valid(mem, valid)
        ones = torch.ones(B, L, dtype=torch.bool, device=cur.device)
        enc_cur, enc_mem, seen = [], [], None
        for w, proj in zip(self.windows, self.proj, strict=True):
            enc_cur.append(proj(_trailing_mean(cur, ones, w, L)[0]))  # [B, L, d / n]
            m, s = _trailing_mean(mem, valid, w, L)  # [M, L, D], [M, L]
            enc_mem.append(proj(m))
            seen = s if seen is None else seen | s
        c = F.normalize(torch.cat(enc_cur, -1), dim=-1)
        m = F.normalize(torch.cat(enc_mem, -1), dim=-1)
        return torch.einsum("bld,mld->blm", c, m) * seen.T.unsqueeze(0).to(c.dtype)


@TEMPORAL_STRATEGIES.register("completion")
class Completion(TemporalStrategy):
    """Strategy 4: the past as position weighting, the future as a predicted completion of the
    current student (from step t) against the historical students' real later steps."""

    reads = frozenset({"decay_factor", "future_weight"})

    def __init__(self, d: int, settings: TemporalSettings):
        super().__init__(d, settings)
        self.complete = nn.Sequential(  # the seed's completion model
            nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d), nn.Tanh()
        )

    @classmethod
    def check(cls, settings: TemporalSettings) -> None:
        if not settings.future_weight > 0:
            raise ValueError(
                "strategy completion weighs the predicted future by future_weight: it must be > 0 "
                f"(0 is position_weighted's strict-causal form), got {settings.future_weight}"
            )

    def forward(self, cur, mem, valid):
        L, S = cur.shape[1], mem.shape[1]
        valid = _valid(mem, valid)
        v = valid.to(cur.dtype)
        past, future = position_weights(L, S, self.decay, self.future_weight, cur.device, cur.dtype)
        mem_u = F.normalize(mem, dim=-1)
        num, den = _aligned_past(cur, mem_u, v, past)
        ahead = torch.einsum("ls,msd->lmd", future, mem_u * v.unsqueeze(-1))  # [L, M, D]
        guess = F.normalize(self.complete(cur), dim=-1)  # [B, L, D]: g(cur_t), step t only
        num = num + torch.einsum("bld,lmd->lbm", guess, ahead)
        return _ratio(num, den + future @ v.T)


def build_strategy(name: str, d: int, settings: TemporalSettings) -> TemporalStrategy:
    """A registered temporal strategy module."""
    return TEMPORAL_STRATEGIES[name](d, settings)
