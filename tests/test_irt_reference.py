"""The Rasch reference (kt_lib/reference_models/irt.py): the defects a review found, pinned (an
unseen student's ability, the per-prefix MAP under a wide prior, a one-class training set)."""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import minimize_scalar

from kt_lib.data.dataset import KTDataset, StudentSeq
from kt_lib.reference_models.irt import IRTReference, prefix_abilities


def _students(responses: list[list[int]], skills: list[list[int]], num_c: int) -> KTDataset:
    seqs = [
        StudentSeq(10 * (i + 1), np.array(q), np.array(r))
        for i, (q, r) in enumerate(zip(skills, responses, strict=True))
    ]
    return KTDataset(seqs, num_c=num_c, name="t")


def test_an_unseen_student_gets_ability_zero_not_a_neighbours():
    ref = IRTReference().fit(_students([[1, 1, 1, 0], [0, 0, 1, 0]], [[0, 1, 0, 1]] * 2, 2))
    theta, seen = ref.student_theta(torch.tensor([10, 15, 99]))
    assert seen.tolist() == [True, False, False]
    assert theta[0] != 0 and theta[1:].tolist() == [0.0, 0.0]


def test_prefix_ability_converges_under_a_wide_prior():
    """An all-correct prefix under a wide prior (theta_prior_sd = 30): the MAP lies past 8, which
    a fixed eight steps clipped to 1 could not reach."""
    L, sd = 80, 30.0
    q = torch.zeros(1, L, dtype=torch.long)
    r = torch.ones(1, L, dtype=torch.long)
    mask = torch.ones(1, L, dtype=torch.bool)
    beta = torch.tensor([0.5], dtype=torch.float64)
    theta = prefix_abilities(q, r, mask, beta, prior_sd=sd)
    for t in (1, 5, 40, L - 1):

        def nlp(th, t=t):
            return -(th - 0.5 - np.logaddexp(0, th - 0.5)) * t + th * th / (2 * sd * sd)

        best = minimize_scalar(nlp, bounds=(-50, 50), method="bounded", options={"xatol": 1e-10})
        assert abs(theta[0, t].item() - best.x) < 1e-5, (t, theta[0, t].item(), best.x)
    assert theta[0, L - 1] > 8


def test_a_training_set_of_one_class_gets_its_finite_map():
    """All answers correct: sklearn refuses one class, and the fit used to return theta = beta = 0;
    the MAP is finite and not 0 (abilities up, difficulties down), its gradient 0."""
    data = _students([[1, 1, 1], [1, 1]], [[0, 1, 0], [1, 1]], 2)
    ref = IRTReference(beta_prior_sd=3.0, theta_prior_sd=1.0).fit(data)
    theta, beta = ref.theta.numpy(), ref.beta.numpy()
    assert (theta > 0).all() and (beta < 0).all()
    # d log posterior / d theta_u = sum_responses (1 - p) - theta_u / 1^2 = 0 at the MAP
    for u, s in enumerate(data.students):  # uids 10, 20 in sorted order
        p = 1 / (1 + np.exp(-(theta[u] - beta[s.q])))
        assert abs((1 - p).sum() - theta[u]) < 1e-4
