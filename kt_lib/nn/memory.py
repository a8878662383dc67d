"""The key-value memory of DKVMN (Zhang et al. 2017), shared by DKVMN, Deep-IRT and SKVMN.

# B batch, L steps, M memory slots, Dk key dim, Dv value dim, Dw write-input dim
    w_t     = softmax(k_t M^k^T)                          [B, M]   static keys M^k [M, Dk]
    r_t     = w_t M^v_t                                   [B, Dv]  read before the write at t
    e_t     = sigmoid(E v_t), a_t = tanh(A v_t)           [B, Dv]  erase and add signals
    M^v_t+1 = M^v_t * (1 - w_t e_t^T) + w_t a_t^T         [B, M, Dv]
M^v_0 is a learned [M, Dv] matrix, the same for every student. The recurrence over steps is
inherent (each write reads the memory the previous one left); everything that does not depend on
the memory (w, e, a for all steps) is computed before the loop. Padded steps write nothing.
"""

from __future__ import annotations

import torch
from torch import nn


class KeyValueMemory(nn.Module):
    """Static key matrix, per-student value memory written by erase/add, read by key weights."""

    def __init__(self, M: int, d_k: int, d_v: int, d_write: int | None = None):
        super().__init__()
        self.keys = nn.Parameter(torch.empty(M, d_k))  # M^k
        self.init_value = nn.Parameter(torch.empty(M, d_v))  # M^v_0
        # kaiming normal as pyKT (std sqrt(2 / D)); the authors drew N(0, 0.1^2)
        nn.init.kaiming_normal_(self.keys)
        nn.init.kaiming_normal_(self.init_value)
        d_write = d_v if d_write is None else d_write
        self.erase = nn.Linear(d_write, d_v)  # E
        self.add = nn.Linear(d_write, d_v)  # A

    def address(self, k: torch.Tensor) -> torch.Tensor:
        """Read/write weights w = softmax(k M^k^T) over the slots: [..., Dk] -> [..., M]."""
        return torch.softmax(k @ self.keys.T, dim=-1)

    def signals(self, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Erase and add signals of write inputs v: [..., Dw] -> ([..., Dv], [..., Dv])."""
        return torch.sigmoid(self.erase(v)), torch.tanh(self.add(v))

    def initial(self, B: int) -> torch.Tensor:
        """M^v_0 for B students: [B, M, Dv] (an expanded view; writes allocate a new tensor)."""
        return self.init_value.unsqueeze(0).expand(B, -1, -1)

    @staticmethod
    def read(mv: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """r = w M^v: [B, M, Dv], [B, M] -> [B, Dv]."""
        return torch.bmm(w.unsqueeze(1), mv).squeeze(1)

    @staticmethod
    def write(mv: torch.Tensor, w: torch.Tensor, e: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """M^v * (1 - w e^T) + w a^T: [B, M, Dv], [B, M], [B, Dv], [B, Dv] -> [B, M, Dv]."""
        w = w.unsqueeze(-1)  # [B, M, 1]
        return torch.addcmul(w * a.unsqueeze(1), mv, 1 - w * e.unsqueeze(1))

    def read_write(
        self, w: torch.Tensor, e: torch.Tensor, a: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Reads r_t of every step, each taken before the write of step t.

        w [B, L, M], e and a [B, L, Dv], mask [B, L] (False: padding, writes nothing) ->
        r [B, L, Dv]. r_0 reads M^v_0; r_t reads the memory after the writes of steps < t.
        """
        B, L, _ = w.shape
        ww = w if mask is None else w * mask.unsqueeze(-1).to(w.dtype)  # padding writes nothing
        mv = self.initial(B)
        # a list stacked once: writing into a preallocated tensor under autograd would copy the
        # whole buffer's gradient at every step of the backward
        reads = []
        for t in range(L):
            reads.append(self.read(mv, w[:, t]))
            if t + 1 < L:
                mv = self.write(mv, ww[:, t], e[:, t], a[:, t])
        return torch.stack(reads, dim=1)  # [B, L, Dv]
