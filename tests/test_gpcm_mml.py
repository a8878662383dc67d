"""MML calibration of GPCM items (kt_lib.reference_models.gpcm_mml): recovery of known items from
responses with missing cells, agreement with girth's `pcm_mml` on the same matrix, and the errors
for bad input and unidentified items."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kt_lib.heads.gpcm import gpcm_logits
from kt_lib.reference_models.gpcm_mml import MISSING, fit_gpcm_mml, marginal_log_likelihood

ITEMS, STUDENTS, K, MISSING_RATE = 12, 2000, 4, 0.4


def simulate(seed: int, items: int, students: int, K: int, missing_rate: float):
    """Responses [students, items] drawn from our GPCM formula, a share missing at random."""
    rng = np.random.default_rng(seed)
    alpha = rng.uniform(0.7, 2.0, items)
    thresholds = rng.uniform(-1.5, 0.5, items)[:, None] + np.linspace(0.0, 0.8 * (K - 2), K - 1)
    theta = rng.normal(size=students)
    logits = gpcm_logits(
        torch.tensor(theta)[:, None], torch.tensor(alpha)[None, :], torch.tensor(thresholds)[None]
    )  # [students, items, K]
    prob = torch.softmax(logits, -1).numpy()
    y = (prob.cumsum(-1) < rng.random((students, items, 1))).sum(-1)
    y[rng.random(y.shape) < missing_rate] = MISSING
    return y, alpha, thresholds, theta


@pytest.fixture(scope="module")
def simulated():
    y, alpha, thresholds, theta = simulate(0, ITEMS, STUDENTS, K, MISSING_RATE)
    return y, alpha, thresholds, theta, fit_gpcm_mml(y, K)


def test_recovers_known_items_with_40_percent_missing(simulated):
    y, alpha, thresholds, theta, fit = simulated
    assert fit.converged and fit.dropped == {} and fit.items.tolist() == list(range(ITEMS))
    # About 1200 responses per item. Standard errors from the observed information (inverse
    # Hessian of log L at the estimate, seeds 0-7 of this design): alpha 0.05-0.16, thresholds
    # 0.05-0.19 (the thinly observed extreme categories largest); the largest error of the 48
    # parameters was 1.6-3.6 standard errors, at most 0.25 (alpha) and 0.33 (thresholds), mean
    # absolute threshold error 0.06-0.08. The bounds sit about 3 standard errors of the worst-
    # measured parameter out. A missing cell scored as a response, or a sign slip in the formula,
    # moves them by whole units.
    assert np.abs(fit.alpha.numpy() - alpha).max() < 0.45
    assert np.abs(fit.thresholds.numpy() - thresholds).max() < 0.6
    assert np.abs(fit.thresholds.numpy() - thresholds).mean() < 0.12
    assert np.corrcoef(fit.thresholds.numpy().ravel(), thresholds.ravel())[0, 1] > 0.985
    # EAP from ~7 responses each: corr(EAP, theta) was 0.90-0.93 over the seeds above
    assert np.corrcoef(fit.ability.numpy(), theta)[0, 1] > 0.85


def test_agrees_with_girth_on_the_same_matrix(simulated):
    girth = pytest.importorskip("girth")
    from girth.unidimensional.polytomous import pcm_mml

    y, _, _, _, fit = simulated
    # girth reads [items, students] and marks missing cells with its INVALID_RESPONSE; it
    # renumbers each item's observed codes from the smallest (0- or 1-based both work), so an
    # unobserved category would silently collapse: here every item has all K (fit dropped none).
    est = pcm_mml(girth.tag_missing_data(y.T, list(range(K))))
    ga, gb = est["Discrimination"], est["Difficulty"]
    # Same model, same N(0, 1) scale and the same quadrature grid: only the optimisers differ.
    # Ours stops at a gradient of 1e-6 (the maximum); girth when no discrimination moves by 1e-3
    # in an outer iteration, a linear-rate block ascent whose remaining distance is several such
    # steps. So girth's estimate scores no higher than ours on the exact objective, and the two
    # differ by hundredths, a fraction of a standard error (0.05-0.19 here).
    assert marginal_log_likelihood(y, ga, gb) <= fit.log_likelihood + 1e-6
    assert fit.log_likelihood - marginal_log_likelihood(y, ga, gb) < 1.0
    assert np.abs(fit.alpha.numpy() - ga).max() < 0.02
    assert np.abs(fit.thresholds.numpy() - gb).max() < 0.06
    assert marginal_log_likelihood(y, fit.alpha, fit.thresholds) == pytest.approx(
        fit.log_likelihood, abs=1e-6
    )


def test_unidentified_items_are_refused_or_dropped_and_reported():
    y, *_ = simulate(1, 4, 300, K, 0.0)
    y[:, 1] = np.minimum(y[:, 1], K - 2)  # nobody reaches item 1's top category
    y[:10, 3], y[10:, 3] = np.arange(10) % K, MISSING  # item 3: 10 responses, every category
    with pytest.raises(ValueError, match=r"item 1: category \[3\] never observed") as err:
        fit_gpcm_mml(y, K)
    assert "item 3: 10 responses < min_responses=20" in str(err.value)
    fit = fit_gpcm_mml(y, K, drop_unidentified=True)
    assert fit.items.tolist() == [0, 2] and sorted(fit.dropped) == [1, 3]
    assert fit.alpha.shape == (2,) and fit.thresholds.shape == (2, K - 1)
    assert "never observed" in fit.dropped[1] and "min_responses" in fit.dropped[3]
    fit = fit_gpcm_mml(y, K, min_responses=5, drop_unidentified=True)
    assert sorted(fit.dropped) == [1]
    with pytest.raises(ValueError, match="no item left"):
        fit_gpcm_mml(y[:, [1]], K, drop_unidentified=True)


@pytest.mark.parametrize(
    ("responses", "K", "error", "message"),
    [
        (np.zeros(5, dtype=np.int64), 4, ValueError, r"2-D \[students, items\].*shape \(5,\)"),
        (np.array([[0, 1], [2, 4]]), 4, ValueError, r"responses\[1, 1\] = 4: categories are 0..3"),
        (np.array([[0, -2], [2, 3]]), 4, ValueError, r"responses\[0, 1\] = -2"),
        (np.array([[0.0, 1.0]]), 4, TypeError, "must be integers"),
        (np.zeros((0, 3), dtype=np.int64), 4, ValueError, "empty"),
        (np.array([[0, 1]]), 1, ValueError, "K must be an integer >= 2"),
    ],
)
def test_bad_input_is_named(responses, K, error, message):
    with pytest.raises(error, match=message):
        fit_gpcm_mml(responses, K)


def test_bad_min_responses_is_named():
    with pytest.raises(ValueError, match="min_responses must be an integer >= 1, got 0"):
        fit_gpcm_mml(np.array([[0, 1], [1, 0]]), 2, min_responses=0)
