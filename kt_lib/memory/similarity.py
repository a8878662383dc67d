"""Position-weighted similarity (seed 000, "Strategy 2"), vectorised over batch, steps and slots.

# B batch, L current steps, M memory slots, S memory steps, D state dim
The seed compares a current student who has reached `current_position` steps with a complete
historical sequence m of length S, position by position:

    past   i <  current_position: weight decay^(current_position - i - 1), sim cos(cur_i, mem_{m,i})
    future i >= current_position: weight future_weight * decay^(i - current_position),
                                  sim cos(mem_{m,i-1}, mem_{m,i})  (the historical student's own
                                  step-to-step consistency; 0.5 at i = 0)
    sim_m = sum_i weight_i * sim_i / sum_i weight_i

In SimAKT, Block 3's output at step t is read by Block 4 only at steps > t, so the current student
has reached current_position = t + 1 steps there: row t of the result uses the current student's
states 0..t and, for i > t, only memory (historical students), never the current student's future.
Memory positions that do not exist (shorter sequences, empty cluster positions) get weight 0; the
seed instead repeats the last state, which would count padding as perfect consistency.
`future_weight = 0` is the strict-causal variant, `1` weighs the future like the past.

The seed loops over students and positions in Python; here one einsum builds every (b, m, i)
cosine and two matrix products apply the [L, S] weight matrices, shared by the whole batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


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


def position_weighted_similarity(
    cur: torch.Tensor,
    mem: torch.Tensor,
    mem_valid: torch.Tensor | None = None,
    decay: float = 0.95,
    future_weight: float = 0.0,
) -> torch.Tensor:
    """Similarity [B, L, M] of every current step to every memory sequence.

    cur [B, L, D] states of the current students (row t may use steps <= t: it does),
    mem [M, S, D] states of historical sequences, mem_valid [M, S] bool (True: step exists).
    Rows with no weight at all (e.g. an empty memory sequence) are 0.
    """
    B, L, _ = cur.shape
    M, S, _ = mem.shape
    valid = (
        torch.ones(M, S, dtype=torch.bool, device=mem.device)
        if mem_valid is None
        else mem_valid.to(torch.bool)
    )
    v = valid.to(cur.dtype)
    n = min(L, S)  # steps where both the current student and the memory can have a state
    past, future = position_weights(L, S, decay, future_weight, cur.device, cur.dtype)
    cur_u = F.normalize(cur[:, :n], dim=-1)
    mem_u = F.normalize(mem, dim=-1)
    # [n, B, D] @ [n, D, M] -> [n, B, M]: one cosine per (step, row, memory)
    cos = torch.bmm(cur_u.transpose(0, 1), mem_u[:, :n].permute(1, 2, 0)) * v[:, :n].T.unsqueeze(1)
    num = (past[:, :n] @ cos.reshape(n, B * M)).view(L, B, M)  # decayed past, [L, B, M]
    cons, both = self_consistency(mem, valid, mem_u)
    w_future = both.to(cur.dtype)
    num = num + (future @ (cons * w_future).T).unsqueeze(1)  # future: memory only, [L, M]
    den = (past[:, :n] @ v[:, :n].T + future @ w_future.T).unsqueeze(1)  # [L, 1, M]
    sim = torch.where(den > 0, num / den.clamp(min=torch.finfo(cur.dtype).tiny), 0.0)
    return sim.transpose(0, 1)  # [B, L, M]
