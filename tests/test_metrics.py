"""kt_lib.metrics beyond the hand-checked cases of tests/test_ordinal.py: the rank correlation
and the AUC of each ordinal threshold, against plain computations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from kt_lib.metrics import binary_metrics, ordinal_metrics


def test_threshold_aucs_and_spearman_against_plain_loops():
    rng = np.random.default_rng(0)
    n, K = 400, 5
    y = rng.integers(0, K, n)
    logits = rng.normal(size=(n, K)) + 1.5 * np.eye(K)[y]  # informative, not perfect
    prob = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    m = ordinal_metrics(y, prob)
    for k in range(1, K):
        p_ge = prob[:, k:].sum(1)
        assert m[f"auc_ge{k}"] == pytest.approx(roc_auc_score(y >= k, p_ge), abs=1e-12)
        assert 0.6 < m[f"auc_ge{k}"] < 1.0
    expected = (prob * np.arange(K)).sum(1)
    assert m["spearman"] == pytest.approx(spearmanr(y, expected)[0], abs=1e-12)
    assert "auc_ge0" not in m and f"auc_ge{K}" not in m and "auc" not in m


def test_undefined_figures_are_nan_not_errors():
    y = np.array([0, 0, 0])  # one category: no threshold has two classes, no rank order
    prob = np.full((3, 4), 0.25)
    m = ordinal_metrics(y, prob)
    assert np.isnan(m["spearman"]) and all(np.isnan(m[f"auc_ge{k}"]) for k in (1, 2, 3))
    two = ordinal_metrics(np.array([0, 1, 0, 1]), np.eye(2)[[0, 1, 1, 1]])
    # at K = 2 the pass/fail AUC is the binary AUC, under both names (the tables show auc_ge1)
    assert two["auc_ge1"] == two["auc"] == pytest.approx(0.75)
    assert two["spearman"] == pytest.approx(spearmanr([0, 1, 0, 1], [0, 1, 1, 1])[0])


def test_auc_ranks_the_raw_probabilities_and_only_the_log_loss_clips():
    """Saturated outputs stay ordered for AUC (clipping to 1e-7 made both ends ties: AUC 0.5
    here instead of 0.75), while the log-loss of a confident miss stays finite."""
    y = np.array([0, 1, 0, 1])
    prob = np.array([0.9999999, 1.0, 1e-9, 2e-9])
    m = binary_metrics(y, prob)
    assert m["auc"] == pytest.approx(roc_auc_score(y, prob)) == pytest.approx(0.75)
    assert np.isfinite(m["logloss"]) and m["logloss"] > 4


def test_macro_f1_leaves_out_a_category_never_observed_nor_predicted():
    """Category 2 of K = 4 never occurs: its F1 is 0/0, NaN, and the macro mean is over the three
    that occur (counting it as 0 cut the figure by a quarter for a miss no model could avoid)."""
    y = np.array([0, 1, 3, 3, 1, 0])
    prob = np.eye(4)[[0, 1, 3, 0, 1, 0]]
    m = ordinal_metrics(y, prob)
    assert np.isnan(m["f1_2"])
    present = [m["f1_0"], m["f1_1"], m["f1_3"]]
    assert present == pytest.approx([0.8, 1.0, 2 / 3])
    assert m["macro_f1"] == pytest.approx(np.mean(present))
    # a category predicted but never observed still counts (F1 0: a false positive, avoidable)
    wrong = ordinal_metrics(y, np.eye(4)[[0, 1, 3, 2, 1, 0]])
    assert wrong["f1_2"] == 0 and wrong["macro_f1"] == pytest.approx((1 + 1 + 2 / 3 + 0) / 4)
