"""benchmarks/peer_train.py: pyKT's model behind the workbook's API. The wrapper must hand pyKT
its dcur (x[:, :-1], shft_x = x[:, 1:], zeroed by pyKT's masks) and read its prediction for step
t as ours for r_t; checked with a stand-in model whose output is a known function of its input,
so no pyKT is needed."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from peer_train import EPS, PeerConfig, PyktPeer, after_window_start  # noqa: E402

from kt_lib.data import BatchLoader  # noqa: E402
from kt_lib.data.synthetic import simulate  # noqa: E402
from kt_lib.train import fit  # noqa: E402


class WholeWindow(torch.nn.Module):
    """Rebuilds the window as pyKT's sparseKT does (cat(x[:, :1], shft_x)) and returns
    sigmoid(0.1 * c_t + 0.3 * r_{t-1}) as (preds, attn), sparseKT's eval output."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(0.1))

    def forward(self, d):
        c = torch.cat((d["cseqs"][:, :1], d["shft_cseqs"]), 1).float()
        r = torch.cat((d["rseqs"][:, :1], d["shft_rseqs"]), 1).float()
        prev = torch.cat((torch.zeros_like(r[:, :1]), r[:, :-1]), 1)
        return torch.sigmoid(self.w * c + 0.3 * prev), None


def test_the_prediction_for_step_t_is_read_as_ours_for_r_t():
    data = simulate(num_students=12, seq_len=9, num_c=6, seed=1).data
    full = next(iter(BatchLoader(data, batch_size=12, max_len=9)))
    m = torch.arange(9)[None] < (torch.arange(12) % 9 + 1)[:, None]  # ragged, right-padded
    batch = dataclasses.replace(full, q=full.q * m, r=full.r * m, mask=m)
    model = PyktPeer(PeerConfig(num_c=6), WholeWindow())
    logits = model(batch).logits
    c, r = batch.q.float(), batch.r.float()
    prev = torch.cat((torch.zeros_like(r[:, :1]), r[:, :-1]), 1)
    want = torch.logit(torch.sigmoid(0.1 * c + 0.3 * prev).clamp(EPS, 1 - EPS))
    assert logits.shape == batch.q.shape
    torch.testing.assert_close(logits[m], want[m])


class ShiftedQueries(torch.nn.Module):
    """pyKT's SAKT's signature: (q, r, qry) with q, r = x[:, :-1] and qry = shft_q; returns
    sigmoid(0.1 * qry + 0.3 * r) [B, L-1], the prediction for steps 1.. only."""

    def forward(self, q, r, qry):
        assert q.shape == r.shape == qry.shape
        return torch.sigmoid(0.1 * qry.float() + 0.3 * r.float())


def test_sakt_predicts_from_step_1_and_step_0_is_a_constant_half():
    data = simulate(num_students=12, seq_len=9, num_c=6, seed=1).data
    full = next(iter(BatchLoader(data, batch_size=12, max_len=9)))
    m = torch.arange(9)[None] < (torch.arange(12) % 9 + 1)[:, None]
    batch = dataclasses.replace(full, q=full.q * m, r=full.r * m, mask=m)
    model = PyktPeer(PeerConfig(num_c=6, model="sakt"), ShiftedQueries())
    logits = model(batch).logits
    c, r = batch.q.float(), batch.r.float()
    prev = torch.cat((torch.zeros_like(r[:, :1]), r[:, :-1]), 1)
    want = torch.logit(torch.sigmoid(0.1 * c + 0.3 * prev).clamp(EPS, 1 - EPS))
    assert logits.shape == batch.q.shape and not logits[:, 0].any()
    torch.testing.assert_close(logits[:, 1:][m[:, 1:]], want[:, 1:][m[:, 1:]])
    one = dataclasses.replace(batch, q=batch.q[:, :1], r=batch.r[:, :1], mask=m[:, :1])
    assert model(one).logits.shape == (12, 1)


def test_after_window_start_leaves_out_each_windows_first_step_only():
    """The steps pyKT's SAKT predicts: every scored step but the first of each window (steps 0,
    4, 8 at max_len 4), where the wrapper's p = 0.5 would otherwise count against it."""
    from kt_lib.evaluate import predict
    from kt_lib.metrics import binary_metrics

    data = simulate(num_students=12, seq_len=9, num_c=6, seed=3).data
    model = PyktPeer(PeerConfig(num_c=6, model="sakt"), ShiftedQueries())
    pred = predict(model, data, max_len=4)
    opens = pred["step"] % 4 == 0
    assert np.allclose(pred["prob"][opens], 0.5)  # the constant the wrapper gives
    want = binary_metrics(pred["y_true"][~opens], pred["prob"][~opens])
    assert after_window_start(model, data, 4) == pytest.approx(want)
    assert (
        after_window_start(model, data, 4)["auc"]
        != binary_metrics(pred["y_true"], pred["prob"])["auc"]
    )


def test_it_trains_under_fit():
    data = simulate(num_students=40, seq_len=12, num_c=5, seed=2).data
    model = PyktPeer(PeerConfig(num_c=5), WholeWindow())
    before = float(model.inner.w)
    res = fit(model, data.subset(range(30)), data.subset(range(30, 40)), epochs=2, progress=False)
    assert len(res.history) == 2 and float(model.inner.w) != before
