"""DKVMN (Zhang, Shi, King & Yeung, WWW 2017): dynamic key-value memory networks for KT.

# B batch, L steps, M memory slots, Dk key dim, Dv value dim, Df summary dim
    k_t = A q_t,  v_t = B (q_t, r_t)                      [B, L, Dk], [B, L, Dv]
    w_t = softmax(k_t M^k^T)                              [B, L, M]
    r_t = w_t M^v_t            (memory before the write of step t)
    f_t = tanh(W_f [r_t, k_t])                            [B, L, Df]
        (with key_fc > 0: f_t = tanh(W_f [r_t, tanh(W_k k_t + b_k)]), the authors' code)
    logit_t = w_p f_t
    M^v_t+1 = M^v_t * (1 - w_t e_t^T) + w_t a_t^T,  e_t = sigmoid(E v_t), a_t = tanh(A v_t)
Step t reads q_t and the memory written by the interactions before t (never r_t).
Deviations from the authors' (MXNet) and pyKT's code:
- one `KeyValueMemory` block (kt_lib/nn/memory.py); padded steps write nothing;
- key dim, value dim and summary dim are separate fields (the authors' layout); pyKT ties all
  three to dim_s (its sizes are the `pykt` preset);
- kaiming-normal init of M^k and M^v_0 (pyKT's), dropout on f_t before the output (pyKT's);
  `init_std` draws every weight from N(0, init_std^2) and zeroes the biases instead (the
  authors' MXNet initializer: 0.1 in their main.py);
- the paper summarises [r_t, k_t]; the authors' code first maps k_t through a tanh layer of 50
  (`input_embed_content` in their model.py): `key_fc` = 50 does that, 0 (default) is the paper.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import require
from ..data.dataset import Batch, interaction_token
from ..nn import Dropout
from ..nn.memory import KeyValueMemory
from .base import BaseConfig, KTModel, ModelOutput, register


@dataclass
class DKVMNConfig(BaseConfig):
    """DKVMN sizes; defaults are the authors' ASSIST2009 setting."""

    d_key: int = 50  # Dk: question embedding and key memory dim ("q_embed_dim")
    d_value: int = 200  # Dv: interaction embedding and value memory dim ("qa_embed_dim")
    d_summary: int = 50  # Df: summary vector f_t ("final_fc_dim")
    n_slots: int = 20  # M: memory slots (latent concepts, "memory_size")
    dropout: float = 0.0  # dropout on f_t before the output layer (the authors have none)
    init_std: float | None = None  # None: pyKT's init; a std: the authors' (every weight normal)
    key_fc: int = 0  # 0: f_t reads k_t (the paper); > 0: tanh(W_k k_t + b) of this size (code)

    BINARY = True
    PRESETS = {
        "tiny": {"d_key": 8, "d_value": 12, "d_summary": 8, "n_slots": 4},
        # the authors' code (jennyzhang0215/DKVMN, code/python3/main.py, assist2009_updated):
        # q_embed 50, qa_embed 200, memory 20, final_fc 50 (paper table: s.dim 50, m.size 20)
        "paper": {"d_key": 50, "d_value": 200, "d_summary": 50, "n_slots": 20, "dropout": 0.0},
        # pyKT configs/kt_config.json "dkvmn": dim_s 200 (every dim), size_m 50, dropout 0.2
        "pykt": {"d_key": 200, "d_value": 200, "d_summary": 200, "n_slots": 50, "dropout": 0.2},
    }

    def validate(self) -> None:
        super().validate()
        for name in ("d_key", "d_value", "d_summary", "n_slots"):
            require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        std = self.init_std
        require(std is None or std > 0, f"init_std must be None or > 0, got {std}")
        require(self.key_fc >= 0, f"key_fc must be >= 0 (0: none), got {self.key_fc}")


@dataclass
class MemoryState:
    """What the DKVMN trunk computes before the output layer."""

    f: torch.Tensor  # [B, L, Df] summary of the read and the question
    k: torch.Tensor  # [B, L, Dk] question embedding
    w: torch.Tensor  # [B, L, M] read weights over the slots


@register("dkvmn")
class DKVMN(KTModel):
    """Key-value memory: read with the question, summarise, predict; then write the answer."""

    config_cls = DKVMNConfig
    memory_maps = True  # maps over memory slots beside the step maps

    def __init__(self, config: DKVMNConfig):
        super().__init__(config)
        c = config
        self.key_emb = nn.Embedding(c.num_c, c.d_key)
        self.value_emb = nn.Embedding(c.num_c * c.K, c.d_value)
        self.memory = KeyValueMemory(c.n_slots, c.d_key, c.d_value)
        self.key_fc = nn.Linear(c.d_key, c.key_fc) if c.key_fc else None
        self.summary = nn.Linear(c.d_value + (c.key_fc or c.d_key), c.d_summary)
        self.drop = Dropout(c.dropout)
        self.out = self.output_layer(c)
        if c.init_std is not None:  # the authors' initializer: weights normal, biases zero
            for param in self.parameters():
                if param.dim() > 1:
                    nn.init.normal_(param, 0.0, c.init_std)
                else:
                    nn.init.zeros_(param)

    def output_layer(self, c: DKVMNConfig) -> nn.Module:
        """The layer from f_t to the logit (a subclass may swap it)."""
        return nn.Linear(c.d_summary, 1)

    def trunk(self, batch: Batch) -> MemoryState:
        """Embeddings, memory reads (each before its step's write) and the summary f_t."""
        k = self.key_emb(batch.q)  # [B, L, Dk]
        v = self.value_emb(interaction_token(batch.q, batch.r, self.config.num_c))  # [B, L, Dv]
        w = self.memory.address(k)  # [B, L, M]
        e, a = self.memory.signals(v)  # [B, L, Dv] each
        reads = self.memory.read_write(w, e, a, batch.mask)  # [B, L, Dv]
        kf = k if self.key_fc is None else torch.tanh(self.key_fc(k))  # [B, L, Dk or key_fc]
        f = torch.tanh(self.summary(torch.cat([reads, kf], dim=-1)))  # [B, L, Df]
        return MemoryState(f=f, k=k, w=w)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        s = self.trunk(batch)
        logits = self.out(self.drop(s.f)).squeeze(-1)  # [B, L]
        return ModelOutput(logits=logits, attention=self.maps(s) if return_attention else None)

    def maps(self, s: MemoryState) -> dict[str, torch.Tensor]:
        """The read weights over the memory slots, {"memory/read": [B, L, M]}."""
        return {"memory/read": s.w}
