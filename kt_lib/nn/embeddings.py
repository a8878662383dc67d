"""AKT's Rasch-model embeddings of questions (x) and interactions (y).

# B batch, L steps, D model dim, C concepts, P problems, K response categories
With problem ids (AKT paper section 3.4):
    x = c_q + mu_pid * d_q
    y = (c_q + g_r) + mu_pid * (f_r + d_q)
where c_q, d_q are concept embeddings, g_r, f_r response embeddings (K rows, so ordinal data
works too) and mu_pid a scalar difficulty per problem, initialised at 0 and kept small by an L2
penalty. Without problem ids: x = c_q, y = c_q + g_r (AKT's plain concept embeddings).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class RaschEmbedded:
    """Embedded batch."""

    x: torch.Tensor  # [B, L, D] question embedding
    y: torch.Tensor  # [B, L, D] interaction embedding
    mu: torch.Tensor | None  # [B, L] problem difficulty scalar, None without problem ids


class RaschEmbedding(nn.Module):
    """Question/interaction embeddings with AKT's Rasch difficulty (plain when num_pid == 0)."""

    def __init__(self, num_c: int, d: int, num_pid: int = 0, K: int = 2):
        super().__init__()
        self.num_pid = num_pid
        self.c = nn.Embedding(num_c, d)  # c_q concept embedding
        self.g = nn.Embedding(K, d)  # g_r response embedding
        if num_pid > 0:
            self.mu = nn.Embedding(num_pid, 1)  # mu_pid difficulty scalar
            self.d_q = nn.Embedding(num_c, d)  # d_q concept variation vector
            self.f = nn.Embedding(K, d)  # f_r response variation vector
            nn.init.zeros_(self.mu.weight)  # AKT starts every problem at its concept

    def forward(
        self, q: torch.Tensor, r: torch.Tensor, pid: torch.Tensor | None = None
    ) -> RaschEmbedded:
        """q, r, pid [B, L] long -> x, y [B, L, D]; pid is ignored when the model has none."""
        c = self.c(q)
        x, y = c, c + self.g(r)
        if self.num_pid == 0 or pid is None:
            return RaschEmbedded(x, y, None)
        mu = self.mu(pid)  # [B, L, 1]
        dq = self.d_q(q)
        return RaschEmbedded(x + mu * dq, y + mu * (self.f(r) + dq), mu.squeeze(-1))

    @staticmethod
    def l2_penalty(
        mu: torch.Tensor | None, mask: torch.Tensor, weight: float
    ) -> torch.Tensor | None:
        """weight * mean of mu^2 over valid positions (None without problem ids).

        AKT adds weight * sum(mu^2) to a *summed* BCE; dividing both by the number of valid
        positions keeps AKT's ratio with the mean BCE used here.
        """
        if mu is None:
            return None
        n = mask.sum().clamp(min=1)
        return weight * (mu.pow(2) * mask).sum() / n


class QuestionEmbedding(nn.Module):
    """x = c_q (+ mu_pid * d_q), y = c_q + g_r: the problem term enters x only (simpleKT,
    stableKT)."""

    def __init__(self, num_c: int, d: int, num_pid: int, K: int, vector_difficulty: bool):
        super().__init__()
        self.c = nn.Embedding(num_c, d)  # c_q concept embedding
        self.g = nn.Embedding(K, d)  # g_r response embedding
        self.mu = None
        if num_pid > 0:
            self.mu = nn.Embedding(num_pid, d if vector_difficulty else 1)  # problem difficulty
            self.d_q = nn.Embedding(num_c, d)  # d_q concept variation vector
            nn.init.zeros_(self.mu.weight)  # every problem starts at its concept

    def forward(
        self, q: torch.Tensor, r: torch.Tensor, pid: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q, r, pid [B, L] -> x, y [B, L, D]; pid is ignored when the model has none."""
        c = self.c(q)
        y = c + self.g(r)
        if self.mu is None or pid is None:
            return c, y
        return c + self.mu(pid) * self.d_q(q), y
