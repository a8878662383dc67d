"""The causality auditor (kt_lib.audit): leaks it must catch, in eval and training mode."""

from __future__ import annotations

import pytest
import torch

from kt_lib.audit import audit_causality, random_batch
from kt_lib.models.base import BaseConfig, KTModel, ModelOutput


class _LeakyToy(KTModel):
    """Reads the current response: the auditor must catch it."""

    config_cls = BaseConfig

    def __init__(self, config, lag: int = 0):
        super().__init__(config)
        self.lag = lag
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, batch, return_attention=False):
        r = batch.r.float()
        if self.lag:  # peeks `lag` steps ahead
            r = torch.cat([r[:, self.lag :], torch.zeros_like(r[:, : self.lag])], 1)
        return ModelOutput(logits=self.w * r)


class _TrainOnlyLeak(_LeakyToy):
    """Reads the next response only in training mode, under dropout."""

    def forward(self, batch, return_attention=False):
        if not self.training:
            return ModelOutput(logits=self.w * 0 * batch.r.float())
        nxt = torch.nn.functional.pad(batch.r.float(), (0, 1))[:, 1:]
        return ModelOutput(logits=torch.nn.functional.dropout(self.w * nxt, 0.5))


class _TinyLeak(_LeakyToy):
    """Lets the next response move the logit by 1e-8: below the default tolerance."""

    def forward(self, batch, return_attention=False):
        nxt = torch.nn.functional.pad(batch.r.to(self.w.dtype), (0, 1))[:, 1:]
        return ModelOutput(logits=self.w * 1e-8 * nxt)


def test_auditor_catches_training_only_and_tiny_leaks():
    batch = random_batch(5, B=3, L=10, seed=0)
    train_leak = _TrainOnlyLeak(BaseConfig(num_c=5))
    assert audit_causality(train_leak, batch)  # invisible in eval mode
    assert not audit_causality(train_leak, batch, mode="train")  # same draws: the leak shows
    tiny = _TinyLeak(BaseConfig(num_c=5)).double()
    assert audit_causality(tiny, batch)  # below the default atol
    assert not audit_causality(tiny, batch, atol=1e-10)
    with pytest.raises(ValueError, match="mode"):
        audit_causality(tiny, batch, mode="test")


@pytest.mark.parametrize("lag", [0, 1, 5])
def test_auditor_catches_leaky_toy(lag):
    model = _LeakyToy(BaseConfig(num_c=5), lag)
    result = audit_causality(model, random_batch(5, L=12), steps=list(range(12)))
    assert not result and result.max_diff > 0.5


def test_auditor_catches_question_leak():
    class PeekNextQuestion(_LeakyToy):
        def forward(self, batch, return_attention=False):
            q = torch.cat([batch.q[:, 1:], batch.q[:, :1]], 1).float()
            return ModelOutput(logits=self.w * q)

    assert not audit_causality(PeekNextQuestion(BaseConfig(num_c=50)), random_batch(50, L=10))


class _ShiftedToy(KTModel):
    """Scores step t from q_{t-1} (pred[:, t] meant for r[:, t+1]): causal, but misaligned."""

    def __init__(self, config):
        super().__init__(config)
        self.emb = torch.nn.Embedding(config.num_c, 1)

    def forward(self, batch, return_attention=False):
        prev = torch.cat([torch.zeros_like(batch.q[:, :1]), batch.q[:, :-1]], 1)
        return ModelOutput(logits=self.emb(prev).squeeze(-1))


def test_alignment_audit_catches_a_model_that_ignores_q_t():
    from kt_lib.audit import audit_alignment

    batch = random_batch(5, B=3, L=12, seed=2)
    shifted = _ShiftedToy(BaseConfig(num_c=5))
    assert audit_causality(shifted, batch)  # causal ...
    result = audit_alignment(shifted, batch, steps=[0, 3, 11])
    assert not result and result.unmoved == [0, 3, 11], str(result)  # ... yet misaligned
    q_now = _ShiftedToy(BaseConfig(num_c=5))
    q_now.forward = lambda b, return_attention=False: ModelOutput(q_now.emb(b.q).squeeze(-1))
    late = audit_alignment(q_now, batch, steps=[0, 3, 11])  # reads no response at all
    assert not late and late.unmoved == [] and late.unread == [3, 11], str(late)
    q_now.reads_responses = False  # an item-only model says so
    assert audit_alignment(q_now, batch, steps=[0, 3, 11])


def _history(r: torch.Tensor, lag: int) -> torch.Tensor:
    """r shifted right by `lag` (r[:, t - lag] at t, zeros before)."""
    return torch.nn.functional.pad(r.float(), (lag, 0))[:, : r.shape[1]]


def test_alignment_audit_catches_a_model_one_response_late():
    """Reading q_t and the responses up to t-2 is causal but one step late: the audit flips
    r_{t-1} alone and the prediction at t must move."""
    from kt_lib.audit import audit_alignment

    batch = random_batch(5, B=3, L=12, seed=2)
    for lag, ok in ((1, True), (2, False)):
        model = _ShiftedToy(BaseConfig(num_c=5))
        model.forward = lambda b, return_attention=False, m=model, lag=lag: ModelOutput(
            m.emb(b.q).squeeze(-1) + _history(b.r, lag).cumsum(1)
        )
        assert audit_causality(model, batch)
        assert bool(audit_alignment(model, batch, steps=[0, 3, 11])) is ok


def test_auditor_catches_leaks_hidden_by_nan_length_grad_or_a_single_cell():
    """Four ways a leak slipped past: a prediction that turns NaN when the next response is 0;
    a prediction that reads how many steps the log still has; a leak on a path that only runs
    with gradients on (checkpointing); and one confined to the last step of one row (a random
    redraw left that cell unchanged half the time)."""
    batch = random_batch(5, B=3, L=10, seed=0)

    class NanLeak(_LeakyToy):
        def forward(self, batch, return_attention=False):
            nxt = torch.nn.functional.pad(batch.r.float(), (0, 1))[:, 1:]
            return ModelOutput(logits=self.w * 0 * batch.r + torch.log(nxt * 0 + nxt - 0.5))

    class LengthLeak(_LeakyToy):
        def forward(self, batch, return_attention=False):
            left = batch.mask.sum(1, keepdim=True) - torch.arange(batch.q.shape[1])
            return ModelOutput(logits=self.w * left.float())

    class GradOnlyLeak(_LeakyToy):
        def forward(self, batch, return_attention=False):
            nxt = torch.nn.functional.pad(batch.r.float(), (0, 1))[:, 1:]
            return ModelOutput(logits=self.w * (nxt if torch.is_grad_enabled() else 0 * nxt))

    class OneCellLeak(_LeakyToy):
        def forward(self, batch, return_attention=False):
            logits = self.w * torch.zeros_like(batch.r, dtype=torch.float)
            logits[0, 0] = logits[0, 0] + batch.r[0, -1]  # step 0 of row 0 reads its last answer
            return ModelOutput(logits=logits)

    for toy in (NanLeak, LengthLeak, OneCellLeak):
        assert not audit_causality(toy(BaseConfig(num_c=5)), batch, steps=[0], trials=1), toy
    grad = GradOnlyLeak(BaseConfig(num_c=5))
    assert audit_causality(grad, batch) and not audit_causality(grad, batch, mode="train")


def test_the_audit_leaves_the_models_buffers_as_it_found_them():
    """Training-mode passes update batch-norm statistics; the audit puts them back."""

    class Normed(_LeakyToy):
        def __init__(self, config):
            super().__init__(config)
            self.bn = torch.nn.BatchNorm1d(1)

        def forward(self, batch, return_attention=False):
            x = self.bn(batch.q.float().reshape(-1, 1)).reshape(batch.q.shape)
            return ModelOutput(logits=x)

    model = Normed(BaseConfig(num_c=5)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    audit_causality(model, random_batch(5, B=3, L=10, seed=0), mode="train")
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before) and not model.training


def test_a_batch_mixing_bank_folds_is_audited_one_fold_at_a_time(monkeypatch):
    """Per-fold banks (SimAKT): student A's perturbed future moves the bank that a student of
    another fold reads (collaborative information, not a leak); the audit compares each fold's
    rows on their own, and still catches a student reading its own log."""
    from kt_lib.audit import fold_parts
    from kt_lib.models.simakt import bank_rebuilder
    from tests.simakt_support import batch_of, dual, simakt, students

    train = students()
    model = simakt(dual(1.0), train)
    rebuild = bank_rebuilder(train)
    batch = batch_of(train, range(8))
    folds = model.bank_folds(batch)
    assert folds.unique().numel() == 2  # the batch mixes the two folds
    parts = fold_parts(model, batch)
    assert sorted(len(p.q) for p in parts) == sorted(int((folds == f).sum()) for f in (0, 1))
    assert all(model.bank_folds(p).unique().numel() == 1 for p in parts)
    assert audit_causality(model, batch, steps=[2, 8], trials=1, rebuild=rebuild)
    # the whole mixed batch at once reports the false leak this guards against
    monkeypatch.setattr(model, "bank_folds", lambda b: None)
    assert not audit_causality(model, batch, steps=[2, 8], trials=1, rebuild=rebuild)


def test_the_same_infinity_in_both_passes_is_no_move():
    """A model whose prediction is +inf at a step whatever the future (a saturated logit) did not
    move there; one that turns NaN only when the future changes did (the NaN toy above)."""

    class Saturated(_LeakyToy):
        def forward(self, batch, return_attention=False):
            logits = self.w * torch.zeros_like(batch.r, dtype=torch.float)
            logits[:, 0] = float("inf")
            return ModelOutput(logits=logits)

    batch = random_batch(5, B=3, L=10, seed=0)
    assert audit_causality(Saturated(BaseConfig(num_c=5)), batch)
