"""Generic training loop: AdamW or SGD, gradient clipping, early stopping, best checkpoint, resume.

The evaluation protocol (`predict`, `evaluate`, `evaluate_protocols`) lives in kt_lib.evaluate;
its names stay importable from here.

# B batch, L steps, K categories
The loop is model-agnostic: it sums what `model.loss(...)` returns (prediction loss plus the
model's own auxiliary terms) and logs every term per epoch in the history DataFrame.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from .checkpoint import config_record, load_checkpoint, save_json, save_model
from .config import from_dict, require
from .data.dataset import BatchLoader, KTDataset
from .evaluate import (  # noqa: F401 -- the protocol's names, importable from here as before
    DEFAULT_PROTOCOL,
    HISTORIES,
    ROWS,
    evaluate,
    evaluate_protocols,
    predict,
    question_rows,
)
from .fileio import load_json, locked
from .models.base import KTModel
from .nn.backend import check_backend, use_backend
from .runtime import keep_freed_memory, precision_context, resolve_precision


@dataclass
class TrainConfig:
    """Optimisation and bookkeeping settings of `fit`."""

    epochs: int = 10  # maximum epochs
    batch_size: int = 64  # training windows per step
    eval_batch_size: int = 128  # windows per evaluation step
    max_len: int = 200  # window length; longer logs are chunked, never truncated
    lr: float = 1e-3  # learning rate (of every parameter group a model does not set itself)
    weight_decay: float = 0.0  # AdamW's decoupled weight decay; SGD's L2 term
    grad_clip: float | None = 1.0  # max gradient norm (None: no clipping)
    # what one step's loss averages: "step" (the mean over the batch's scored steps) | "window"
    # (summed over each window's steps, averaged over windows: the DKVMN authors' loss, whose
    # sums MXNet's SGD rescales by 1 / batch), i.e. the gradient times the scored steps per
    # window; "window" trains on shuffled batches of `batch_size` windows and so without length
    # bucketing (`bucket` unused: it makes a batch's window count, and each step's weight, vary)
    loss_per: str = "step"
    optimizer: str = "adamw"  # adamw | sgd (with `momentum`: e.g. the DKVMN authors' recipe)
    momentum: float = 0.0  # SGD's momentum (sgd only)
    lr_decay: float = 1.0  # the rate is multiplied by this every `lr_decay_every` epochs...
    lr_decay_every: int = 0  # ... (0 with lr_decay 1: a constant rate)
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
    # fp32 | tf32 | bf16 (autocast) | auto (bf16 on a CPU with bf16 instructions, else fp32;
    # tf32 on CUDA); None: tf32 on CUDA, else fp32. Rows of studies record the resolved one.
    precision: str | None = None
    # torch.compile the model; it then runs the `reference` attention (kt_lib.nn.backend). Off:
    # on an H200 it made AKT 1.6x slower while 37 graph breaks were left (docs/gpu.md)
    compile: bool = False
    backend: str | None = None  # attention backend: reference | cpu | cuda; None: by device

    def validate(self) -> None:
        """Ranges of every field, before any work (`fit` checks the types first, by `from_dict`)."""
        finite = lambda x: x is not None and math.isfinite(x)  # noqa: E731
        require(self.epochs >= 1, f"TrainConfig.epochs must be >= 1, got {self.epochs}")
        require(self.seed >= 0, f"TrainConfig.seed must be >= 0, got {self.seed}")
        for name in ("batch_size", "eval_batch_size", "max_len", "patience"):
            v = getattr(self, name)
            require(v >= 1, f"TrainConfig.{name} must be >= 1, got {v}")
        require(
            finite(self.lr) and self.lr > 0, f"TrainConfig.lr must be finite > 0, got {self.lr}"
        )
        wd = self.weight_decay
        require(finite(wd) and wd >= 0, f"TrainConfig.weight_decay must be finite >= 0, got {wd}")
        clip = self.grad_clip
        require(
            clip is None or (finite(clip) and clip > 0),
            f"TrainConfig.grad_clip must be None (no clipping) or finite > 0, got {clip}",
        )
        require(
            self.loss_per in LOSS_PER,
            f"TrainConfig.loss_per must be one of {LOSS_PER}, got {self.loss_per!r}",
        )
        require(
            self.optimizer in OPTIMIZERS,
            f"TrainConfig.optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}",
        )
        mom = self.momentum
        require(finite(mom) and 0 <= mom < 1, f"TrainConfig.momentum must be in [0, 1), got {mom}")
        require(
            mom == 0 or self.optimizer == "sgd",
            f"TrainConfig.momentum {mom} is SGD's: it needs optimizer='sgd' (got "
            f"{self.optimizer!r})",
        )
        decay, every = self.lr_decay, self.lr_decay_every
        require(
            finite(decay) and 0 < decay <= 1, f"TrainConfig.lr_decay must be in (0, 1], got {decay}"
        )
        require(every >= 0, f"TrainConfig.lr_decay_every must be >= 0, got {every}")
        require(
            (decay == 1) == (every == 0),
            f"TrainConfig.lr_decay ({decay}) and lr_decay_every ({every}) go together: a decay "
            "below 1 every n >= 1 epochs, or 1 and 0 (a constant rate)",
        )
        require(self.bucket >= 0, f"TrainConfig.bucket must be >= 0, got {self.bucket}")
        require(
            self.metric is None or self.metric in STOPPING_METRICS,
            f"TrainConfig.metric must be None or one of {STOPPING_METRICS}, got {self.metric!r}",
        )
        try:
            torch.device(self.device)
        except (RuntimeError, ValueError) as exc:
            raise ValueError(f"TrainConfig.device: {exc}") from exc
        resolve_precision(self.precision, self.device)
        check_backend(self.backend)
        require(
            not self.compile or self.backend in (None, "reference"),
            f"TrainConfig.compile runs the reference attention (what the compiler fuses), so "
            f"backend={self.backend!r} would be ignored: leave backend None or 'reference'",
        )
        require(not self.resume or self.checkpoint, "resume=True needs a checkpoint prefix")

    @classmethod
    def recipe(cls, name: str = "workbook", **overrides) -> TrainConfig:
        """A named training recipe (`RECIPES`), with any field overridden."""
        if name not in RECIPES:
            raise ValueError(f"unknown training recipe {name!r}; expected one of {list(RECIPES)}")
        return cls(**{**RECIPES[name], **overrides})


# Named training recipes. "workbook": this package's defaults (AdamW 1e-3, length-bucketed
# batches of 64, clipping at 1, early stopping with patience 5). "akt_authors": AKT as its
# authors' code runs it (arghosh/AKT main.py/run.py): Adam at lr 1e-5 (AdamW with no weight
# decay is Adam), 24 windows per batch with no length bucketing, no gradient clipping, up to 300
# epochs, stopping 42 epochs after the best validation AUC; pair it with AKT's `authors` preset
# (d_ff 2048: the repository's load_model passes no d_ff, so the constructor's default applies).
RECIPES: dict[str, dict] = {
    "workbook": {},
    "akt_authors": dict(
        lr=1e-5, batch_size=24, bucket=0, grad_clip=None, weight_decay=0.0, epochs=300, patience=42
    ),
}


OPTIMIZERS = ("adamw", "sgd")
LOSS_PER = ("step", "window")


def objective(total: torch.Tensor, mask: torch.Tensor, loss_per: str = "step") -> torch.Tensor:
    """What a step differentiates: the model's loss `total` (a mean over the scored steps of
    `mask` [B, L]) as it is ("step"), or times the scored steps per window ("window": each
    window's steps summed, the windows averaged, as the DKVMN authors' MXNet loss). The whole
    total is scaled, a model's auxiliary terms with it, so their weights relative to the
    prediction loss stay as the model sets them."""
    if loss_per == "step":
        return total
    return total * (mask.sum() / mask.shape[0])  # no host sync


def make_optimizer(cfg: TrainConfig, groups: list[dict]) -> torch.optim.Optimizer:
    """`cfg`'s optimizer over the model's parameter groups; each group remembers its starting
    rate (`base_lr`), which `epoch_lr` decays."""
    if cfg.optimizer == "sgd":
        opt = torch.optim.SGD(
            groups, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )
    else:
        opt = torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=cfg.weight_decay)
    for group in opt.param_groups:
        group["base_lr"] = group["lr"]
    return opt


def epoch_lr(opt: torch.optim.Optimizer, cfg: TrainConfig, epoch: int) -> None:
    """Set each group's rate for `epoch`: base_lr * lr_decay ** (epoch // lr_decay_every) (a
    function of the epoch alone, so a resumed run continues the same schedule)."""
    factor = cfg.lr_decay ** (epoch // cfg.lr_decay_every) if cfg.lr_decay_every else 1.0
    for group in opt.param_groups:
        group["lr"] = group["base_lr"] * factor


# early-stopping metrics (higher is better); "auc"/"acc" for binary, "qwk"/"acc"/... for ordinal
STOPPING_METRICS = ("auc", "acc", "qwk", "adjacent_acc", "ordinal_acc", "macro_f1")
METRIC_ALIASES = {"ordinal_acc": "adjacent_acc"}  # old name of within-one-category accuracy


@dataclass
class FitResult:
    """What `fit` returns; `model` holds the best weights."""

    model: KTModel
    history: pd.DataFrame
    best_epoch: int
    best_metric: float
    seconds: float  # a resumed run's earlier processes included (history.attrs: earlier_seconds)


@contextlib.contextmanager
def seeded(seed: int, device: str = "cpu"):
    """Seed torch inside the block and restore the caller's RNG state afterwards: the CPU's,
    and the CUDA device's when `device` is one (`manual_seed` reseeds every CUDA generator)."""
    dev = torch.device(device)
    cuda = [dev.index or 0] if dev.type == "cuda" and torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        yield


PROGRESS_EVERY = 20  # steps between progress-bar loss updates (each one syncs with the GPU)


def _check_splits(model: KTModel, train: KTDataset, valid: KTDataset, metric: str) -> None:
    """Refuse, before any epoch, splits that cannot train or select a model."""
    require(len(train) > 0, "the training split holds no student")
    for name, data in (("training", train), ("validation", valid)):
        require(
            data.K == model.config.K,
            f"the {name} data have K={data.K} response categories but the model was built "
            f"for K={model.config.K}"
            + (" (a binary model)" if not model.ordinal else "")
            + "; build the model from the data (build_model(name, dataset=...))",
        )
    require(len(valid) > 0, "the validation split holds no student: early stopping needs one")
    K = model.config.K
    produced = ({"qwk", "acc", "adjacent_acc", "macro_f1"} | ({"auc"} if K == 2 else set())
                if model.ordinal else {"auc", "acc"})  # fmt: skip
    require(
        metric in produced,
        f"TrainConfig.metric={metric!r}: the validation of "
        + (f"an ordinal model at K={K}" if model.ordinal else "a binary model")
        + f" gives {sorted(produced)}",
    )
    if metric == "auc":
        seen = np.unique(np.concatenate([s.r for s in valid.students]))
        require(
            len(seen) > 1,
            f"the validation split holds only responses {seen.tolist()}: AUC is undefined "
            "there; use a larger validation split or TrainConfig.metric='acc'",
        )


def _resumable(cfg: TrainConfig, model: KTModel) -> bool:
    """Whether `<checkpoint>_last` can be resumed: it exists, its epochs ran on this kind of
    device at this precision and under `model`'s config (a preset edited while the run was in
    flight keeps its run key and the checkpoint's name), and the best epoch's pair it names
    exists (gone, e.g. removed by another process, the run starts afresh with a warning: its best
    weights could not be returned)."""
    last = _prefix(cfg, "last").with_suffix(".json")
    if not last.exists():
        return False
    meta = load_json(last)
    saved = meta.get("config") or {}
    now = json.loads(json.dumps(config_record(model), default=str))  # as save_json stores it
    changed = sorted(k for k in saved.keys() & now.keys() if saved[k] != now[k])
    if changed:  # fields added since the checkpoint are not compared: they had no value then
        said = ", ".join(f"{k} {saved[k]!r} (now {now[k]!r})" for k in changed)
        warnings.warn(
            f"{last}: its epochs ran under another config ({said}); the run starts from epoch 0",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    made = {k: meta[k] for k in _made_on(cfg) if k in meta}  # older checkpoints: not recorded
    if made and made != _made_on(cfg):  # one run's epochs on one kind of device, one precision
        warnings.warn(
            f"{last}: its epochs ran on {made} and this run is on {_made_on(cfg)}; the run "
            "starts from epoch 0 (a run of two devices' epochs would land as one device's row)",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    best_epoch, best = meta.get("best_epoch", -1), _prefix(cfg, "best")
    if best_epoch >= 0 and not best.with_suffix(".pt").exists():
        warnings.warn(
            f"{last}: its best epoch ({best_epoch}) has no {best.with_suffix('.pt')}; the run "
            "starts from epoch 0 (the same draws: it ends as an uninterrupted run)",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True


def _made_on(cfg: TrainConfig) -> dict:
    """What an epoch checkpoint records of where its epochs ran: the device kind and precision."""
    precision = resolve_precision(cfg.precision, cfg.device)
    return {"device_kind": torch.device(cfg.device).type, "precision": precision}


def _prefix(cfg: TrainConfig, kind: str) -> Path:
    """`<checkpoint>_<kind>` with a placeholder suffix, which the pair's `.pt` and `.json`
    replace: a dot in the prefix (`akt_lr0.001`) stays in the name rather than being taken for
    the suffix (best and last would then share one file)."""
    return Path(f"{cfg.checkpoint}_{kind}.pair")


def fit(
    model: KTModel,
    train: KTDataset,
    valid: KTDataset,
    config: TrainConfig | None = None,
    on_epoch: Callable[[int, dict], None] | None = None,
    **overrides,
) -> FitResult:
    """Train with early stopping on the validation metric; returns the best model and history.

    `on_epoch(epoch, row)` sees each epoch's history row (train terms, valid metrics) as it is
    made; it may raise to stop the run (e.g. Optuna's pruning, `kt_lib.runs.search`). With a
    `checkpoint`, one process at a time trains it: a second one is refused (a ValueError naming
    the lock) rather than write the same epoch files."""
    # types and ranges of every field checked before any work (errors name the field)
    cfg = from_dict(TrainConfig, {**asdict(config or TrainConfig()), **overrides}, "TrainConfig")
    claim = locked(Path(f"{cfg.checkpoint}.claim"), wait=False) if cfg.checkpoint else None
    with claim or contextlib.nullcontext():  # the claim's file goes in remove_checkpoint
        return _fit(model, train, valid, cfg, on_epoch)


def _fit(
    model: KTModel,
    train: KTDataset,
    valid: KTDataset,
    cfg: TrainConfig,
    on_epoch: Callable[[int, dict], None] | None,
) -> FitResult:
    """`fit`'s body, on the parsed config (and the run's claim held, with a checkpoint)."""
    metric = cfg.metric or ("qwk" if model.ordinal and model.config.K > 2 else "auc")
    metric = METRIC_ALIASES.get(metric, metric)
    _check_splits(model, train, valid, metric)
    if cfg.keep_freed_memory and cfg.device == "cpu":
        keep_freed_memory()
    model.to(cfg.device)
    bucket = 0 if cfg.loss_per == "window" else cfg.bucket  # whole batches of windows
    loader = BatchLoader(train, cfg.batch_size, cfg.max_len, shuffle=True, seed=cfg.seed,
                         bucket=bucket)  # fmt: skip
    step = torch.compile(model) if cfg.compile else model
    cuda = torch.device(cfg.device).type == "cuda"
    rows: list[dict] = []
    best = {"metric": -np.inf, "epoch": -1, "state": None}
    start_epoch, waited = 0, 0
    earlier = 0.0  # seconds the run spent before a resume, in the processes before this one
    t0 = time.perf_counter()

    with (
        seeded(cfg.seed, cfg.device),
        use_backend(cfg.backend),
        precision_context(cfg.precision, cfg.device),
    ):
        tp = time.perf_counter()
        model.prepare(train)  # may set what the parameter groups depend on (SimAKT's influence)
        for note in model.schedule_notes(cfg.epochs):  # e.g. a warm-up longer than the run
            warnings.warn(note, UserWarning, stacklevel=3)
        prepare_seconds = time.perf_counter() - tp  # SimAKT: its memory banks
        opt = make_optimizer(cfg, model.param_groups(cfg.lr))
        if cfg.resume and _resumable(cfg, model):
            meta, tensors = load_checkpoint(_prefix(cfg, "last"), cfg.device)  # hash-checked
            model.load_state_dict(tensors["model"])
            model.load_extra_state(tensors.get("extra", {}))
            bases = [g["base_lr"] for g in opt.param_groups]
            opt.load_state_dict(tensors["optimizer"])
            for group, base in zip(opt.param_groups, bases, strict=True):  # checkpoints from
                group["base_lr"] = base  # before the schedule have none: this run's starting rates
            rows = meta["history"]
            start_epoch, waited = meta["epoch"] + 1, meta["waited"]
            # checkpoints before "seconds" was saved: their epochs' training time (no evaluation)
            earlier = float(meta.get("seconds", sum(r.get("train_seconds", 0.0) for r in rows)))
            best.update(metric=meta["best_metric"], epoch=meta["best_epoch"])
            torch.manual_seed(cfg.seed + start_epoch)
            if waited >= cfg.patience:  # it had stopped early (killed before returning)
                start_epoch = cfg.epochs
        for epoch in range(start_epoch, cfg.epochs):
            torch.manual_seed(cfg.seed + epoch)  # resumed runs replay the same dropout masks
            epoch_lr(opt, cfg, epoch)
            model.train()
            model.on_epoch_start(epoch, train)
            loader.set_epoch(epoch)
            if cuda:
                torch.cuda.reset_peak_memory_stats(cfg.device)
            sums: dict[str, torch.Tensor] = {}  # on the device: no host sync per step
            bar = tqdm(loader, desc=f"epoch {epoch}", disable=not cfg.progress, leave=False)
            te = time.perf_counter()
            for i, batch in enumerate(bar):
                batch = batch.to(cfg.device, non_blocking=True)
                terms = model.loss(step(batch), batch, epoch)
                opt.zero_grad(set_to_none=True)
                objective(terms["total"], batch.mask, cfg.loss_per).backward()
                if cfg.grad_clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()
                for k, v in terms.items():
                    v = v.detach().float()
                    sums[k] = sums[k] + v if k in sums else v
                if cfg.progress and i % PROGRESS_EVERY == 0:  # the only per-step sync
                    bar.set_postfix(loss=f"{float(terms['total'].detach()):.4f}")
            row = {
                "epoch": epoch,
                **{f"train_{k}": float(v) / len(loader) for k, v in sums.items()},
            }
            row["train_seconds"] = time.perf_counter() - te
            if cuda:
                row["peak_gpu_mb"] = torch.cuda.max_memory_allocated(cfg.device) / 2**20
            ev = evaluate(model, valid, cfg.eval_batch_size, cfg.max_len, cfg.device)
            row.update({f"valid_{k}": v for k, v in ev.items()})
            rows.append(row)
            if on_epoch is not None:
                on_epoch(epoch, row)
            if cfg.verbose:
                shown = {k: round(v, 4) for k, v in row.items() if isinstance(v, float)}
                print(f"{model.registry_name} epoch {epoch}: {shown}", flush=True)
            score = row[f"valid_{metric}"]
            if not math.isfinite(score):
                warnings.warn(
                    f"epoch {epoch}: validation {metric} is {score}; this epoch cannot be "
                    "selected as the best",
                    stacklevel=2,
                )
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
                        "seconds": earlier + time.perf_counter() - t0,
                        **_made_on(cfg),
                    },
                )
            if waited >= cfg.patience:
                break

    if best["state"] is not None:
        model.load_state_dict(best["state"])
        model.load_extra_state(best["extra"])
    elif cfg.checkpoint and best["epoch"] >= 0 and _prefix(cfg, "best").with_suffix(".pt").exists():
        # the best epoch came before a resume (a fresh run whose every score was NaN has none:
        # a `_best` file there is another run's)
        _, tensors = load_checkpoint(_prefix(cfg, "best"), cfg.device)
        model.load_state_dict(tensors["model"])
        model.load_extra_state(tensors.get("extra", {}))
    elif best["epoch"] >= 0:  # resumed, its best epoch before the resume, and no file of it
        raise ValueError(
            f"{_prefix(cfg, 'best').with_suffix('.pt')} is missing: the best epoch "
            f"({best['epoch']}) came before the resume and its weights are gone (another "
            "process removed them?); the last epoch's weights would be reported under its name"
        )
    model.eval()
    history = pd.DataFrame(rows)
    history.attrs["prepare_seconds"] = prepare_seconds
    history.attrs["earlier_seconds"] = earlier  # > 0: resumed from an epoch checkpoint
    if cfg.checkpoint:
        save_json(Path(f"{cfg.checkpoint}_history.json"), {"history": rows})
    seconds = earlier + time.perf_counter() - t0  # a resumed run's processes all counted
    return FitResult(model, history, int(best["epoch"]), float(best["metric"]), seconds)
