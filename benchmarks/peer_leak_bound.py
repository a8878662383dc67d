"""How much test AUC can sparseKT's 2023 leak add under pyKT's protocol? A bound from data.

    python benchmarks/peer_leak_bound.py --data-dir ../shared/data/assist2015 --fold 0 \
        [--model dkt] [--k 5] [--out benchmarks/results/peer_leak_bound.json]

pyKT's sparsekt.py before 2024-06-20 (fcbbe72 and 5e950f3, the revisions its published figures
were made with) takes a second softmax over whole rows of already-masked probabilities in its
first k rows: in rows 1..k-1 of every window the masked keys (the step itself and every later
step, padding included) get weight exp(0) = 1 beside exp(p) <= e for the visible ones, so those
rows read an almost uniform average of the window's value embeddings, which carry every step's
response, the one being predicted among them (docs/baselines.md). What can a model learn from
that? At the least the window's mean response. This script trains one causal model of ours
(the workbook recipe, default DKT), predicts the validation and test students under the
studies' protocol (windows of 200, every step scored), and then, in rows 1..k-1 of each window
only, replaces the prediction by a logistic regression (scikit-learn) fitted on the validation
rows: on the causal logit and the window's mean response ("mean"), and with the window's length
and the share of its steps on the row's question too ("all": what the average of the question
embeddings and the padding carry). The test AUC before and after, over
all scored rows and over the leaky rows, is what reading those quantities in those rows
is worth; a model trained through the leak could read more (the average also tells
which questions follow), or less (the average is diluted by padding to 200).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kt_lib.data import load_bundle  # noqa: E402
from kt_lib.evaluate import predict  # noqa: E402
from kt_lib.models import build_model  # noqa: E402
from kt_lib.provenance import device_name  # noqa: E402
from kt_lib.train import TrainConfig, fit  # noqa: E402

WINDOW = 200


FEATURES = ("causal logit", "window mean response", "log window length", "share of the window on q")


def leaky_features(pred: dict[str, np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """(leaky [n] bool: rows 1..k-1 of their window, features [n, 4]: `FEATURES`, each a
    quantity an average over the whole window carries) for predictions in (student, step)
    order."""
    pos = pred["step"] % WINDOW
    window = pred["uid"].astype(np.int64) * 10**6 + pred["step"] // WINDOW
    _, inverse, counts = np.unique(window, return_inverse=True, return_counts=True)
    mean = np.bincount(inverse, weights=pred["y_true"].astype(float)) / counts
    _, pair, pair_counts = np.unique(
        np.stack([inverse, pred["q"]], axis=1), axis=0, return_inverse=True, return_counts=True
    )
    share = pair_counts[pair.reshape(-1)] / counts[inverse]
    p = np.clip(pred["prob"].astype(float), 1e-6, 1 - 1e-6)
    feats = np.stack([np.log(p / (1 - p)), mean[inverse], np.log(counts[inverse]), share], axis=1)
    return (pos >= 1) & (pos < k), feats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--fold", type=int, default=0)
    ap.add_argument("--model", default="dkt", help="the causal model trained (paper preset)")
    ap.add_argument("--k", type=int, default=5, help="sparseKT's k: rows 1..k-1 leak")
    ap.add_argument("--out", default="benchmarks/results/peer_leak_bound.json")
    a = ap.parse_args()
    torch.set_num_threads(1)
    bundle = load_bundle(a.data_dir, "pykt", fold=a.fold)
    model = build_model(a.model, preset="paper", num_c=bundle.train.num_c)
    t0 = time.perf_counter()
    res = fit(model, bundle.train, bundle.valid, TrainConfig.recipe(progress=False), seed=0)
    valid, test = predict(res.model, bundle.valid), predict(res.model, bundle.test)
    v_leak, v_x = leaky_features(valid, a.k)
    t_leak, t_x = leaky_features(test, a.k)
    y = test["y_true"]
    found = {}
    for name, cols in (("mean", [0, 1]), ("all", list(range(len(FEATURES))))):
        reg = LogisticRegression(max_iter=1000).fit(v_x[v_leak][:, cols], valid["y_true"][v_leak])
        leaked = test["prob"].astype(float).copy()
        leaked[t_leak] = reg.predict_proba(t_x[t_leak][:, cols])[:, 1]
        found[name] = {
            "features": [FEATURES[c] for c in cols],
            "test_auc_with_leak": round(float(roc_auc_score(y, leaked)), 4),
            "leaky_rows_auc_with_leak": round(float(roc_auc_score(y[t_leak], leaked[t_leak])), 4),
            "coefficients": [round(float(c), 4) for c in (*reg.coef_[0], reg.intercept_[0])],
        }
    row = {
        "data": Path(a.data_dir).name,
        "fold": a.fold,
        "model": a.model,
        "k": a.k,
        "best_epoch": res.best_epoch,
        "test_rows": int(len(y)),
        "leaky_rows": int(t_leak.sum()),
        "leaky_share": round(float(t_leak.mean()), 4),
        "test_auc_causal": round(float(roc_auc_score(y, test["prob"])), 4),
        "leaky_rows_auc_causal": round(float(roc_auc_score(y[t_leak], test["prob"][t_leak])), 4),
        "reading": found,
        "seconds": round(time.perf_counter() - t0, 1),
        "machine": device_name("cpu"),
    }
    print(json.dumps(row), flush=True)
    with open(a.out, "a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
