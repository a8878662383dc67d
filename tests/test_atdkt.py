"""AT-DKT: the auxiliary targets (past accuracy, responses < t only) and weights, the question
tagging trunk reading problems only, what it refuses, the paper preset's size."""

from __future__ import annotations

import pytest
import torch

from kt_lib.audit import random_batch
from kt_lib.models import build_model
from kt_lib.models.atdkt import history_accuracy
from tests.conftest import make_tiny_dataset

NUM_C, NUM_PID = 12, 36


def test_refuses_skill_only_data_by_name():
    skills_only = make_tiny_dataset(NUM_C, 0)
    with pytest.raises(ValueError, match=r"atdkt needs problem ids \(pid\), and tiny has none"):
        build_model("atdkt", preset="tiny", dataset=skills_only)
    build_model("atdkt", preset="tiny", dataset=make_tiny_dataset(NUM_C, NUM_PID))


def test_paper_preset_size():
    # 100 skills, 1000 problems: embeddings (2C + P + C) * 300, two encoder layers of about
    # 4 * 300^2 + 2 * 300 * 2048, an LSTM of 4 * (600 * 300 + 600), three MLP heads: ~4.47 M
    model = build_model("atdkt", preset="paper", num_c=100, num_pid=1000)
    n = sum(p.numel() for p in model.parameters())
    assert 4_300_000 <= n <= 4_600_000, n


def _model(**kw):
    torch.manual_seed(0)
    return build_model("atdkt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID, **kw).double().eval()


def test_history_accuracy_averages_the_responses_before_t():
    b = random_batch(NUM_C, B=4, L=12, num_pid=NUM_PID, seed=6)
    rate, has = history_accuracy(b.r, b.mask)
    for i in range(4):
        for t in range(12):
            past = [int(b.r[i, s]) for s in range(t) if b.mask[i, s]]
            assert bool(has[i, t]) == bool(past)
            if past:
                assert rate[i, t] == pytest.approx(sum(past) / len(past))
    # r_t is not in the target at t (the hidden state at t has not read it), it is at t + 1
    flipped = b.r.clone()
    flipped[:, 5] = 1 - flipped[:, 5]
    rate2, _ = history_accuracy(flipped, b.mask)
    assert torch.equal(rate2[:, :6], rate[:, :6])
    assert (rate2[:, 6] != rate[:, 6]).all()


def _atdkt(**kw):
    model = _model(dropout=0.0, qt_dropout=0.0, **kw)
    return model.train()  # the auxiliary terms are computed in training only


def test_atdkt_question_tagging_reads_problems_only():
    model = _atdkt()
    seen = {}
    model.enc_norm.register_forward_hook(lambda m, i, o: seen.__setitem__("u", o))
    b = random_batch(NUM_C, B=3, L=10, num_pid=NUM_PID, seed=7)
    model(b)
    u = seen["u"]
    other = b.clone()
    other.q = (b.q + 1) % NUM_C * b.mask  # the label QT predicts is never its input
    other.r = 1 - b.r
    model(other)
    assert torch.equal(seen["u"], u)
    other.pid[:, 4] = (b.pid[:, 4] + 1) % NUM_PID
    model(other)
    moved = (seen["u"] - u).abs().amax(-1) > 0
    assert not moved[:, :4].any() and moved[:, 4].all()


def test_atdkt_auxiliary_losses_weights_and_start():
    b = random_batch(NUM_C, B=3, L=10, num_pid=NUM_PID, seed=8)
    base = _atdkt()(b).losses
    assert set(base) == {"qt", "ik"} and base["qt"] > 0 and base["ik"] > 0
    doubled = _atdkt(qt_weight=2.0, ik_weight=0.5)(b).losses
    assert torch.allclose(doubled["qt"], 2 * base["qt"])
    assert torch.allclose(doubled["ik"], 0.5 * base["ik"])
    assert _atdkt(start=10)(b).losses["ik"] == 0  # no step t > start in a 10-step window
    assert _atdkt().eval()(b).losses == {}


def test_atdkt_ik_loss_is_the_masked_mse_to_the_past_accuracy():
    model = _atdkt(start=2)
    b = random_batch(NUM_C, B=3, L=10, num_pid=NUM_PID, seed=9)
    seen = {}
    model.lstm.register_forward_hook(lambda m, i, o: seen.__setitem__("h", o[0]))
    got = model(b).losses["ik"]
    p = torch.sigmoid(model.ik_head(seen["h"]).squeeze(-1))
    total, n = 0.0, 0
    for i in range(3):
        for t in range(3, 10):
            past = [float(b.r[i, s]) for s in range(t) if b.mask[i, s]]
            if b.mask[i, t] and past:
                total += (float(p[i, t]) - sum(past) / len(past)) ** 2
                n += 1
    assert float(got) == pytest.approx(total / n)
