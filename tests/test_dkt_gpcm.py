"""Ordinal DKT: GPCM probabilities from the LSTM's ability, checked against the formula."""

from __future__ import annotations

import pytest
import torch

from kt_lib.audit import random_batch
from kt_lib.models import build_model


def test_category_probabilities_follow_the_gpcm_formula():
    torch.manual_seed(0)
    model = build_model("dkt_gpcm", preset="tiny", num_c=6, K=4).eval()
    batch = random_batch(6, B=2, L=9, K=4, seed=3)
    with torch.no_grad():
        out = model(batch)
        theta, alpha, b = out.extras["theta"], out.extras["alpha"], out.extras["thresholds"]
        for i, t in [(0, 0), (1, 4), (0, 8)]:
            z = [0.0]
            for j in range(3):  # Z_k = sum_{j<k} alpha (theta - b_j)
                z.append(z[-1] + float(alpha[i, t] * (theta[i, t] - b[i, t, j])))
            want = torch.tensor(z).softmax(0)
            torch.testing.assert_close(out.logits[i, t].softmax(0), want, rtol=1e-5, atol=1e-6)
    assert (b[..., 1:] > b[..., :-1]).all()  # ordered thresholds


def test_binary_dkt_refuses_ordinal_data_and_the_ordinal_one_takes_it():
    with pytest.raises(ValueError, match="DKTConfig is binary: K must be 2"):
        build_model("dkt", num_c=5, K=4)
    assert build_model("dkt_gpcm", num_c=5, K=5).ordinal
