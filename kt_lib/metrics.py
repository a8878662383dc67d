"""Evaluation metrics from scikit-learn, over valid (masked) positions only."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import accuracy_score, log_loss, mean_squared_error, roc_auc_score


def binary_metrics(y_true: np.ndarray, y_prob: np.ndarray) -> dict[str, float]:
    """AUC, accuracy (threshold 0.5), RMSE and log-loss for binary predictions."""
    y_true = np.asarray(y_true).astype(int)
    y_prob = np.clip(np.asarray(y_prob, dtype=np.float64), 1e-7, 1 - 1e-7)
    both = len(np.unique(y_true)) == 2
    return {
        "auc": float(roc_auc_score(y_true, y_prob)) if both else float("nan"),
        "acc": float(accuracy_score(y_true, y_prob >= 0.5)),
        "rmse": float(np.sqrt(mean_squared_error(y_true, y_prob))),
        "logloss": float(log_loss(y_true, y_prob, labels=[0, 1])),
        "n": int(len(y_true)),
    }


def ordinal_metrics(y_true: np.ndarray, prob: np.ndarray) -> dict[str, float]:
    """Core ordinal metrics from category probabilities [n, K]: QWK, exact accuracy, MAE."""
    from sklearn.metrics import cohen_kappa_score, mean_absolute_error

    y_true = np.asarray(y_true).astype(int)
    pred = np.asarray(prob).argmax(-1)
    return {
        "qwk": float(cohen_kappa_score(y_true, pred, weights="quadratic")),
        "acc": float(accuracy_score(y_true, pred)),
        "mae": float(mean_absolute_error(y_true, pred)),
        "n": int(len(y_true)),
    }
