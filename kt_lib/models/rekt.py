"""ReKT (Shen, Li, Hu, Liu, Jiang, Gao & Tong, ACM MM 2024): "Revisiting Knowledge Tracing: A
Simple and Powerful Model". Question, concept and domain knowledge states, each carried by the
Forget-Response-Update (FRU) unit.

# B batch, L steps, D state dim, G the largest distinct gap (`max_gap`)
    E_t = Q[pid_t] + C[q_t] + diff[pid_t] * V[q_t]      question embedding (Rasch-style)  [B, L, D]
    X_t = E_t + R[r_t]                                  interaction embedding             [B, L, D]
    Z^k_prev: the state of kind k (problem pid_t, concept q_t) after the last step s < t that
              answered the same item, or the learned initial state z0^k; the domain state is
              the state after step t - 1 (z0^d at t = 0)
    gap:      T[min(t - s, G)], T[0] when the item has no earlier step; the domain's gap is T[1]
    Forget:   F^k_t = Z^k_prev * sig(W_f^k [Z^k_prev, gap] + b_f^k)                 k in {p, c, d}
    Response: logit_t = MLP([F^d_t, F^p_t, F^c_t, E_t])
    Update:   Z^k_t = F^k_t + tanh(W_u^k [F^k_t, X_t] + b_u^k)
Step t reads pid_t and q_t (E_t, which states to read) and, through the states, (pid, q, r) at
steps < t; r_t enters X_t, which only the update after the prediction reads.
Deviations from pyKT's `rekt` (the authors' code):
- any window length: gaps beyond G share row T[G] (pyKT sizes T to 200 and its state tables to
  199 steps, so a window longer than 200 fails).
- an item not yet answered in the window reads z0^k with its own gap row T[0]; pyKT reads slot
  0 of its state table, which step 0 has overwritten: every new item starts from the state the
  window's first item reached (and 198 of the 199 learned state rows are never read).
- aligned and complete: pyKT predicts r_{t+1} from steps 1..t and never reads step 0 of a window.
- padded steps neither update nor count as attempts (pyKT relies on right padding).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import require
from ..data.dataset import Batch
from ..nn import Dropout, StateBank, mlp_head
from .base import BaseConfig, KTModel, ModelOutput, register


@dataclass
class ReKTConfig(BaseConfig):
    """ReKT sizes."""

    d: int = 128  # embedding and state size (pyKT: d)
    dropout: float = 0.4  # on the inputs of every forget, update and output layer (pyKT's one)
    max_gap: int = 199  # G: steps since the item's last attempt; longer gaps share row G

    BINARY = True
    PRESETS = {
        "tiny": {"d": 16, "max_gap": 6},
        # pyKT's examples/wandb_rekt_train.py defaults (kt_config.json has no rekt entry):
        # d 128, dropout 0.4 (learning rate 0.002); G 199: pyKT's 200 gap rows
        "paper": {"d": 128, "dropout": 0.4, "max_gap": 199},
    }

    def validate(self) -> None:
        super().validate()
        require(self.d > 0, f"d must be > 0, got {self.d}")
        g = self.max_gap
        require(g >= 1, f"max_gap must be >= 1 (the domain state's gap is 1), got {g}")


def previous_attempt(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, L] the last valid step s < t with ids[s] == ids[t], -1 where there is none (and at
    padded steps, which match nothing)."""
    B, L = ids.shape
    pos = torch.arange(L, device=ids.device).expand(B, L)
    key = torch.where(mask, ids, -1 - pos)  # padded steps get keys no other step has
    key, order = torch.sort(key, dim=1, stable=True)  # equal ids adjacent, in step order
    prev = torch.where(key[:, 1:] == key[:, :-1], order[:, :-1], -1)  # [B, L-1]
    return torch.full_like(ids, -1).scatter(1, order[:, 1:], prev)


class FRU(nn.Module):
    """The Forget-Response-Update unit of one state kind: a forget gate and an update layer."""

    def __init__(self, d: int, drop: Dropout):
        super().__init__()
        self.w_forget = nn.Linear(2 * d, d)  # W_f, b_f
        self.w_update = nn.Linear(2 * d, d)  # W_u, b_u
        self.drop = drop

    def forget(self, z: torch.Tensor, gap: torch.Tensor) -> torch.Tensor:
        """F = Z * sig(W_f [Z, gap] + b_f), [B, D]."""
        return z * torch.sigmoid(self.w_forget(self.drop(torch.cat([z, gap], -1))))

    def update(self, f: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Z = F + tanh(W_u [F, X] + b_u), [B, D]."""
        return f + torch.tanh(self.w_update(self.drop(torch.cat([f, x], -1))))


@register("rekt")
class ReKT(KTModel):
    """Problem, concept and domain states through forget-response-update units."""

    config_cls = ReKTConfig
    attends = False  # a recurrence, no attention weights
    needs = frozenset({"pid"})

    def __init__(self, config: ReKTConfig):
        super().__init__(config)
        c = config
        d = c.d

        def table(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.rand(*shape))  # U(0, 1), the authors' initialisation

        self.pro = table(c.num_pid, d)  # Q
        self.skill = table(c.num_c, d)  # C
        self.diff = table(c.num_pid, 1)  # diff: a scalar per problem
        self.change = table(c.num_c, d)  # V: the concept's variation direction
        self.answer = table(2, d)  # R
        self.gap = table(c.max_gap + 1, d)  # T: row 0 = no earlier attempt in the window
        self.z0 = table(3, d)  # initial problem, concept and domain states
        self.drop = Dropout(c.dropout)
        self.fru = nn.ModuleList(FRU(d, self.drop) for _ in range(3))  # problem, concept, domain
        self.out = mlp_head(4 * d, (d,), c.dropout)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        c = self.config
        pid, q, m = batch.pid, batch.q, batch.mask
        B, L = q.shape
        e = self.pro[pid] + self.skill[q] + self.diff[pid] * self.change[q]  # E [B, L, D]
        x = (e + self.answer[batch.r]).unbind(1)  # L x [B, D]
        steps = torch.arange(L, device=q.device)
        slots, gaps = [], []
        for ids in (pid, q):
            prev = previous_attempt(ids, m)  # [B, L]
            row = torch.where(prev < 0, 0, (steps - prev).clamp(max=c.max_gap))
            slots.append((prev + 1).unbind(1))  # L x [B]: the bank slot each student reads
            gaps.append(self.gap[row].unbind(1))  # L x [B, D]
        # the problem and concept states: slot 0 the initial state, slot s + 1 the state after
        # step s; a step reads the slot its student's last attempt at the same item wrote
        banks, tokens = [], []
        for k in (0, 1):
            z0 = self.z0[k].expand(B, -1)  # [B, D]
            banks.append(StateBank(L, z0))
            tokens.append(banks[k].store(z0.new_zeros(()), 0, z0))
        z_dom = self.z0[2].expand(B, -1)  # [B, D]
        one = self.gap[1].expand(B, -1)  # the domain state is always one step old
        fp, fc, fd = self.fru
        reads = []
        for t in range(L):
            f_pro = fp.forget(banks[0].load(tokens[0], slots[0][t]), gaps[0][t])  # [B, D]
            f_con = fc.forget(banks[1].load(tokens[1], slots[1][t]), gaps[1][t])
            f_dom = fd.forget(z_dom, one)
            reads.append(torch.cat([f_dom, f_pro, f_con], -1))  # [B, 3D]
            tokens[0] = banks[0].store(tokens[0], t + 1, fp.update(f_pro, x[t]))
            tokens[1] = banks[1].store(tokens[1], t + 1, fc.update(f_con, x[t]))
            z_dom = torch.where(m[:, t, None], fd.update(f_dom, x[t]), z_dom)
        h = torch.cat([torch.stack(reads, 1), e], -1)  # [B, L, 4D]
        logits = self.out(self.drop(h)).squeeze(-1)  # [B, L]
        return ModelOutput(logits=logits, attention={} if return_attention else None)
