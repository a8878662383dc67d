"""One call from data to a results row: build a model, fit it, evaluate on the test set.

Notebooks and the leaderboard use `run_experiment`; `python -m kt_lib.experiment` does the same
from the command line (e.g. on a GPU machine) and writes a JSON results file.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, field

import pandas as pd
import torch

from .data.dataset import KTDataset
from .fileio import save_json
from .models import build_model
from .models.base import KTModel
from .train import DEFAULT_PROTOCOL, TrainConfig, evaluate, evaluate_protocols, fit


@dataclass
class ExperimentResult:
    """A trained model with its history and its validation and test metrics."""

    name: str
    model: KTModel
    history: pd.DataFrame
    valid: dict
    test: dict
    seconds: float
    n_params: int
    best_epoch: int
    config: dict = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)  # the model's own figures on test data
    protocols: dict = field(default_factory=dict)  # "rows/history" -> test metrics

    def row(self) -> dict:
        """Flat dict for a results table: test_<metric> under the default protocol
        (per_question/window), and the headline metric under each other protocol evaluated as
        test_<metric>@<rows>/<history>."""
        headline = "qwk" if self.model.ordinal else "auc"
        return {
            "model": self.name,
            **{f"test_{k}": v for k, v in self.test.items() if k != "n"},
            "protocol": DEFAULT_PROTOCOL,
            **{
                f"test_{headline}@{name}": m[headline]
                for name, m in self.protocols.items()
                if name != DEFAULT_PROTOCOL
            },
            "best_epoch": self.best_epoch,
            "params": self.n_params,
            "train_seconds": round(self.seconds, 1),
            "prepare_seconds": round(float(self.history.attrs.get("prepare_seconds", 0.0)), 2),
            "threads": torch.get_num_threads(),
            **{f"diag_{k}": v for k, v in self.diagnostics.items()},
        }


def run_experiment(
    model_name: str,
    train: KTDataset,
    valid: KTDataset,
    test: KTDataset | None,
    preset: str = "default",
    model_config=None,
    train_config: TrainConfig | None = None,
    seed: int = 0,
    label: str | None = None,
    histories: tuple[str, ...] = ("window",),
    on_epoch=None,
    **model_overrides,
) -> ExperimentResult:
    """Seeded build + fit + test evaluation of one registered model.

    The test set is scored under both row rules (per_question, per_row) and each evaluation
    history in `histories` (window; add "sliding" for the papers' protocol, see `predict`);
    `test` holds the default protocol's metrics, `protocols` all of them. `on_epoch` goes to
    `fit` (it sees each epoch's history row)."""
    cfg = train_config or TrainConfig()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(
            model_name, model_config, dataset=train, preset=preset, **model_overrides
        )
    res = fit(model, train, valid, cfg, on_epoch=on_epoch, seed=seed)
    ev = dict(batch_size=cfg.eval_batch_size, max_len=cfg.max_len, device=cfg.device)
    valid_m = evaluate(res.model, valid, **ev)
    protocols = {}
    if test is not None:
        histories = tuple(dict.fromkeys(("window", *histories)))  # the default always
        protocols = evaluate_protocols(res.model, test, histories=histories, **ev)
    test_m = protocols.get(DEFAULT_PROTOCOL, {})
    n_params = sum(p.numel() for p in res.model.parameters())
    diagnostics = res.model.diagnostics(test, **ev) if test is not None else {}
    return ExperimentResult(
        label or model_name,
        res.model,
        res.history,
        valid_m,
        test_m,
        res.seconds,
        n_params,
        res.best_epoch,
        asdict(model.config),
        diagnostics,
        protocols,
    )


def main(argv: list[str] | None = None) -> None:
    from .runs.data import DataSpec

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
    p.add_argument("--preset", default="paper")
    p.add_argument(
        "--recipe",
        default="workbook",
        help="training recipe (TrainConfig.recipe): workbook | akt_authors; flags below override",
    )
    p.add_argument("--epochs", type=int, default=None, help="default: 30 (workbook recipe)")
    p.add_argument("--patience", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--max-len", type=int, default=200)
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
    p.add_argument("--set", nargs="*", default=[], help="model overrides key=value (YAML values)")
    p.add_argument("--out", default="results.json")
    a = p.parse_args(argv)
    import yaml

    overrides = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in a.set)}
    try:
        data = DataSpec(a.data_dir, a.data_format, a.fold)
    except ValueError as exc:
        p.error(str(exc))
    a.data_format = data.data_format
    bundle = data.load()
    rows = []
    for name in a.models:
        for seed in a.seeds:
            t0 = time.perf_counter()
            given = dict(epochs=a.epochs, patience=a.patience, batch_size=a.batch_size, lr=a.lr)
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
                progress=False,
                verbose=True,
            )
            res = run_experiment(
                name,
                bundle.train,
                bundle.valid,
                bundle.test,
                a.preset,
                train_config=tc,
                seed=seed,
                histories=tuple(a.histories),
                **overrides,
            )
            row = {
                "dataset": data.name,
                **res.row(),
                "seed": seed,
                "wall_seconds": time.perf_counter() - t0,
                "valid": res.valid,
                "protocols": res.protocols,
                "history": res.history.to_dict(orient="list"),
            }
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "history"}), flush=True)
            save_json(a.out, {"args": vars(a), "protocol": bundle.protocol, "results": rows})


if __name__ == "__main__":
    main()
