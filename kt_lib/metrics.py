"""Evaluation metrics from scikit-learn, over valid (masked) positions only."""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr
from sklearn.metrics import (
    accuracy_score,
    cohen_kappa_score,
    confusion_matrix,
    f1_score,
    log_loss,
    mean_absolute_error,
    mean_squared_error,
    roc_auc_score,
)


def binary_metrics(y_true: np.ndarray, y_prob: np.ndarray) -> dict[str, float]:
    """AUC, accuracy (threshold 0.5), RMSE and log-loss for binary predictions. Only the
    log-loss clips the probabilities (to 1e-7 from 0 and 1): AUC ranks the raw ones, so two
    saturated predictions (0.99999994 and 1.0) stay apart."""
    y_true = np.asarray(y_true).astype(int)
    y_prob = np.asarray(y_prob, dtype=np.float64)
    both = len(np.unique(y_true)) == 2
    return {
        "auc": float(roc_auc_score(y_true, y_prob)) if both else float("nan"),
        "acc": float(accuracy_score(y_true, y_prob >= 0.5)),
        "rmse": float(np.sqrt(mean_squared_error(y_true, y_prob))),
        "logloss": float(log_loss(y_true, np.clip(y_prob, 1e-7, 1 - 1e-7), labels=[0, 1])),
        "n": int(len(y_true)),
    }


def predict_category(prob: np.ndarray, prediction: str = "argmax") -> np.ndarray:
    """Predicted category from probabilities [n, K]: argmax, or the rounded expectation."""
    prob = np.asarray(prob, dtype=np.float64)
    if prediction == "argmax":
        return prob.argmax(-1)
    if prediction == "expectation":
        expected = prob @ np.arange(prob.shape[-1])
        return np.clip(np.floor(expected + 0.5), 0, prob.shape[-1] - 1).astype(int)
    raise ValueError(f"prediction must be 'argmax' or 'expectation', got {prediction!r}")


def ordinal_confusion_matrix(
    y_true: np.ndarray, prob: np.ndarray, prediction: str = "argmax"
) -> np.ndarray:
    """[K, K] counts, rows = true category, columns = predicted category."""
    prob = np.asarray(prob)
    pred = predict_category(prob, prediction)
    return confusion_matrix(np.asarray(y_true).astype(int), pred, labels=np.arange(prob.shape[-1]))


def ordinal_metrics(
    y_true: np.ndarray, prob: np.ndarray, prediction: str = "argmax", large_error: int = 2
) -> dict[str, float]:
    """Ordinal metrics from category probabilities [n, K], as a flat dict of floats.

    qwk (quadratic weighted kappa), acc (exact match: what seed 002 calls "ordinal accuracy"),
    adjacent_acc (within one category, |pred - true| <= 1; formerly ordinal_acc), mae,
    near_miss (|pred - true| = 1), large_error (|pred - true| > `large_error`, seed 002's > 2),
    f1_k per category and macro_f1 (over the categories observed or predicted; an absent one's
    f1_k is NaN), spearman (rank correlation of the expected category
    sum_k k P(Y = k) with the true one); with K > 2 the AUC of each threshold, auc_ge{k} =
    AUC of P(Y >= k) for y >= k, k = 1..K-1 (auc_ge1: pass/fail where category 0 fails); with
    K = 2 the binary metrics of P(Y = 1) (auc, rmse, logloss; auc_ge1 = auc), so a binary run of
    an ordinal model sits beside the binary models. A figure undefined on the data (one class, a
    constant prediction) is NaN.
    """
    y_true = np.asarray(y_true).astype(int)
    prob = np.asarray(prob, dtype=np.float64)
    if prob.ndim != 2 or prob.shape[0] != len(y_true):
        raise ValueError(f"prob must be [n, K] with n = {len(y_true)}, got {prob.shape}")
    if large_error < 1:
        raise ValueError(f"large_error must be >= 1, got {large_error}")
    K = prob.shape[1]
    pred = predict_category(prob, prediction)
    err = np.abs(pred - y_true)
    labels = np.arange(K)
    if len(np.union1d(y_true, pred)) > 1:
        qwk = float(cohen_kappa_score(y_true, pred, labels=labels, weights="quadratic"))
    else:  # one category everywhere: kappa is 0/0
        qwk = float("nan")
    f1 = f1_score(y_true, pred, labels=labels, average=None, zero_division=0)
    # A category neither observed nor predicted has no F1 (0/0): NaN, and out of the macro mean
    # (zero_division=0 would count it as a failure the model could not have avoided).
    f1[~np.isin(labels, np.union1d(y_true, pred))] = np.nan
    out = {
        "qwk": qwk,
        "acc": float(accuracy_score(y_true, pred)),
        "adjacent_acc": float(np.mean(err <= 1)),
        "mae": float(mean_absolute_error(y_true, pred)),
        "near_miss": float(np.mean(err == 1)),
        "large_error": float(np.mean(err > large_error)),
        **{f"f1_{k}": float(f1[k]) for k in range(K)},
        "macro_f1": float(np.nanmean(f1)) if len(y_true) else float("nan"),
    }
    expected = prob @ np.arange(K)
    constant = len(np.unique(y_true)) < 2 or np.ptp(expected) == 0
    out["spearman"] = float("nan") if constant else float(spearmanr(y_true, expected)[0])
    if K > 2:
        at_least = np.cumsum(prob[:, ::-1], axis=1)[:, ::-1]  # [n, K]: P(Y >= k)
        for k in range(1, K):
            passed = y_true >= k
            both = 0 < passed.sum() < len(passed)
            out[f"auc_ge{k}"] = float(roc_auc_score(passed, at_least[:, k])) if both else np.nan
    if K == 2:
        binary = binary_metrics(y_true, prob[:, 1])
        out.update(auc=binary["auc"], rmse=binary["rmse"], logloss=binary["logloss"])
        out["auc_ge1"] = binary["auc"]  # the pass/fail AUC, named as at K > 2 for the tables
    out["n"] = int(len(y_true))
    return out
