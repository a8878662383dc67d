"""Core behaviour: masks, attention, the auditor itself, SAKT's seed interface, training."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from kt_lib.audit import audit_causality, random_batch
from kt_lib.data.dataset import Batch
from kt_lib.models import build_model
from kt_lib.models.base import BaseConfig, KTModel, ModelOutput
from kt_lib.models.sakt import SAKT
from kt_lib.nn import MultiHeadAttention, attend, causal_mask
from kt_lib.train import fit
from tests.conftest import make_tiny_dataset


def test_masks():
    inc, strict = causal_mask(4), causal_mask(4, strict=True)
    assert inc.tolist()[1] == [True, True, False, False]
    assert strict.tolist()[1] == [True, False, False, False]
    assert not strict[0].any()


@pytest.mark.parametrize("need_weights", [True, False])
def test_attend_empty_rows_are_zero_and_masked_keys_get_no_weight(need_weights):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4) for _ in range(3))
    out, w = attend(q, k, v, causal_mask(5, strict=True), need_weights=need_weights)
    assert torch.isfinite(out).all() and out[:, :, 0].abs().max() == 0
    if need_weights:
        assert w[..., 0, :].abs().max() == 0
        assert torch.triu(w[0, 0], diagonal=0).abs().max() == 0  # no weight on j >= i
        assert torch.allclose(w[:, :, 1:].sum(-1), torch.ones(2, 3, 4))


def test_attention_paths_agree():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(3, 6, 8)
    a, _ = mha(x, x, x, causal_mask(6), need_weights=False)
    b, w = mha(x, x, x, causal_mask(6), need_weights=True)
    assert torch.allclose(a, b, atol=1e-6) and w.shape == (3, 2, 6, 6)


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


def test_sakt_seed_interface_example_and_validation():
    torch.manual_seed(0)
    model = SAKT(number_questions=100, d=256, num_heads=8, dropout=0.1).eval()
    prob = model(torch.tensor([[1, 2, 3]]), torch.tensor([[1, 0, 1]]), torch.tensor([[4]]))
    assert prob.shape == (1, 1, 1) and 0 < prob.item() < 1
    bad = [
        (([[1, 2]], [[1, 0, 1]], [[4]]), "same shape"),
        (([[1, 200, 3]], [[1, 0, 1]], [[4]]), r"q\[0, 1\] = 200 is outside \[0, 99\]"),
        (([[1, 2, 3]], [[1, 0, 1]], [[-1]]), r"qry\[0, 0\] = -1"),
        (([[1, 2, 3]], [[1, 2, 1]], [[4]]), r"r\[0, 1\] = 2 is outside \{0, 1\}"),
    ]
    for (q, r, qry), msg in bad:
        with pytest.raises(ValueError, match=msg):
            model(torch.tensor(q), torch.tensor(r), torch.tensor(qry))
    with pytest.raises(ValueError, match="max_seq_len"):
        long = torch.zeros(1, 201, dtype=torch.long)
        model(long, long, long[:, :1])
    with pytest.raises(ValueError, match="integer"):
        model(torch.zeros(1, 3), torch.zeros(1, 3).long(), torch.zeros(1, 1).long())


def test_sakt_seed_interface_shares_registry_weights():
    torch.manual_seed(0)
    reg = build_model("sakt", preset="tiny", num_c=10).eval()
    public = SAKT.from_model(reg).eval()
    b = random_batch(10, B=3, L=8, ragged=False)
    # registry logits at t (reads < t) == public query at t+1 over history [0..t]
    with torch.no_grad():
        want = torch.sigmoid(reg(b).logits[:, 1:])
        got = public(b.q[:, :-1], b.r[:, :-1], b.q[:, 1:]).squeeze(-1)
    assert torch.allclose(want, got, atol=1e-6)


def test_sakt_public_is_causal_over_history():
    torch.manual_seed(0)
    model = SAKT(20, d=16, num_heads=2).eval()
    q, r = torch.randint(0, 20, (2, 10)), torch.randint(0, 2, (2, 10))
    base = model(q, r, q)
    r2 = r.clone()
    r2[:, 6:] = 1 - r2[:, 6:]
    assert torch.equal(model(q, r2, q)[:, :6], base[:, :6])


def test_fit_is_deterministic_and_resumes(tmp_path):
    train, valid = make_tiny_dataset(n=30, seed=0), make_tiny_dataset(n=10, seed=1)

    def run(**kw):
        torch.manual_seed(0)
        model = build_model("sakt", preset="tiny", dataset=train)
        return fit(model, train, valid, epochs=3, max_len=16, progress=False, patience=9, **kw)

    a, b = run(), run()
    cols = [c for c in a.history.columns if "seconds" not in c]
    assert np.array_equal(a.history[cols].values, b.history[cols].values)
    # stop after 2 epochs, then resume to 3: same history as the straight run
    straight = a.history[cols].values
    torch.manual_seed(0)
    model = build_model("sakt", preset="tiny", dataset=train)
    fit(
        model,
        train,
        valid,
        epochs=2,
        max_len=16,
        progress=False,
        patience=9,
        checkpoint=str(tmp_path / "r"),
    )
    torch.manual_seed(0)
    model = build_model("sakt", preset="tiny", dataset=train)
    resumed = fit(
        model,
        train,
        valid,
        epochs=3,
        max_len=16,
        progress=False,
        patience=9,
        checkpoint=str(tmp_path / "r"),
        resume=True,
    )
    assert np.allclose(resumed.history[cols].values, straight, atol=1e-6)


def test_dkt_learns_on_a_learnable_signal():
    rng = np.random.default_rng(0)
    from kt_lib.data.dataset import KTDataset, StudentSeq

    def make(n, off):
        studs = []
        for i in range(n):
            q = rng.integers(0, 4, 40)
            r = (q % 2).astype(np.int64)  # skill parity decides the answer
            studs.append(StudentSeq(off + i, q, r))
        return KTDataset(studs, num_c=4)

    torch.manual_seed(0)
    model = build_model("dkt", preset="tiny", num_c=4)
    res = fit(model, make(40, 0), make(10, 100), epochs=5, lr=1e-2, progress=False)
    assert res.best_metric > 0.95


def test_batch_to_and_clone_are_independent():
    b = random_batch(5, B=2, L=4)
    c = b.clone()
    c.r[:] = 1
    assert not torch.equal(b.r, c.r)
    assert isinstance(b.to("cpu"), Batch)


def test_sakt_seed_example_reads_the_whole_history():
    torch.manual_seed(0)
    model = SAKT(10, d=16, num_heads=2).eval()
    q, qry = torch.tensor([[1, 2, 3]]), torch.tensor([[4]])
    probs = {model(q, torch.tensor([r]), qry).item() for r in ([1, 0, 1], [0, 0, 1], [1, 1, 1])}
    assert len(probs) == 3  # every past response moves the prediction for qry=[4]


@pytest.mark.parametrize("mask_kind", ["none", "strict", "batch", "long"])
def test_training_attention_dropout_matches_plain_autograd(mask_kind, monkeypatch):
    """The fused softmax-dropout attention (query blocks, batch chunks) equals the plain chain
    with the same keep draws, outputs and gradients."""
    import kt_lib.nn.attention as attention_mod
    from kt_lib.nn.monotonic import _query_blocks, draw_keep

    draws = []

    def recording(out, p):  # the kernel draws one keep mask per query block, in block order
        scale = draw_keep(out, p)
        draws.append(out.clone())
        return scale

    monkeypatch.setattr(attention_mod, "draw_keep", recording)
    torch.manual_seed(0)
    B, H, L, Dh, p = 3, 2, 7, 4, 0.3
    if mask_kind == "long":  # several query blocks and several batch chunks per block
        B, L = 5, 150
        monkeypatch.setattr(attention_mod, "_chunks", lambda n, per: (2, [(0, 2), (2, 4), (4, 5)]))
    q, k, v = (torch.randn(B, H, L, Dh, dtype=torch.float64, requires_grad=True) for _ in "qkv")
    mask = {
        "none": None,
        "strict": causal_mask(L, strict=True),
        "batch": torch.rand(B, 1, L, L) > 0.4,
        "long": causal_mask(L, strict=True),
    }[mask_kind]
    out, _ = attend(q, k, v, mask, dropout=p)
    blocks = [(0, L, L)] if mask is None else _query_blocks(mask.reshape(-1, L, L))
    if mask_kind == "long":
        assert len(blocks) == 3 and blocks[0][2] < L  # early blocks skip late keys
    keep = torch.zeros(B, H, L, L, dtype=torch.float64)
    for (l0, l1, s1), drawn in zip(blocks, draws, strict=True):
        keep[:, :, l0:l1, :s1] = drawn
    s = q @ k.transpose(-2, -1) / Dh**0.5
    has_key = torch.ones(1, dtype=torch.bool) if mask is None else mask.any(-1, keepdim=True)
    if mask is not None:
        s = s.masked_fill(~(mask | ~has_key), float("-inf"))
    w = s.softmax(-1)
    scale = 1 / (1 - round(p * 65536) / 65536)
    ref = ((w * keep * scale) @ v) * has_key
    visible = w > 0 if mask is None else (mask & has_key).expand_as(w)
    assert 0.5 < keep[visible].mean() < 0.9
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(out)
    mine = torch.autograd.grad((out * g).sum(), (q, k, v))
    plain = torch.autograd.grad((ref * g).sum(), (q, k, v))
    for a, b in zip(mine, plain, strict=True):
        torch.testing.assert_close(a, b)
    if mask is not None and mask_kind != "batch":
        assert (out[:, :, 0] == 0).all()  # a row without keys outputs zeros, never NaN


class _CopyPrevious(KTModel):
    """Predicts r[t-1] (causal): on multi-skill rows it copies the answer to the same question."""

    config_cls = BaseConfig

    def __init__(self, config):
        super().__init__(config)
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, batch, return_attention=False):
        prev = torch.nn.functional.pad(batch.r.float(), (1, 0))[:, :-1]
        return ModelOutput(logits=(4 * prev - 2) * self.w)


def test_per_question_evaluation_drops_repeated_rows_of_a_problem():
    """GUIDE section 9: rows of one multi-skill problem must not score each other's answers."""
    from kt_lib.data.dataset import KTDataset, StudentSeq
    from kt_lib.train import evaluate

    rng = np.random.default_rng(0)
    students = []
    for uid in range(60):
        pid, q, r = [], [], []
        for problem in rng.integers(0, 30, 25):
            answer = int(rng.integers(0, 2))  # independent of the past: nothing to learn
            for skill in range(1 + problem % 3):  # 1-3 distinct skills per problem, one row each
                pid.append(problem)
                q.append(int(problem + skill) % 5)
                r.append(answer)
        students.append(StudentSeq(uid, np.array(q), np.array(r), np.array(pid)))
    data = KTDataset(students, num_c=5, num_pid=30)
    model = _CopyPrevious(BaseConfig(num_c=5, num_pid=30))
    rows = evaluate(model, data, per_question=False)
    per_q = evaluate(model, data)
    assert rows["auc"] > 0.7  # inflated by copying the same question's earlier row
    assert abs(per_q["auc"] - 0.5) < 0.05  # per question: chance, as it should be
    assert per_q["rows_merged"] > 0 and per_q["n"] + per_q["rows_merged"] == rows["n"]
    again = [StudentSeq(0, np.array([1, 1, 2]), np.array([0, 1, 1]), np.array([7, 7, 7]))]
    retry = evaluate(model, KTDataset(again, num_c=5, num_pid=30))  # 7 twice with skill 1: a retry
    assert retry["rows_merged"] == 1 and retry["n"] == 2


def test_keep_freed_memory_applies_once_on_glibc():
    import platform

    from kt_lib import runtime

    expected = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert runtime.keep_freed_memory() is expected
    assert runtime.keep_freed_memory() is expected  # idempotent
    x = torch.ones(64 << 20 >> 2)  # 64 MB: above glibc's default mmap threshold
    del x
    assert torch.ones(8).sum() == 8  # allocation still works after the settings
