"""The GPCM of kt_lib.heads.gpcm (the output layer of every ordinal model and the simulator's
ordinal truth) against an established IRT implementation: girth's marginal maximum-likelihood
GPCM estimation (`girth.unidimensional.polytomous.pcm_mml`, Muraki's generalised partial credit
model), on responses drawn from our formula with known items and abilities."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kt_lib.heads.gpcm import gpcm_logits

girth = pytest.importorskip("girth.unidimensional.polytomous")


def test_girth_recovers_the_items_our_gpcm_formula_generated():
    rng = np.random.default_rng(0)
    items, students, K = 10, 2000, 4
    alpha = rng.uniform(0.7, 2.0, items)
    thresholds = rng.uniform(-1.5, 0.5, items)[:, None] + np.array([0.0, 0.8, 1.6])
    theta = rng.normal(size=students)
    logits = gpcm_logits(
        torch.tensor(theta)[None, :].expand(items, students),
        torch.tensor(alpha)[:, None].expand(items, students),
        torch.tensor(thresholds)[:, None, :].expand(items, students, K - 1),
    )
    prob = torch.softmax(logits, -1).numpy()  # [items, students, K]
    responses = (prob.cumsum(-1) < rng.random((items, students, 1))).sum(-1)
    est = girth.pcm_mml(responses)
    # 2000 students: sampling error of a few hundredths; a sign or scale slip in our formula
    # (e.g. theta + beta, or alpha outside the sum) moves them by whole units
    assert np.abs(est["Discrimination"] - alpha).max() < 0.25
    assert np.abs(est["Difficulty"] - thresholds).max() < 0.3
    assert np.corrcoef(est["Difficulty"].ravel(), thresholds.ravel())[0, 1] > 0.98
