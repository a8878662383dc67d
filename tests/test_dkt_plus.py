"""DKT+: DKT's prediction, the three regularisers against plain loops, what they may read."""

from __future__ import annotations

import math

import pytest
import torch

from kt_lib.audit import random_batch
from kt_lib.models import build_model

C = 5


def _models():
    torch.manual_seed(0)
    plus = build_model("dkt_plus", preset="tiny", num_c=C, lambda_r=0.3, lambda_w1=0.7).eval()
    dkt = build_model("dkt", preset="tiny", num_c=C).eval()
    dkt.load_state_dict(plus.state_dict())
    return plus, dkt


def test_logits_are_dkts_on_the_same_weights():
    plus, dkt = _models()
    batch = random_batch(C, B=3, L=10, seed=1)
    with torch.no_grad():
        assert torch.allclose(plus(batch).logits, dkt(batch).logits, atol=1e-6)


def _bce(logit: float, target: int) -> float:
    p = 1 / (1 + math.exp(-logit))
    return -(target * math.log(p) + (1 - target) * math.log(1 - p))


def test_regularisers_match_plain_loops():
    plus, _ = _models()
    batch = random_batch(C, B=3, L=8, seed=2)
    with torch.no_grad():
        out = plus(batch)
        y = plus.outputs(batch)  # [B, L + 1, C]
    recon, n_r, w1, w2, n_w = 0.0, 0, 0.0, 0.0, 0
    for b in range(3):
        n = int(batch.mask[b].sum())
        for t in range(n):
            recon += _bce(float(y[b, t + 1, batch.q[b, t]]), int(batch.r[b, t]))
            n_r += 1
            if t >= 1:
                d = torch.sigmoid(y[b, t + 1]) - torch.sigmoid(y[b, t])
                w1 += float(d.abs().sum())
                w2 += float((d**2).sum())
                n_w += 1
    assert out.losses["reconstruction"].item() == pytest.approx(0.3 * recon / n_r, rel=1e-5)
    assert out.losses["waviness_l1"].item() == pytest.approx(0.7 * w1 / (n_w * C), rel=1e-5)
    assert out.losses["waviness_l2"].item() == pytest.approx(10.0 * w2 / (n_w * C), rel=1e-5)
    total = plus.loss(out, batch)["total"]
    assert torch.isclose(total, sum(plus.loss(out, batch)[k] for k in ("pred", *out.losses)))


def test_reconstruction_reads_r_t_but_logits_never_do():
    plus, _ = _models()
    batch = random_batch(C, B=2, L=6, ragged=False, seed=3)
    flipped = batch.clone()
    flipped.r[:, -1] = 1 - flipped.r[:, -1]  # the last answer: no logit may read it
    with torch.no_grad():
        a, b = plus(batch), plus(flipped)
    assert torch.equal(a.logits, b.logits)
    assert not torch.isclose(a.losses["reconstruction"], b.losses["reconstruction"])
    assert not torch.isclose(a.losses["waviness_l2"], b.losses["waviness_l2"])


def test_zero_weights_drop_the_terms():
    model = build_model(
        "dkt_plus", preset="tiny", num_c=C, lambda_r=0.0, lambda_w1=0.0, lambda_w2=0.0
    )
    assert model(random_batch(C, B=2, L=4)).losses == {}
    with pytest.raises(ValueError, match="lambda_w2 must be >= 0"):
        build_model("dkt_plus", num_c=C, lambda_w2=-1.0)


def test_paper_preset_size():
    model = build_model("dkt_plus", preset="paper", num_c=100)
    c = model.config
    assert (c.d, c.lambda_r, c.lambda_w1, c.lambda_w2) == (200, 0.2, 1.0, 10.0)
    # embedding 200 x 200 + LSTM(200, 200) 321,600 + Linear(200, 100) 20,100, as pyKT's DKTPlus
    assert sum(p.numel() for p in model.parameters()) == 40_000 + 321_600 + 20_100
