"""Generic training loop: AdamW, gradient clipping, early stopping, best checkpoint, resume.

# B batch, L steps, K categories
The loop is model-agnostic: it sums what `model.loss(...)` returns (prediction loss plus the
model's own auxiliary terms) and logs every term per epoch in the history DataFrame.
"""

from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from .checkpoint import load_json, load_tensors, save_json, save_model
from .config import require
from .data.dataset import BatchLoader, KTDataset
from .metrics import binary_metrics, ordinal_metrics
from .models.base import KTModel
from .runtime import keep_freed_memory


@dataclass
class TrainConfig:
    """Optimisation and bookkeeping settings of `fit`."""

    epochs: int = 10  # maximum epochs
    batch_size: int = 64  # training windows per step
    eval_batch_size: int = 128  # windows per evaluation step
    max_len: int = 200  # window length; longer logs are chunked, never truncated
    lr: float = 1e-3  # AdamW learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    grad_clip: float | None = 1.0  # max gradient norm (None: no clipping)
    patience: int = 5  # epochs without validation improvement before stopping
    seed: int = 0  # seeds shuffling and dropout inside fit (global RNG state is restored)
    device: str = "cpu"  # where to train
    checkpoint: str | None = None  # path prefix: writes <prefix>_best.* and <prefix>_last.*
    resume: bool = False  # continue from <prefix>_last.* when it exists
    progress: bool = True  # tqdm progress bars
    verbose: bool = False  # print one line per epoch (batch runs, logs)
    metric: str | None = None  # early-stopping metric; None: "auc" if K = 2, else "qwk"
    bucket: int = 50  # length-bucketed batches in pools of this many (0: plain); see BatchLoader
    keep_freed_memory: bool = True  # glibc: reuse freed large blocks, no page faults (runtime.py)

    def validate(self) -> None:
        require(self.epochs >= 1, f"epochs must be >= 1, got {self.epochs}")
        require(self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}")
        require(self.lr > 0, f"lr must be > 0, got {self.lr}")
        require(self.patience >= 1, f"patience must be >= 1, got {self.patience}")
        require(self.bucket >= 0, f"bucket must be >= 0, got {self.bucket}")
        require(not self.resume or self.checkpoint, "resume=True needs a checkpoint prefix")


@dataclass
class FitResult:
    """What `fit` returns; `model` holds the best weights."""

    model: KTModel
    history: pd.DataFrame
    best_epoch: int
    best_metric: float
    seconds: float


@torch.no_grad()
def predict(
    model: KTModel, data: KTDataset, batch_size: int = 128, max_len: int = 200, device: str = "cpu"
) -> dict[str, np.ndarray]:
    """Predictions on every valid position: y_true, prob ([n] or [n, K]), uid, step, q (and pid
    with problem ids)."""
    was_training = model.training
    model.eval()
    ys, ps, uids, steps, qs, pids = [], [], [], [], [], []
    for batch in BatchLoader(data, batch_size, max_len, shuffle=False):
        batch = batch.to(device)
        prob = model.probabilities(model(batch))
        m = batch.mask
        ys.append(batch.r[m].cpu())
        ps.append(prob[m].float().cpu())
        uids.append(batch.uid.unsqueeze(1).expand_as(m)[m].cpu())
        pos = batch.start.unsqueeze(1) + torch.arange(m.shape[1], device=m.device)
        steps.append(pos[m].cpu())
        qs.append(batch.q[m].cpu())
        if batch.pid is not None:
            pids.append(batch.pid[m].cpu())
    model.train(was_training)
    cat = lambda xs: torch.cat(xs).numpy()  # noqa: E731
    out = {"y_true": cat(ys), "prob": cat(ps), "uid": cat(uids), "step": cat(steps), "q": cat(qs)}
    if pids:
        out["pid"] = cat(pids)
    return out


def question_rows(pred: dict[str, np.ndarray]) -> np.ndarray:
    """Rows that open a question: False on a row that continues the previous row's problem with
    another skill.

    Formats that expand a multi-skill problem into one row per skill (the 4-line format, pykt)
    put its rows at consecutive steps, and row 2 of a problem sees row 1's response - the answer
    to the same question. Scoring only each question's first row (which saw no response to it)
    evaluates per question (GUIDE section 9). The same problem with the same skill at the next
    step is a new attempt and is kept. Rows come from `predict`, in (student, step) order.
    """
    keep = np.ones(len(pred["y_true"]), dtype=bool)
    if "pid" not in pred or len(keep) < 2:
        return keep
    uid, step, pid, q = pred["uid"], pred["step"], pred["pid"], pred["q"]
    same_problem = (uid[1:] == uid[:-1]) & (step[1:] == step[:-1] + 1) & (pid[1:] == pid[:-1])
    keep[1:] = ~(same_problem & (q[1:] != q[:-1]))
    return keep


def evaluate(
    model: KTModel,
    data: KTDataset,
    batch_size: int = 128,
    max_len: int = 200,
    device: str = "cpu",
    per_question: bool = True,
) -> dict[str, float]:
    """Metrics over valid positions (binary: AUC/acc/RMSE/log-loss; ordinal: QWK and friends).

    With problem ids and `per_question`, a problem expanded into consecutive rows (one per skill)
    counts once, by its first row (`question_rows`); `rows_merged` says how many rows that dropped.
    """
    pred = predict(model, data, batch_size, max_len, device)
    keep = question_rows(pred) if per_question else np.ones(len(pred["y_true"]), dtype=bool)
    y, prob = pred["y_true"][keep], pred["prob"][keep]
    metrics = ordinal_metrics(y, prob) if model.ordinal else binary_metrics(y, prob)
    if "pid" in pred:
        metrics["rows_merged"] = int((~keep).sum())
    return metrics


@contextlib.contextmanager
def seeded(seed: int):
    """Seed torch inside the block and restore the caller's RNG state afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _prefix(cfg: TrainConfig, kind: str) -> Path:
    return Path(f"{cfg.checkpoint}_{kind}")


def fit(
    model: KTModel,
    train: KTDataset,
    valid: KTDataset,
    config: TrainConfig | None = None,
    **overrides,
) -> FitResult:
    """Train with early stopping on the validation metric; returns the best model and history."""
    cfg = TrainConfig(**{**asdict(config or TrainConfig()), **overrides})
    cfg.validate()
    if cfg.keep_freed_memory and cfg.device == "cpu":
        keep_freed_memory()
    metric = cfg.metric or ("qwk" if model.ordinal and model.config.K > 2 else "auc")
    model.to(cfg.device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    loader = BatchLoader(
        train, cfg.batch_size, cfg.max_len, shuffle=True, seed=cfg.seed, bucket=cfg.bucket
    )
    rows: list[dict] = []
    best = {"metric": -np.inf, "epoch": -1, "state": None}
    start_epoch, waited = 0, 0
    t0 = time.perf_counter()

    with seeded(cfg.seed):
        model.prepare(train)
        if cfg.resume and _prefix(cfg, "last").with_suffix(".json").exists():
            tensors = load_tensors(_prefix(cfg, "last").with_suffix(".pt"), cfg.device)
            meta = load_json(_prefix(cfg, "last").with_suffix(".json"))
            model.load_state_dict(tensors["model"])
            model.load_extra_state(tensors.get("extra", {}))
            opt.load_state_dict(tensors["optimizer"])
            rows = meta["history"]
            start_epoch, waited = meta["epoch"] + 1, meta["waited"]
            best.update(metric=meta["best_metric"], epoch=meta["best_epoch"])
            torch.manual_seed(cfg.seed + start_epoch)
        for epoch in range(start_epoch, cfg.epochs):
            torch.manual_seed(cfg.seed + epoch)  # resumed runs replay the same dropout masks
            model.train()
            model.on_epoch_start(epoch, train)
            loader.set_epoch(epoch)
            sums: dict[str, float] = {}
            bar = tqdm(loader, desc=f"epoch {epoch}", disable=not cfg.progress, leave=False)
            te = time.perf_counter()
            for batch in bar:
                batch = batch.to(cfg.device)
                terms = model.loss(model(batch), batch, epoch)
                opt.zero_grad(set_to_none=True)
                terms["total"].backward()
                if cfg.grad_clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()
                for k, v in terms.items():
                    sums[k] = sums.get(k, 0.0) + float(v.detach())
                bar.set_postfix(loss=f"{float(terms['total'].detach()):.4f}")
            row = {"epoch": epoch, **{f"train_{k}": v / len(loader) for k, v in sums.items()}}
            row["train_seconds"] = time.perf_counter() - te
            row.update(
                {
                    f"valid_{k}": v
                    for k, v in evaluate(
                        model, valid, cfg.eval_batch_size, cfg.max_len, cfg.device
                    ).items()
                }
            )
            rows.append(row)
            if cfg.verbose:
                shown = {k: round(v, 4) for k, v in row.items() if isinstance(v, float)}
                print(f"{model.registry_name} epoch {epoch}: {shown}", flush=True)
            score = row[f"valid_{metric}"]
            if score > best["metric"]:
                best.update(
                    metric=score,
                    epoch=epoch,
                    state=copy.deepcopy(model.state_dict()),
                    extra=copy.deepcopy(model.extra_state()),
                )
                waited = 0
                if cfg.checkpoint:
                    save_model(_prefix(cfg, "best"), model, {"epoch": epoch, metric: score})
            else:
                waited += 1
            if cfg.checkpoint:
                save_model(
                    _prefix(cfg, "last"),
                    model,
                    optimizer=opt,
                    meta={
                        "epoch": epoch,
                        "waited": waited,
                        "history": rows,
                        "best_metric": best["metric"],
                        "best_epoch": best["epoch"],
                    },
                )
            if waited >= cfg.patience:
                break

    if best["state"] is not None:
        model.load_state_dict(best["state"])
        model.load_extra_state(best["extra"])
    elif cfg.checkpoint and _prefix(cfg, "best").with_suffix(".pt").exists():
        tensors = load_tensors(_prefix(cfg, "best").with_suffix(".pt"), cfg.device)
        model.load_state_dict(tensors["model"])
        model.load_extra_state(tensors.get("extra", {}))
    model.eval()
    history = pd.DataFrame(rows)
    if cfg.checkpoint:
        save_json(Path(f"{cfg.checkpoint}_history.json"), {"history": rows})
    return FitResult(
        model, history, int(best["epoch"]), float(best["metric"]), time.perf_counter() - t0
    )
