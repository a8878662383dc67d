"""kt_lib.heads.inter.seed_adapter: a module written to seed 000's interface runs as a head."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from kt_lib.audit import audit_causality
from kt_lib.heads.simakt_config import load_simakt_config, refuse_untrusted_config
from kt_lib.models.simakt import bank_rebuilder
from tests.simakt_support import batch_of, one_fold_batch, simakt, students


class SeedStyleMemory(nn.Module):
    """Written as seed 000 writes its modules: own projections, a bank, forward(hq, hs)."""

    def __init__(self, d_model, d_head, temperature=0.5, **config):
        super().__init__()
        self.d_model, self.d_head, self.config = d_model, d_head, config
        self.temperature = temperature
        self.w_q = nn.Linear(d_model, d_head, bias=False)
        self.w_k = nn.Linear(d_model, d_head, bias=False)
        self.w_v = nn.Linear(d_model, d_head, bias=False)
        self.register_buffer("memory", torch.zeros(config.get("memory_size", 200), d_model))

    def build_memory_bank(self, historical_trajectories, save_path=None):
        self.memory = historical_trajectories.clone()

    def compute_similarity(self, query_states, memory_bank):
        return torch.softmax(query_states @ self.w_k(memory_bank).T / self.temperature, dim=-1)

    def forward(self, hq, hs):
        # the mean over the whole sequence reads later steps: not causal by itself
        query = self.w_q(hq + hs.mean(1, keepdim=True))
        return self.compute_similarity(query, self.memory) @ self.w_v(self.memory)


class ClaimsCausal(SeedStyleMemory):
    causal = True  # a false claim: forward reads the whole sequence


def config(cls: type = SeedStyleMemory, **params) -> dict:
    path = f"{__name__}.{cls.__name__}"
    head = {"type": "custom", "module_path": path, "params": {"memory_size": 6, **params}}
    return {"inter_heads": [head], "memory": {"kmeans_n_init": 1}}


def test_a_seed_style_module_runs_causally_with_per_fold_banks():
    train = students(n=30)
    model = simakt(config(temperature=0.25), train)
    head = model.inter.heads[0]
    assert type(head.module) is SeedStyleMemory and head.module.temperature == 0.25
    assert head.module.config == {"memory_size": 6}  # the seed's **config
    banks = head._fold_memory
    assert len(banks) == 2 and not torch.equal(banks[0]["memory"], banks[1]["memory"])
    # each fold's memory holds students of the other folds only
    for f, bank in enumerate(head.banks):
        assert (model.folds.fold_of(bank.uids) != f).all()
    batch = batch_of(train, range(6))
    assert audit_causality(model, batch, steps=[1, 5, 10], trials=1)
    rebuild = bank_rebuilder(train)
    fold_batch = one_fold_batch(model, train, n=4)
    assert audit_causality(model, fold_batch, steps=[2, 8], trials=1, rebuild=rebuild)
    out = model(batch).logits
    out.sum().backward()  # gradients reach the seed module's projections
    assert head.module.w_q.weight.grad is not None


def test_the_adapter_is_what_makes_it_causal():
    train = students(n=30)
    model = simakt(config(ClaimsCausal), train)  # called once on the whole sequence
    assert not audit_causality(model, batch_of(train, range(6)), steps=[1, 5], trials=1)


def test_seed_modules_follow_the_trust_rule_and_their_params_are_checked():
    data = config()
    with pytest.raises(PermissionError, match="SeedStyleMemory"):
        refuse_untrusted_config(data, "run.json", trust_code=False)
    refuse_untrusted_config(data, "run.json", trust_code=True)
    with pytest.raises(ValueError, match="unknown field"):
        load_simakt_config(config(temprature=0.3))
    linear = {"inter_heads": [{"type": "custom", "module_path": "torch.nn.Linear"}]}
    with pytest.raises(ValueError, match="or have seed 000's module interface"):
        load_simakt_config(linear)  # an nn.Module without the seed's methods
