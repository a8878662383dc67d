"""GKT (Nakagawa, Iwasawa & Matsuo, WI 2019): "Graph-based Knowledge Tracing: Modeling Student
Proficiency Using Graph Neural Network".

# B batch, L steps, C concepts, D hidden dim, E embedding dim
A hidden state per concept, H_t [B, C, D] (the state before step t; H_0 learned), and a concept
graph A [C, C]. With i = q_t and x_t = (q_t, r_t):
  logit_t   = w . H_t[i] + b                                     (prediction, reads q_t)
  H'_j      = [H_t[j], E_x(x_t)] if j = i else [H_t[j], E_c(j)]  (aggregate)
  m_i       = f_self(H'_i)
  m_j       = A[i, j] f_out([H'_i, H'_j]) + A[j, i] f_in([H'_i, H'_j])   (j != i)
  m~_j      = m_j - w_j sigmoid(W_e m_j) * m_j + w_j tanh(W_a m_j)       (erase & add gate)
  H_{t+1}_j = GRU(m~_j, H_t[j]) for j = i and the neighbours of i (A[i, j] or A[j, i] > 0)
f_* are 2-layer ReLU MLPs with batch norm. Step t reads H_t, built from interactions < t, at q_t.
The graph is "dense" (1 / (C - 1) off the diagonal) or "transition" (row-normalised counts of
consecutive concept pairs), built by `prepare` from training students only.
Deviations from pyKT's GKT: aligned (pyKT scores the state after step t against q_{t+1}); H_0 is
learned, not zeros (otherwise logit_0 and never-touched concepts ignore q_t); only the answered
concept and its neighbours are updated (pyKT runs the GRU on every concept); pyKT builds the
transition graph from train and TEST students (gkt_utils.get_gkt_graph: concat(df_train, df_test)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..config import require
from ..data.dataset import Batch, KTDataset, interaction_token
from ..nn.dropout import ReLUDropout
from .base import BaseConfig, KTModel, ModelOutput, register

GRAPHS = ("dense", "transition")


@dataclass
class GKTConfig(BaseConfig):
    """GKT sizes and concept graph."""

    d: int = 32  # hidden state size per concept (pyKT hidden_dim)
    emb: int = 32  # concept and interaction embedding size (pyKT emb_size)
    dropout: float = 0.5  # dropout inside the f_self / f_in / f_out MLPs
    graph: str = "transition"  # "dense" or "transition" (pyKT graph_type)
    # recompute each step in backward (~1/40 of the activation memory, ~1.7x the step on CPU:
    # 1.41 against 0.81 s at B=64, L=36, paper sizes, alternated); None: only for a batch whose
    # activations would pass `checkpoint_gb` (`activation_bytes`), so ASSIST2015's bucketed
    # batches (~2,300 interactions, 100 concepts: 1.3 GB estimated, 0.9 GB peak measured) train
    # without it, Statics2011's 1,223 concepts with it. The numbers are the same either way
    # (the dropout draws are replayed).
    checkpoint: bool | None = None
    checkpoint_gb: float = 2.0
    SAME_NUMBERS = ("checkpoint", "checkpoint_gb")

    BINARY = True
    PRESETS = {
        "tiny": {"d": 8, "emb": 8, "dropout": 0.1},
        # pyKT configs/kt_config.json "gkt" (hidden_dim 32, emb_size 32, dropout 0.5); graph_type
        # "transition" is the default of pyKT's examples/wandb_gkt_train.py
        "paper": {"d": 32, "emb": 32, "dropout": 0.5, "graph": "transition"},
    }

    def validate(self) -> None:
        super().validate()
        require(self.d > 0 and self.emb > 0, f"d and emb must be > 0, got {self.d}, {self.emb}")
        require(self.graph in GRAPHS, f"graph must be one of {GRAPHS}, got {self.graph!r}")
        require(self.checkpoint_gb > 0, f"checkpoint_gb must be > 0, got {self.checkpoint_gb}")
        require(self.num_c >= 2, f"GKT needs at least 2 concepts for a graph, got {self.num_c}")


# floats autograd keeps per (row, step, concept) and unit of d + emb when no step is recomputed
# (measured: 7.5 GB at B=64, L=200, C=100, d = emb = 32)
ACTIVATION_FLOATS = 24


def activation_bytes(B: int, L: int, c: GKTConfig) -> int:
    """The activation memory a training forward of a [B, L] batch keeps without recomputation."""
    return 4 * ACTIVATION_FLOATS * (c.d + c.emb) * B * L * c.num_c


def dense_graph(num_c: int) -> torch.Tensor:
    """Every pair of distinct concepts linked with weight 1 / (C - 1)."""
    return (1 - torch.eye(num_c)) / (num_c - 1)  # [C, C]


def transition_graph(data: KTDataset) -> torch.Tensor:
    """Row-normalised counts of q_s -> q_{s+1} within each student, diagonal zeroed."""
    C = data.num_c
    pairs = [s.q[:-1] * C + s.q[1:] for s in data.students if len(s) > 1]
    flat = np.concatenate(pairs) if pairs else np.zeros(0, dtype=np.int64)
    counts = torch.from_numpy(np.bincount(flat, minlength=C * C).reshape(C, C)).double()
    counts.fill_diagonal_(0)
    rows = counts.sum(1, keepdim=True)
    return torch.where(rows > 0, counts / rows.clamp(min=1), 0.0).float()  # [C, C]


class MaskedBatchNorm(nn.Module):
    """BatchNorm1d whose training statistics come from the valid rows only (padding never
    enters them); as pyKT, fewer than two valid rows pass through unnormalised."""

    def __init__(self, d: int, momentum: float = 0.1, eps: float = 1e-5):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.register_buffer("running_mean", torch.zeros(d))
        self.register_buffer("running_var", torch.ones(d))
        self.track = True  # off while a checkpointed step is recomputed: stats move once

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """x [N, D], valid [N] bool -> [N, D]."""
        if not self.training:
            y = x - self.running_mean  # fresh: the other passes write into it (same values)
            y.mul_(torch.rsqrt(self.running_var + self.eps))
            if torch.is_grad_enabled() and self.weight.requires_grad:
                return y * self.weight + self.bias  # autograd needs y before the product
            return y.mul_(self.weight).add_(self.bias)
        w = valid.to(x.dtype).unsqueeze(-1)  # [N, 1]
        n = w.sum()
        mean = (x * w).sum(0) / n.clamp(min=1)  # [D]
        var = ((x - mean) ** 2 * w).sum(0) / n.clamp(min=1)  # biased, as BatchNorm1d
        enough = n > 1
        if self.track:
            self.update(mean, var, n, enough)
        y = (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias
        if x.device.type == "cpu" and bool(enough):  # no device sync on CPU: skip the select
            return y
        return torch.where(enough, y, x)

    @torch.no_grad()
    def update(
        self, mean: torch.Tensor, var: torch.Tensor, n: torch.Tensor, enough: torch.Tensor
    ) -> None:
        """Running statistics, as BatchNorm1d (unbiased variance, momentum); no host sync: a
        step without two valid rows keeps them."""
        unbiased = (var * n / (n - 1).clamp(min=1)).to(self.running_var.dtype)
        mean = mean.to(self.running_mean.dtype)  # activations may be bf16 under autocast
        for stat, new in ((self.running_mean, mean), (self.running_var, unbiased)):
            stat.copy_(torch.where(enough, stat.lerp(new, self.momentum), stat))


class GraphMLP(nn.Module):
    """pyKT's/the paper's MLP: Linear - ReLU - Dropout - Linear - ReLU - batch norm."""

    def __init__(self, d_in: int, d: int, dropout: float):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, d), nn.Linear(d, d)
        self.drop = ReLUDropout(dropout)  # in place on fc1's fresh output
        self.norm = MaskedBatchNorm(d)
        for fc in (self.fc1, self.fc2):  # the authors' initialisation
            nn.init.xavier_normal_(fc.weight)
            nn.init.constant_(fc.bias, 0.1)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """x [N, d_in], valid [N] bool -> [N, d]."""
        return self.finish(self.fc1(x), valid)

    def pair(self, own: torch.Tensor, other: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """The MLP on [own, other_j] for every j, own [B, n], other [B, C, n] -> [B, C, d],
        without building the [B, C, 2n] concatenation (saved for backward at every step)."""
        n = own.shape[-1]
        w = self.fc1.weight  # [d, 2n]
        # a fresh product (no bias: not a view), saved by no backward, so summed in place
        pre = F.linear(other, w[:, n:])  # [B, C, d]
        pre.add_(F.linear(own, w[:, :n], self.fc1.bias).unsqueeze(1))
        return self.finish(pre, valid)

    def finish(self, pre: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Everything after the first layer's product: pre [..., d], fresh (overwritten: relu and
        dropout in place) -> [..., d]."""
        h = self.drop(pre) if self.training else pre.relu_()
        y = self.fc2(h.flatten(0, -2)).relu_()  # [N, d]: 2-D, so a fresh product, not a view
        return self.norm(y, valid.flatten()).view(pre.shape)


class EraseAddGate(nn.Module):
    """m~_j = m_j - w_j sigmoid(W_e m_j) * m_j + w_j tanh(W_a m_j), one weight w_j per concept."""

    def __init__(self, d: int, num_c: int):
        super().__init__()
        bound = 1 / num_c**0.5
        self.weight = nn.Parameter(torch.empty(num_c).uniform_(-bound, bound))  # [C]
        self.erase, self.add = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, m: torch.Tensor) -> torch.Tensor:
        """m [B, C, D] -> [B, C, D]."""
        w = self.weight.unsqueeze(-1)  # [C, 1]
        if torch.is_grad_enabled():
            return m - w * torch.sigmoid(self.erase(m)) * m + w * torch.tanh(self.add(m))
        # no graph: the same products, in place in the fresh outputs of the two layers
        out = m - torch.sigmoid_(self.erase(m)).mul_(w).mul_(m)
        return out.add_(torch.tanh_(self.add(m)).mul_(w))


@register("gkt")
class GKT(KTModel):
    """Graph-based KT: per-concept GRU states updated over a concept graph."""

    config_cls = GKTConfig
    attends = False  # a recurrence, no attention weights

    @property
    def own_log_in_training_state(self) -> str:  # type: ignore[override]
        """Why the transition graph holds a training student's own log ("" for the dense one)."""
        if self.config.graph != "transition":
            return ""
        return (
            "the transition graph counts the training students' q_t -> q_{t+1} steps (pyKT's "
            "construction), a training student's own included; held-out students never enter it"
        )

    def __init__(self, config: GKTConfig):
        super().__init__(config)
        c = config
        C, D, E = c.num_c, c.d, c.emb
        self.h0 = nn.Parameter(torch.randn(C, D) * 0.1)  # [C, D] initial concept states
        self.emb_x = nn.Embedding(C * c.K, E)  # interaction (q, r)
        self.emb_c = nn.Embedding(C, E)  # concept, for the concepts not answered
        self.f_self = GraphMLP(D + E, D, c.dropout)
        self.f_out = GraphMLP(2 * (D + E), D, c.dropout)  # along A[i, j]: answered i -> j
        self.f_in = GraphMLP(2 * (D + E), D, c.dropout)  # along A[j, i]: j -> answered i
        self.gate = EraseAddGate(D, C)
        self.gru = nn.GRUCell(D, D)
        self.predict = nn.Linear(D, 1)
        # the graph is data-derived state (prepare / extra_state), not a parameter
        dense = c.graph == "dense"
        self.register_buffer("graph", dense_graph(C) if dense else torch.zeros(C, C), False)
        self.graph_ready = dense

    def prepare(self, train: KTDataset) -> None:
        if self.config.graph == "transition":
            self.graph = transition_graph(train).to(self.graph)
            self.graph_ready = True

    def extra_state(self) -> dict[str, torch.Tensor]:
        return {"graph": self.graph.detach().cpu()}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        if "graph" in state:
            self.graph = state["graph"].to(self.graph)
            self.graph_ready = True

    def track_stats(self, on: bool) -> None:
        """Let the batch norms move their running statistics (forward) or not (recomputation)."""
        for m in self.modules():
            if isinstance(m, MaskedBatchNorm):
                m.track = on

    def recompute(self, B: int, L: int) -> bool:
        """Whether a training forward of a [B, L] batch recomputes its steps in backward."""
        c = self.config
        if c.checkpoint is not None:
            return c.checkpoint
        return activation_bytes(B, L, c) > c.checkpoint_gb * 2**30

    def step(
        self, H: torch.Tensor, q: torch.Tensor, r: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """H_{t+1} from H_t [B, C, D] and the interaction (q, r) [B]; rows not valid keep H."""
        B, C, _ = H.shape
        A = self.graph.to(H.dtype)
        is_q = F.one_hot(q, C).bool()  # [B, C]
        b = torch.arange(B, device=H.device)
        x = self.emb_x(interaction_token(q, r, C))  # [B, E]
        # H'_j = [H_j, E_c(j)], then [H_i, E_x(x_t)] written at the answered concept i
        Hp = torch.cat([H, self.emb_c.weight.expand(B, C, -1)], -1)  # [B, C, D+E]
        Hp[b, q, H.shape[-1] :] = x.to(Hp.dtype)  # cat's output: fresh, saved by no backward
        own = Hp[b, q]  # [B, D+E]
        m_self = self.f_self(own, valid)  # [B, D]
        rows = valid.unsqueeze(1).expand(B, C)  # [B, C]
        a_out, a_in = A[q], A[:, q].T  # [B, C]: A[i, j], A[j, i]
        f_out = self.f_out.pair(own, Hp, rows)  # [B, C, D]: f_out([H'_i, H'_j]) for every j
        f_in = self.f_in.pair(own, Hp, rows)
        m_nb = a_out.unsqueeze(-1) * f_out + a_in.unsqueeze(-1) * f_in  # [B, C, D]
        m_nb[b, q] = m_self.to(m_nb.dtype)  # the answered concept's own message (fresh m_nb)
        m = self.gate(m_nb)  # [B, C, D]
        new = self.gru(m.flatten(0, 1), H.flatten(0, 1)).view_as(H)  # [B, C, D]
        touched = (is_q | (a_out > 0) | (a_in > 0)) & valid.unsqueeze(1)  # [B, C]
        return torch.where(touched.unsqueeze(-1), new, H)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        if not self.graph_ready:
            raise RuntimeError("GKT's transition graph is built by prepare(train): call it first")
        q, r, mask = batch.q, batch.r, batch.mask
        B, L = q.shape
        rows = torch.arange(B, device=q.device)
        H = self.h0.unsqueeze(0).expand(B, -1, -1)  # [B, C, D]
        ckpt = self.training and torch.is_grad_enabled() and self.recompute(B, L)
        read = []
        self.track_stats(True)
        try:
            for t in range(L):
                read.append(H[rows, q[:, t]])  # [B, D]: state from interactions < t, at q_t
                if t + 1 == L:  # the last interaction is never read
                    break
                args = (H, q[:, t], r[:, t], mask[:, t])
                H = checkpoint(self.step, *args, use_reentrant=False) if ckpt else self.step(*args)
        finally:  # backward's recomputation of a step must not move the running statistics
            self.track_stats(False)
        logits = self.predict(torch.stack(read, 1)).squeeze(-1)  # [B, L]
        return ModelOutput(logits=logits, attention={} if return_attention else None)
