"""SKVMN (Abdelrahman & Wang, SIGIR 2019): sequential key-value memory networks for KT.

# B batch, L steps, M memory slots, Dk key dim, Dv value dim, Df summary dim, H Hop-LSTM dim
    w_t = softmax(k_t M^k^T),  r_t = w_t M^v_t          read before the write of step t
    f_t = tanh(W_f [r_t, k_t])                          [B, L, Df]
    v_t = W_v [f_t, y_t],  y_t = B (q_t, r_t)           write input, [B, L, Dv]
    M^v_t+1 = M^v_t * (1 - w_t e(v_t)^T) + w_t a(v_t)^T   (DKVMN's erase/add)
    u_t = [tri(w_t) >= 0.1] + [tri(w_t) >= 0.6]         identity vector in {0,1,2}^M
    s(t) = the last step j < t with u_j = u_t, else t - 1  (the "hop")
    (h_t, c_t) = LSTMCell(f_t, (h_s(t), c_s(t))),  logit_t = w_p h_t
tri(w) = max(min((w - a) / (b - a), (c - w) / (c - b)), 0), the triangular membership function.
Step t reads q_t, the memory written by the interactions before t, and Hop-LSTM states of steps
before t chosen by the questions at steps <= t (never r_t).
Deviations from pyKT's code (the authors released none that we found):
- pyKT overwrites its hidden state in place (`hx[j,:] = hidden_state[...]` on the tensor it
  stored for step t-1), so step t-1's prediction becomes step s(t)'s and reads q_t; ours keeps
  every step's own output. `hidden_overwrite: true` reproduces pyKT's write (a diagnostic for
  the reproduction study, which reads the future: the causality audit refuses it);
- vectorised over the batch (pyKT loops over batch and time); padded steps write nothing and are
  never hop targets.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import require
from ..data.dataset import Batch, interaction_token
from ..nn import StateBank
from .base import ModelOutput, register
from .dkvmn import DKVMN, DKVMNConfig, MemoryState


@dataclass
class SKVMNConfig(DKVMNConfig):
    """SKVMN sizes; defaults are pyKT's (configs/kt_config.json "skvmn")."""

    d_key: int = 200  # Dk: question embedding and key memory dim (pyKT: dim_s)
    d_value: int = 200  # Dv: interaction embedding and value memory dim (pyKT: dim_s)
    d_summary: int = 200  # Df: summary vector f_t, the Hop-LSTM input (pyKT: dim_s)
    n_slots: int = 50  # M: memory slots (pyKT: size_m)
    dropout: float = 0.2  # dropout on h_t before the output layer
    d_hidden: int = 200  # H: Hop-LSTM hidden size (pyKT: dim_s)
    tri_a: float = 0.075  # triangular membership: 0 at w <= a, rising to 1 at w = b
    tri_b: float = 0.088  # peak of the membership
    tri_c: float = 1.0  # membership falls back to 0 at w = c
    level_low: float = 0.1  # identity 1 from this membership on
    level_high: float = 0.6  # identity 2 from this membership on
    # pyKT's in-place write (docs/baselines.md): step t-1's stored h, and so its prediction,
    # becomes step s(t)'s where step t hops further back. Reads q_t at t-1: a diagnostic only
    hidden_overwrite: bool = False

    PRESETS = {
        "tiny": {"d_key": 8, "d_value": 12, "d_summary": 8, "n_slots": 4, "d_hidden": 8},
        # pyKT configs/kt_config.json "skvmn": dim_s 200, size_m 50, dropout 0.2; triangle
        # (0.075, 0.088, 1.0) and levels (0.1, 0.6) from pyKT's triangular_layer. We could not
        # read the paper's per-dataset sizes: "paper" is pyKT's until they are checked
        "paper": {"d_key": 200, "d_value": 200, "d_summary": 200, "n_slots": 50, "d_hidden": 200},
        "pykt": {"d_key": 200, "d_value": 200, "d_summary": 200, "n_slots": 50, "d_hidden": 200},
    }

    def validate(self) -> None:
        super().validate()
        require(self.d_hidden > 0, f"d_hidden must be > 0, got {self.d_hidden}")
        a, b, c = self.tri_a, self.tri_b, self.tri_c
        require(0 <= a < b < c, f"need 0 <= tri_a < tri_b < tri_c, got {a}, {b}, {c}")
        lo, hi = self.level_low, self.level_high
        require(0 < lo < hi <= 1, f"need 0 < level_low < level_high <= 1, got {lo}, {hi}")
        # DKVMN's options that SKVMN's trunk does not read (its summary splits [read, key] and
        # its write input and Hop-LSTM are built after DKVMN's initializer): refused, not ignored
        require(
            self.key_fc == 0,
            f"key_fc={self.key_fc}: SKVMN summarises the raw question embedding (pyKT's SKVMN "
            "has no key layer); key_fc is DKVMN's option, leave it at 0",
        )
        require(
            self.init_std is None,
            f"init_std={self.init_std}: the DKVMN authors' initializer is DKVMN's; SKVMN's "
            "write input and Hop-LSTM keep torch's initialisation (pyKT's SKVMN draws its "
            "erase/add layers Kaiming-normal: docs/baselines.md), leave it unset",
        )


def identity_vectors(w: torch.Tensor, c: SKVMNConfig) -> torch.Tensor:
    """u_t in {0, 1, 2}^M: the triangular membership of each read weight, in three levels.
    w [B, L, M] -> [B, L, M] (w's dtype)."""
    rise = (w - c.tri_a) / (c.tri_b - c.tri_a)
    fall = (c.tri_c - w) / (c.tri_c - c.tri_b)
    m = torch.minimum(rise, fall).clamp_min(0)
    return (m >= c.level_low).to(w.dtype) + (m >= c.level_high).to(w.dtype)


def hop_sources(u: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """s(t): the last valid step j < t with u_j = u_t, else t - 1 (-1: the initial state).
    u [B, L, M] small integers, mask [B, L] -> [B, L] long."""
    L = u.shape[1]
    u = u.float()  # squared distances of small integers are exact in float32
    sq = (u * u).sum(-1)  # [B, L]
    dist = sq.unsqueeze(2) + sq.unsqueeze(1) - 2 * torch.bmm(u, u.transpose(1, 2))  # [B, L, L]
    steps = torch.arange(L, device=u.device)
    earlier = steps.unsqueeze(1) > steps.unsqueeze(0)  # [L, L]: key j strictly before query t
    same = (dist == 0) & earlier & mask.unsqueeze(1)  # [B, L, L]
    last = torch.where(same, steps, -1).amax(-1)  # [B, L]: -1 where none
    return torch.where(last >= 0, last, steps - 1)


class HopLSTM(nn.Module):
    """An LSTM whose state entering step t is the output of step s(t) (t - 1 without a hop)."""

    def __init__(self, d_in: int, d_hidden: int):
        super().__init__()
        self.cell = nn.LSTMCell(d_in, d_hidden)  # parameters only; the gates are written below
        self.h0 = nn.Parameter(torch.empty(1, d_hidden))
        self.c0 = nn.Parameter(torch.empty(1, d_hidden))
        nn.init.kaiming_normal_(self.h0)  # learned initial state, as pyKT
        nn.init.kaiming_normal_(self.c0)

    def forward(
        self, x: torch.Tensor, source: torch.Tensor, overwrite: bool = False
    ) -> torch.Tensor:
        """x [B, L, Din], source [B, L] (s(t), -1 for the initial state) -> h [B, L, H].

        `overwrite` reproduces pyKT's in-place write: where step t hops further back than t - 1,
        the h stored for step t - 1 (its output, and what later hops to t - 1 read; not its c,
        which pyKT clones first) becomes the hop's h. Each stored h is written at most once, by
        the next step, so the written states go to L fresh bank slots (step j's: L + 2 + j), and
        a hop to j <= t - 2 reads that slot."""
        B, L, _ = x.shape
        cell, H = self.cell, self.cell.hidden_size
        gx = F.linear(x, cell.weight_ih, cell.bias_ih + cell.bias_hh)  # [B, L, 4H], all steps
        src = source.T  # [L, B]
        rows = (src + 1).contiguous()  # [L, B] bank rows read at each step
        if overwrite:
            before = torch.arange(L, device=src.device).view(L, 1) - 1  # t - 1
            hop = src < before  # [L, B]: pyKT writes over step t - 1's stored h
            rows = torch.where(src < before, L + 2 + src, src + 1).contiguous()
        gx_t = gx.unbind(1)  # per-step views (one gradient stack in the backward)
        h0, c0 = self.h0.expand(B, H), self.c0.expand(B, H)
        hc0 = torch.cat([h0, c0], -1)  # [B, 2H]: a slot holds (h, c)
        bank = StateBank(2 * L if overwrite else L, hc0)
        token = bank.store(hc0.new_zeros(()), 0, hc0)
        hs = []
        c = c0
        for t in range(L):
            h_prev, c_prev = bank.load(token, rows[t]).split(H, dim=-1)  # [B, H] each
            if overwrite and t > 0:  # step t - 1's h as pyKT leaves it; its c stays
                hs[t - 1] = torch.where(hop[t].unsqueeze(-1), h_prev, hs[t - 1])
                token = bank.store(token, L + 1 + t, torch.cat([hs[t - 1], c], -1))
            gates = torch.addmm(gx_t[t], h_prev, cell.weight_hh.T)  # [B, 4H]
            i, f, g, o = gates.chunk(4, dim=-1)  # nn.LSTMCell's gate order
            c = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            hs.append(h)
            if t + 1 < L:
                token = bank.store(token, t + 1, torch.cat([h, c], -1))
        return torch.stack(hs, dim=1)  # [B, L, H]


@dataclass
class SequentialState(MemoryState):
    """The SKVMN trunk: DKVMN's summary, the hop sources and the Hop-LSTM states."""

    source: torch.Tensor | None = None  # [B, L] s(t), -1: the initial state
    h: torch.Tensor | None = None  # [B, L, H]


@register("skvmn")
class SKVMN(DKVMN):
    """DKVMN memory written with the summary, read by an LSTM that hops to similar questions."""

    config_cls = SKVMNConfig

    def __init__(self, config: SKVMNConfig):
        super().__init__(config)
        c = config
        self.write_in = nn.Linear(c.d_summary + c.d_value, c.d_value)  # W_v on [f_t, y_t]
        self.hop_lstm = HopLSTM(c.d_summary, c.d_hidden)

    def output_layer(self, c: DKVMNConfig) -> nn.Module:
        return nn.Linear(c.d_hidden, 1)

    def trunk(self, batch: Batch) -> SequentialState:
        c, mem = self.config, self.memory
        k = self.key_emb(batch.q)  # [B, L, Dk]
        y = self.value_emb(interaction_token(batch.q, batch.r, c.num_c))  # [B, L, Dv]
        w = mem.address(k)  # [B, L, M]
        B, L, _ = w.shape
        # the parts of f_t and v_t that do not read the memory, for all steps at once
        w_read, w_key = self.summary.weight.split([c.d_value, c.d_key], dim=1)
        f_key = F.linear(k, w_key, self.summary.bias)  # [B, L, Df]
        v_f, v_y = self.write_in.weight.split([c.d_summary, c.d_value], dim=1)
        v_inter = F.linear(y, v_y, self.write_in.bias)  # [B, L, Dv]
        ww = w * batch.mask.unsqueeze(-1).to(w.dtype)  # padding writes nothing
        # per-step views by unbind (one gradient stack in the backward, not one per step)
        w_t, ww_t, fk_t, vi_t = w.unbind(1), ww.unbind(1), f_key.unbind(1), v_inter.unbind(1)
        mv = mem.initial(B)
        fs = []
        for t in range(L):
            f = torch.tanh(torch.addmm(fk_t[t], mem.read(mv, w_t[t]), w_read.T))  # [B, Df]
            fs.append(f)
            if t + 1 < L:
                e, a = mem.signals(torch.addmm(vi_t[t], f, v_f.T))  # [B, Dv] each
                mv = mem.write(mv, ww_t[t], e, a)
        f = torch.stack(fs, dim=1)  # [B, L, Df]
        with torch.no_grad():
            source = hop_sources(identity_vectors(w, c), batch.mask)  # [B, L]
        h = self.hop_lstm(f, source, c.hidden_overwrite)  # [B, L, H]
        return SequentialState(f=f, k=k, w=w, source=source, h=h)

    def maps(self, s: SequentialState) -> dict[str, torch.Tensor]:
        """Read weights over the slots and the hop of each step, {"hop/h0": [B, 1, L, L]}."""
        B, L = s.source.shape
        hop = s.w.new_zeros(B, L, L + 1).scatter_(2, (s.source + 1).unsqueeze(-1), 1.0)
        return {**super().maps(s), "hop/h0": hop[..., 1:].unsqueeze(1)}  # column 0: h_0

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        s = self.trunk(batch)
        logits = self.out(self.drop(s.h)).squeeze(-1)  # [B, L]
        return ModelOutput(
            logits=logits,
            attention=self.maps(s) if return_attention else None,
            extras={"hop_source": s.source},
        )
