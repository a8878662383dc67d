"""One run from a `RunSpec` to its result: seeded build, fit, evaluation of valid and test.

    result = run_experiment(RunSpec("akt", "paper", seed=1, train=cfg), bundle)

`run_model` keeps the keyword signature notebooks use (`kt_lib.runs.experiment.run_model`):
a thin wrapper that builds the spec. `kt run` (`main`) does the same from
the command line and writes a results file of `RunRecord` rows.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd
import torch
import yaml

from ..data.dataset import KTDataset
from ..fileio import save_json
from ..models import build_model
from ..models.base import KTModel
from ..nn import native
from ..nn.backend import use_backend
from ..provenance import device_name, run_commit
from ..runtime import check_device
from ..train import (
    DEFAULT_PROTOCOL,
    LOSS_PER,
    TrainConfig,
    evaluate,
    evaluate_protocols,
    fit,
    seeded,
)
from .data import DataSpec
from .record import RunRecord, now, preset_digest, preset_settings
from .spec import DEFAULT_PRESET, EvalConfig, RunSpec, train_record, train_settings


class Splits(NamedTuple):
    """Train/valid/test of a run (a `Bundle` serves as well); test None: not evaluated."""

    train: KTDataset
    valid: KTDataset
    test: KTDataset | None


@dataclass
class ExperimentResult:
    """A trained model with its history and its validation and test metrics."""

    name: str
    model: KTModel | None  # None once the model stayed in a worker process
    history: pd.DataFrame
    valid: dict
    test: dict
    seconds: float
    n_params: int
    best_epoch: int
    config: dict = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)  # the model's own figures on test data
    protocols: dict = field(default_factory=dict)  # "rows/history" -> test metrics
    ordinal: bool = False  # the model predicts K > 2 categories

    @property
    def earlier_seconds(self) -> float:
        """Seconds this run trained in earlier processes (resumed from an epoch checkpoint)."""
        return float(self.history.attrs.get("earlier_seconds", 0.0))

    @property
    def headline(self) -> str:
        return "qwk" if self.ordinal else "auc"

    def figures(self) -> dict[str, Any]:
        """The result's columns of a `RunRecord` row: test_<metric> under the default protocol
        (per_question/window), the headline metric under each other protocol evaluated as
        test_<metric>@<rows>/<history>, valid_<headline>, epochs, size, seconds, diagnostics."""
        h = self.headline
        return {
            **{f"test_{k}": v for k, v in self.test.items() if k != "n"},
            **{
                f"test_{h}@{name}": m[h]
                for name, m in self.protocols.items()
                if name != DEFAULT_PROTOCOL
            },
            f"valid_{h}": self.valid.get(h, math.nan),
            "best_epoch": self.best_epoch,
            "epochs": len(self.history),
            "params": self.n_params,
            "train_seconds": round(self.seconds, 1),
            "prepare_seconds": round(float(self.history.attrs.get("prepare_seconds", 0.0)), 2),
            "threads": torch.get_num_threads(),
            **{f"diag_{k}": v for k, v in self.diagnostics.items()},
        }

    def row(self) -> dict:
        """Flat dict for a notebook's table: model, the figures and the default protocol."""
        return {"model": self.name, "protocol": DEFAULT_PROTOCOL, **self.figures()}


def run_experiment(spec: RunSpec, bundle, on_epoch=None) -> ExperimentResult:
    """Seeded build + fit + evaluation of one run on `bundle` (train/valid/test; test None: not
    scored). The test set is scored under both row rules and each of `spec.eval.histories`;
    `test` holds the default protocol's metrics, `protocols` all of them. `on_epoch` goes to
    `fit` (it sees each epoch's history row)."""
    with seeded(spec.seed, spec.train.device):
        model = build_model(
            spec.model, spec.config, dataset=bundle.train, preset=spec.preset, **spec.fields
        )
    res = fit(model, bundle.train, bundle.valid, spec.train, on_epoch=on_epoch, seed=spec.seed)
    ev = spec.eval.loader()
    protocols, diagnostics, test = {}, {}, bundle.test
    # scored with the run's attention backend (equal to float rounding; the setting applies to
    # every pass of the run), in full precision (a bf16 run is scored in fp32 on purpose)
    with use_backend(spec.train.backend):
        valid_m = evaluate(res.model, bundle.valid, **ev)
        if test is not None:
            protocols = evaluate_protocols(
                res.model, test, histories=spec.eval.histories, stride=spec.eval.stride, **ev
            )
            diagnostics = res.model.diagnostics(test, **ev)
    return ExperimentResult(
        spec.name,
        res.model,
        res.history,
        valid_m,
        protocols.get(DEFAULT_PROTOCOL, {}),
        res.seconds,
        sum(p.numel() for p in res.model.parameters()),
        res.best_epoch,
        asdict(model.config),
        diagnostics,
        protocols,
        bool(res.model.ordinal),
    )


def run_model(
    model_name: str,
    train: KTDataset,
    valid: KTDataset,
    test: KTDataset | None,
    preset: str = DEFAULT_PRESET,
    model_config=None,
    train_config: TrainConfig | None = None,
    seed: int = 0,
    label: str | None = None,
    histories: tuple[str, ...] = ("window",),
    on_epoch=None,
    **model_fields,
) -> ExperimentResult:
    """`run_experiment` with keywords (notebooks): model config fields as keyword arguments."""
    cfg = train_config or TrainConfig()
    spec = RunSpec(
        model_name,
        preset,
        model_fields,
        model_config,
        seed,
        label,
        cfg,
        EvalConfig.of(cfg, histories),
    )
    return run_experiment(spec, Splits(train, valid, test), on_epoch=on_epoch)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Train registered models and write test metrics.")
    p.add_argument("--models", nargs="+", required=True)
    p.add_argument("--data-dir", default=None, help="dataset folder or file (default: simulator)")
    p.add_argument(
        "--data-format",
        default=None,
        help="auto | line3 | line4 | pykt | log | synthetic (default: auto with --data-dir, "
        "else synthetic)",
    )
    p.add_argument("--fold", type=int, default=None)
    p.add_argument(
        "--columns",
        default=None,
        help="an interaction log's column map, ROLE=COLUMN,... (roles: user, skill, problem, "
        "correct, order), e.g. user=student,problem=question,order=timestamp; by default the "
        "usual names are recognised (docs/data.md)",
    )
    p.add_argument(
        "--preset",
        default=None,
        help=f"tiny | default | paper | a named one (default: paper on real data, "
        f"{DEFAULT_PRESET} on the simulator)",
    )
    p.add_argument(
        "--recipe",
        default="workbook",
        help="training recipe (TrainConfig.recipe): workbook | akt_authors; flags below override",
    )
    p.add_argument(
        "--epochs", type=at_least_one, default=None, help="default: 30 (workbook recipe)"
    )
    p.add_argument("--patience", type=at_least_one, default=None)
    p.add_argument("--batch-size", type=at_least_one, default=None)
    p.add_argument("--lr", type=positive_float, default=None)
    p.add_argument("--weight-decay", type=float, default=None)
    p.add_argument("--grad-clip", type=positive_float, default=None, help="max gradient norm")
    p.add_argument(
        "--loss-per",
        default=None,
        choices=LOSS_PER,
        help="a step's loss: the mean over scored steps (default), or summed per window and "
        "averaged over windows (the DKVMN authors' MXNet loss)",
    )
    p.add_argument(
        "--optimizer",
        default=None,
        choices=["adamw", "sgd"],
        help="default: adamw; sgd takes --momentum (an author's recipe, e.g. DKVMN's)",
    )
    p.add_argument("--momentum", type=float, default=None, help="SGD's momentum")
    p.add_argument(
        "--lr-decay",
        type=positive_float,
        default=None,
        help="multiply the rate by this every --lr-decay-every epochs",
    )
    p.add_argument("--lr-decay-every", type=at_least_one, default=None)
    p.add_argument("--max-len", type=at_least_one, default=200)
    p.add_argument(
        "--histories",
        nargs="+",
        default=["window"],
        choices=["window", "sliding"],
        help="evaluation histories of the test set (both row rules are always scored)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument(
        "--precision",
        default=None,
        choices=["fp32", "tf32", "bf16"],
        help="default: tf32 on CUDA, fp32 on CPU",
    )
    p.add_argument(
        "--backend",
        default=None,
        choices=["reference", "cpu", "cuda"],
        help="attention backend (default: by device)",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        help="model fields key=value (YAML values), for every model; MODEL.key=value for one "
        "(e.g. simakt.similarity=knn_only beside dtransformer)",
    )
    p.add_argument(
        "--out",
        default="results.json",
        help="results file; an existing one keeps its rows (a rerun of the same dataset, fold, "
        "model, seed and preset replaces its row)",
    )
    p.add_argument("--overwrite", action="store_true", help="start --out afresh")
    return p


def at_least_one(text: str) -> int:
    """argparse type: an integer >= 1 (argparse names the flag in its error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be finite > 0, got {text}")
    return value


def model_fields(items: list[str], models: list[str]) -> dict[str, dict]:
    """--set items -> each model's fields: `key=value` for every model, `model.key=value` for
    the named one (which must be among `models`); values are YAML."""
    out: dict[str, dict] = {m: {} for m in models}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected key=value or model.key=value")
        model, dot, field_name = key.rpartition(".")
        if dot and model not in out:
            raise ValueError(f"--set {item!r}: {model!r} is not one of --models {models}")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or exc
            raise ValueError(f"--set {item!r}: the value is not YAML ({problem})") from None
        for m in [model] if dot else models:
            out[m][field_name if dot else key] = parsed
    return out


def column_map(text: str | None) -> dict[str, str]:
    """`--columns user=student,order=timestamp` -> reader keywords; unknown roles refused."""
    if not text:
        return {}
    roles = ("user", "skill", "problem", "correct", "order")
    out = {}
    for item in text.split(","):
        role, sep, col = item.partition("=")
        role, col = role.strip(), col.strip()
        if not sep or role not in roles or not col:
            raise ValueError(
                f"--columns {text!r}: {item!r} is not ROLE=COLUMN with ROLE in {roles}"
            )
        out[role] = col
    return out


def _row_key(row: dict) -> tuple:
    """What makes an experiment row the same run: a rerun replaces it in --out. The --set
    fields and the training settings are part of it: a run with another dropout or learning
    rate is another run, kept beside the first."""
    same = tuple(row.get(k) for k in ("dataset", "fold", "model", "seed", "preset"))
    settings = {k: row.get(k) or {} for k in ("set", "train")}
    return (*same, json.dumps(settings, sort_keys=True, default=str))


def _check_out(out: str) -> None:
    """--out must be a file in an existing folder: found before the runs, not after them."""
    path = Path(out)
    if path.is_dir():
        raise ValueError(f"--out {out}: is a folder; name a results file such as {out}/runs.json")
    if not path.parent.is_dir():
        raise ValueError(f"--out {out}: the folder {path.parent} does not exist")


def _kept_rows(out: str, overwrite: bool) -> list[dict]:
    """The rows already in `out` (none with --overwrite or no file); a file that is not a
    results file is refused, never replaced."""
    path = Path(out)
    if overwrite or not path.exists():
        return []
    try:
        rows = json.loads(path.read_text())["results"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"--out {out}: not a results file ({exc}); pass --overwrite to replace it"
        ) from None
    return list(rows)


def main(argv: list[str] | None = None) -> None:

    p = _parser()
    a = p.parse_args(argv)
    for flag, values in (("--models", a.models), ("--seeds", a.seeds)):
        twice = sorted({str(v) for v in values if values.count(v) > 1})
        if twice:  # the same run twice: trained twice, stored as one row
            p.error(f"{flag} names {', '.join(twice)} more than once")
    try:
        _check_out(a.out)
        check_device(a.device)
        per_model = model_fields(a.set, a.models)
    except ValueError as exc:
        p.error(str(exc))
    if a.columns and a.data_format not in (None, "log", "auto"):  # the other readers take none
        p.error(
            f"--columns names the columns of a log file (--data-format log), not {a.data_format}"
        )
    try:
        data = DataSpec(a.data_dir, a.data_format, a.fold, kw=column_map(a.columns))
    except ValueError as exc:
        p.error(str(exc))
    a.data_format = data.data_format
    if a.preset is None:  # real data gets the published sizes, the simulator smoke sizes
        a.preset = DEFAULT_PRESET if data.synthetic else "paper"
        print(f"note: no --preset, so every model is {a.preset!r}", file=sys.stderr)
    given = dict(epochs=a.epochs, patience=a.patience, batch_size=a.batch_size, lr=a.lr)
    given |= dict(weight_decay=a.weight_decay, grad_clip=a.grad_clip, optimizer=a.optimizer)
    given |= dict(momentum=a.momentum, lr_decay=a.lr_decay, lr_decay_every=a.lr_decay_every)
    given |= dict(loss_per=a.loss_per)
    given = {k: v for k, v in given.items() if v is not None}
    if a.recipe == "workbook":
        given.setdefault("epochs", 30)
    tc = TrainConfig.recipe(
        a.recipe,
        **given,
        max_len=a.max_len,
        device=a.device,
        precision=a.precision,
        backend=a.backend,
        compile=a.compile,
        progress=sys.stderr.isatty(),  # a bar per epoch at a terminal, none in logs
        verbose=True,
    )
    try:  # combinations (momentum needs sgd, a decay its period) before any data is read
        tc.validate()
    except ValueError as exc:
        p.error(str(exc))
    specs = [
        RunSpec(
            name,
            a.preset,
            per_model[name],
            seed=seed,
            train=tc,
            eval=EvalConfig.of(tc, a.histories),
        )
        for name in a.models
        for seed in a.seeds
    ]
    for spec in specs:  # a typo in --set fails before the first run
        spec.validate()
    kept = _kept_rows(a.out, a.overwrite)
    if kept:
        print(f"note: {a.out} holds {len(kept)} row(s); new rows are added", file=sys.stderr)
    bundle, rows, commit = data.load(), [], run_commit()
    for spec in specs:
        t0 = time.perf_counter()
        with native.track() as used:
            res = run_experiment(spec, bundle)
        record = RunRecord(
            spec.name,
            spec.seed,
            data.name,
            data.fold,
            preset=spec.preset,
            figures=res.figures(),
            data_format=data.data_format,
            protocol=bundle.protocol,
            preset_digest=None
            if spec.config is not None
            else preset_digest(spec.model, spec.preset),
            preset_settings=None
            if spec.config is not None
            else preset_settings(spec.model, spec.preset, own=spec.fields),
            wall_seconds=time.perf_counter() - t0 + res.earlier_seconds,
            device_name=device_name(tc.device),
            native=native.named(used),
            commit=commit,
            date=now(),
            train=train_record(train_settings(tc), tc),  # as a study's rows
        )
        row = {**record.row(), "valid": res.valid, "protocols": res.protocols}
        row["set"] = dict(spec.fields)  # the --set fields (part of the row's key)
        row["history"] = res.history.to_dict(orient="list")
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "history"}), flush=True)
        new = {_row_key(r) for r in rows}
        if _row_key(row) in {_row_key(r) for r in kept}:
            print(f"note: replaces the earlier row of {spec.name} seed {spec.seed} in {a.out}",
                  file=sys.stderr)  # fmt: skip
        merged = [r for r in kept if _row_key(r) not in new] + rows
        save_json(a.out, {"args": vars(a), "protocol": bundle.protocol, "results": merged})


if __name__ == "__main__":
    main()
