"""The evaluation protocol: predictions on every scored step, and metrics under one protocol.

# B batch, L steps, K categories
`predict` gives the scored rows of a dataset (windows of max_len, or a sliding history);
`evaluate` scores them per question (default) or per row; `evaluate_protocols` under both row
rules and several histories at once (GUIDE section 9). `fit` (kt_lib.train) calls `evaluate`
for early stopping.
"""

from __future__ import annotations

import numpy as np
import torch

from .data.dataset import KTDataset, chunk, collate, opens_question, sliding
from .metrics import binary_metrics, ordinal_metrics
from .models.base import KTModel

ROWS = ("per_question", "per_row")  # which rows of a multi-skill question are scored
HISTORIES = ("window", "sliding")  # what history each scored step is predicted from
DEFAULT_PROTOCOL = "per_question/window"
# AUC by the scored step's position in the student's log (1-based, inclusive bounds)
POSITION_BUCKETS = ((1, 10), (11, 50), (51, 200), (201, None))
# and over every step but the student's first (`pos2+`, not a bucket: it overlaps them): the
# steps of the AUC pyKT reports (`window_testauc`, each step past 200 predicted from the 199
# before it), whose models predict step t + 1 from the steps up to t and so never score a
# student's first step, predicted from the question alone (its `testauc`, on 200-step chunks,
# also leaves out each later chunk's first step)
FROM_SECOND = "pos2+"


def _check_protocol(rows: str, history: str) -> None:
    if rows not in ROWS:
        raise ValueError(f"rows must be one of {ROWS}, got {rows!r}")
    if history not in HISTORIES:
        raise ValueError(f"history must be one of {HISTORIES}, got {history!r}")


@torch.no_grad()
def predict(
    model: KTModel,
    data: KTDataset,
    batch_size: int = 128,
    max_len: int = 200,
    device: str = "cpu",
    history: str = "window",
    stride: int = 1,
) -> dict[str, np.ndarray]:
    """Predictions on every scored position: y_true, prob ([n] or [n, K]), uid, step, q (and pid
    with problem ids), in (student, step) order.

    history "window": each log is cut into windows of `max_len` (`chunk`), so the first steps of
    a later window are predicted from little history. "sliding": each step is predicted from up
    to `max_len - 1` steps before it (`sliding`, exact with stride 1): more windows, one batched
    forward per `batch_size` of them.

    Windows are batched longest first, so a batch pads to its own rows' lengths rather than to
    the longest window among arbitrary neighbours (on ASSIST2015, median window 21 of 200 steps,
    most of a batch in log order was padding), and the rows are put back in (student, step)
    order; a window's predictions do not depend on the rows beside it or on its padding (the
    causal contract: padding is the future of every real step).
    """
    _check_protocol("per_row", history)
    windows = chunk(data, max_len) if history == "window" else sliding(data, max_len, stride)
    lengths = np.array([w.stop - w.start for w in windows], dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    was_training = model.training
    model.eval()
    keys = ("y_true", "prob", "uid", "step", "q", "window")
    cols: dict[str, list[torch.Tensor]] = {k: [] for k in keys}
    for i in range(0, len(windows), batch_size):
        idx = order[i : i + batch_size]
        part = [windows[j] for j in idx]
        batch = collate(data, part).to(device, non_blocking=True)
        prob = model.probabilities(model(batch))
        steps = torch.arange(batch.mask.shape[1], device=batch.mask.device)
        context = torch.tensor([w.context for w in part], device=steps.device)
        m = batch.mask & (steps >= context.unsqueeze(1))  # context steps are history only
        rows = {
            "y_true": batch.r,
            "prob": prob.float(),
            "uid": batch.uid.unsqueeze(1).expand_as(m),
            "step": batch.start.unsqueeze(1) + steps,
            "q": batch.q,
            "window": torch.from_numpy(idx).to(steps.device).unsqueeze(1).expand_as(m),
        }
        if batch.pid is not None:
            rows["pid"] = batch.pid
        for k, v in rows.items():  # stays on the device: one copy to the host at the end
            cols.setdefault(k, []).append(v[m])
    model.train(was_training)
    out = {k: torch.cat(v).cpu().numpy() for k, v in cols.items() if v}
    # (student, step) order: windows in log order, each window's rows already in step order
    back = np.argsort(out.pop("window", np.zeros(0, dtype=np.int64)), kind="stable")
    return {k: v[back] for k, v in out.items()}


def question_rows(pred: dict[str, np.ndarray]) -> np.ndarray:
    """Rows that open a question: False on a row that continues a question already opened.

    Formats that expand a multi-skill problem into one row per skill (the 4-line format, pykt)
    put its rows at consecutive steps, and row 2 of a problem sees row 1's response - the answer
    to the same question. Scoring only each question's first row (which saw no response to it)
    evaluates per question (GUIDE section 9). Inside a run of consecutive rows of one problem, a
    skill seen again starts a new attempt ((P,a),(P,b),(P,a),(P,b) is two questions), so the
    n-th occurrence of a skill belongs to attempt n, and an attempt's first row opens it. Rows
    come from `predict`, in (student, step) order (`kt_lib.data.dataset.opens_question`).
    """
    n = len(pred["y_true"])
    if "pid" not in pred or n < 2:
        return np.ones(n, dtype=bool)
    return opens_question(pred["uid"], pred["step"], pred["pid"], pred["q"])


def _metrics(model: KTModel, pred: dict[str, np.ndarray], rows: str) -> dict[str, float]:
    keep = question_rows(pred) if rows == "per_question" else np.ones(len(pred["y_true"]), bool)
    y, prob = pred["y_true"][keep], pred["prob"][keep]
    metrics = ordinal_metrics(y, prob) if model.ordinal else binary_metrics(y, prob)
    if "pid" in pred:
        metrics["rows_merged"] = int((~keep).sum())
    return metrics


def _bucket_metrics(y: np.ndarray, prob: np.ndarray, select: np.ndarray) -> dict[str, float]:
    """Count, and AUC and accuracy of the selected rows where they are defined (an empty bucket,
    or one with a single class, has no AUC: the key is absent rather than NaN)."""
    out: dict[str, float] = {"n": int(select.sum())}
    if out["n"]:
        m = binary_metrics(y[select], prob[select])
        out["acc"] = m["acc"]
        if not np.isnan(m["auc"]):
            out["auc"] = m["auc"]
    return out


def history_breakdown(pred: dict[str, np.ndarray], lengths: dict[int, int]) -> dict[str, float]:
    """Per-question AUC/accuracy/count by the scored step's position in the student's log
    (`pos1-10`, `pos11-50`, `pos51-200`, `pos201+`; and `pos2+`, every step but the first, the
    steps of pyKT's reported AUC) and by the student's total log length
    (`lenq1`..`lenq4`, quartiles over the scored students, each student counted once; bands
    are closed on the right, so students of one length share a band and ties at an edge can
    leave a band empty, e.g. algebra05's records cut at 200 steps): where short histories lose,
    and where collaborative memory could help. Binary models (and ordinal ones via P(Y >= 1) at
    K = 2)."""
    keep = question_rows(pred)
    y, prob = pred["y_true"][keep], pred["prob"][keep]
    if prob.ndim == 2:  # ordinal: P(top category) is only meaningful as a binary score at K = 2
        if prob.shape[1] != 2:
            return {}
        prob = prob[:, 1]
    pos = pred["step"][keep] + 1
    out: dict[str, float] = {}
    for lo, hi in POSITION_BUCKETS:
        name = f"pos{lo}-{hi}" if hi else f"pos{lo}+"
        sel = (pos >= lo) & (pos <= hi if hi else True)
        for k, v in _bucket_metrics(y, prob, sel).items():
            out[f"{k}@{name}"] = v
    for k, v in _bucket_metrics(y, prob, pos >= 2).items():
        out[f"{k}@{FROM_SECOND}"] = v
    uid = pred["uid"][keep]
    total = np.array([lengths[int(u)] for u in uid]) if len(uid) else np.zeros(0)
    # one length per scored student, ties kept: quartiles of the students, not of the distinct
    # lengths (a set here put ~3/4 of ASSIST2009's and ASSIST2015's students in lenq1)
    per_student = np.array([lengths[int(u)] for u in np.unique(uid)] or [0])
    edges = np.quantile(per_student, [0.25, 0.5, 0.75])
    band = np.searchsorted(edges, total, side="left")  # 0..3: (min, e1], (e1, e2], ...
    for b in range(4):
        for k, v in _bucket_metrics(y, prob, band == b).items():
            out[f"{k}@lenq{b + 1}"] = v
    return out


def evaluate(
    model: KTModel,
    data: KTDataset,
    batch_size: int = 128,
    max_len: int = 200,
    device: str = "cpu",
    rows: str = "per_question",
    history: str = "window",
    stride: int = 1,
) -> dict[str, float]:
    """Metrics over scored positions (binary: AUC/acc/RMSE/log-loss; ordinal: QWK and friends)
    under one evaluation protocol.

    rows "per_question" (default): a problem expanded into consecutive rows (one per skill)
    counts once, by its first row (`question_rows`), the only one that saw no answer to it;
    `rows_merged` says how many rows that dropped. "per_row" scores every row, as the AKT and
    DKVMN papers do: row 2 of a question then sees row 1's answer to the same question, which
    raises the score without saying anything about the student. Without problem ids both are
    the same. history: see `predict`.
    """
    _check_protocol(rows, history)
    pred = predict(model, data, batch_size, max_len, device, history, stride)
    return _metrics(model, pred, rows)


def evaluate_protocols(
    model: KTModel,
    data: KTDataset,
    batch_size: int = 128,
    max_len: int = 200,
    device: str = "cpu",
    histories: tuple[str, ...] = ("window",),
    stride: int = 1,
) -> dict[str, dict[str, float]]:
    """`evaluate` under both row rules and each of `histories`: {"rows/history": metrics}; the
    default protocol's metrics also carry `history_breakdown` (AUC by history length).

    One prediction pass per history; "sliding" reuses the window pass when no log is longer
    than `max_len` (the two are then the same windows).
    """
    out, preds = {}, {}
    short = all(len(s) <= max_len for s in data.students)
    for history in histories:
        _check_protocol("per_row", history)
        same = "window" if short else history  # the windows that history really uses
        if same not in preds:
            preds[same] = predict(model, data, batch_size, max_len, device, same, stride)
        for rows in ROWS:
            out[f"{rows}/{history}"] = _metrics(model, preds[same], rows)
    if DEFAULT_PROTOCOL in out:
        lengths = {s.uid: len(s) for s in data.students}
        out[DEFAULT_PROTOCOL].update(history_breakdown(preds["window"], lengths))
    return out
