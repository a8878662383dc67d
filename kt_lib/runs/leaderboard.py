"""The model leaderboard: train a `LeaderboardPlan` into a resumable results file, dry-run it
before its GPU hours are spent, and print any results files as one table.

    kt leaderboard runs/assist2009.json runs/statics2011.json [--metrics ...]
        [--pairs simakt:dtransformer idkt:akt] [--merge-into OUT]

prints a markdown table for the README, mean ± std per dataset and model beside the published
figures (with `--pairs`, paired comparisons per dataset below it: kt_lib/runs/stats.py). Files
of several folds or datasets are concatenated; runs of one (dataset, model) pool over seeds and
folds.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from ..checkpoint import remove_checkpoint
from ..data.dataset import chunk, collate
from ..models import build_model
from ..provenance import run_commit
from ..train import TrainConfig
from .execute import ExecConfig, execute
from .plan import LeaderboardPlan, PlannedRun
from .record import RunRecord, now, preset_digest, preset_settings
from .results import add_runs, finished_runs, load_results, merge_files
from .spec import DEFAULT_PRESET, train_record
from .stats import compare_pairs, pairs_markdown
from .tables import METRICS, leaderboard, protocols, to_markdown


def run_leaderboard(
    datasets: Iterable[tuple[str | None, str | None]],
    models: Iterable[str],
    train_config: TrainConfig,
    preset: str = DEFAULT_PRESET,
    seeds: Iterable[int] = (0,),
    folds: int = 0,
    simulator: dict | None = None,
    overrides: dict[str, dict] | None = None,
    histories: Iterable[str] = ("window",),
    variants: dict[str, dict] | None = None,
    dataset_overrides: dict[str, dict[str, dict]] | None = None,
    progress: bool = True,
    results_file: str | Path | None = None,
    execution: ExecConfig | None = None,
) -> pd.DataFrame:
    """`run_plan` of `LeaderboardPlan.of(...)` (see both). `variants` names configurations of
    a registered model so that one profile can hold several of them, each a row label of its
    own that `models` may list: label -> {"model": registered name, **config fields}, e.g.
    {"ikt3_lambda0": {"model": "ikt3", "lambda_target": 0}}. `dataset_overrides` maps a dataset
    name to {model or variant label: fields} laid over everything else on that dataset alone,
    e.g. smaller SimAKT banks where the training students are few. Fields a model does not have
    are refused before any run."""
    plan = LeaderboardPlan.of(
        datasets, models, preset, seeds, folds, simulator, overrides, variants,
        dataset_overrides, histories,
    )  # fmt: skip
    return run_plan(plan, train_config, progress, results_file, execution)


def run_plan(
    plan: LeaderboardPlan,
    train_config: TrainConfig,
    progress: bool = True,
    results_file: str | Path | None = None,
    execution: ExecConfig | None = None,
    checkpoint_dir: str | Path | None = None,
) -> pd.DataFrame:
    """Train every run of `plan`; `RunRecord` rows in plan order, each with the run's
    `wall_seconds`, `device_name` (GPU or CPU model) and the workbook's git `commit`. A variant's
    rows carry its label as `model` and the registered name as `variant_of`, so
    `compare_pairs` pairs it like any model.

    With `results_file` the run is resumable: each finished run is merged into that JSON file
    (file lock, atomic rewrite; `load_results` reads it), and runs already in it with the same
    `run_key` are not trained again (failed ones are), nor are those another process filling
    the same file finishes before this one starts them. `checkpoint_dir` gives each run (one
    worker or several) an epoch checkpoint of its own there, named by its `run_key`, resumed from
    when the same run is started again after a kill and removed once its row is written.

    `execution` (`runs.execute.ExecConfig`) says how runs train: its `workers` at a time in
    worker processes, each loading its data once, or as Ray tasks. A failed run gives a row
    with its `error` and `traceback` (on_error="raise": stop at the first)."""
    path = Path(results_file) if results_file is not None else None
    done = finished_runs(path)
    rows: list[dict | None] = []
    todo: list[tuple[int, PlannedRun]] = []
    for run in plan.runs(train_config):
        rows.append(done.get(run.key))
        if run.key not in done:
            todo.append((len(rows) - 1, _with_checkpoint(run, checkpoint_dir)))
        elif checkpoint_dir is not None:  # finished elsewhere (a GPU lease): a stale epoch
            remove_checkpoint(_with_checkpoint(run, checkpoint_dir).spec.train.checkpoint)
    commit = run_commit() if todo else None

    elsewhere: dict[str, dict] = {}  # run_key -> the row another process filling the file wrote

    def finished_elsewhere(i: int) -> bool:
        row = finished_runs(path).get(todo[i][1].key) if path is not None else None
        if row is not None:
            elsewhere[row["run_key"]] = row
        return row is not None

    outcomes = execute(
        [run.spec for _, run in todo],
        execution=execution,
        progress=progress,
        desc="leaderboard",
        skipped=len(rows) - len(todo),
        finished_elsewhere=finished_elsewhere,
    )
    for out in outcomes:
        index, run = todo[out.index]
        if out.elsewhere:  # its row is the file's; an epoch of ours for it is stale
            rows[index] = elsewhere[run.key]
            remove_checkpoint(run.spec.train.checkpoint)
            continue
        spec = run.spec
        record = RunRecord(
            run.name,
            spec.seed,
            run.dataset,
            spec.data.fold,
            variant_of=run.base if run.base != run.name else None,
            preset=spec.preset,
            figures=out.figures,
            data_format=spec.data.data_format,
            protocol=out.protocol,
            run_key=run.key,
            preset_digest=preset_digest(run.base, spec.preset),
            preset_settings=preset_settings(run.base, spec.preset, own=spec.fields),
            error=out.error,
            traceback=out.traceback,
            wall_seconds=out.wall_seconds,
            device_name=out.device_name,
            native=out.native,
            commit=commit,
            date=now(),
            # the run's own recipe: a variant's training settings show in its row
            train=train_record(plan.settings_of(spec.train), spec.train),
        )
        rows[index] = record.row()
        if out.taken:  # another process trains this run now and writes its row: no failure
            print(f"{run.name} {run.dataset} seed {spec.seed}: trained by another process now",
                  flush=True)  # fmt: skip
        elif path is not None:
            add_runs(path, [rows[index]])
        if out.ok and spec.train.checkpoint:  # the row is safe: its checkpoint can go
            remove_checkpoint(spec.train.checkpoint)
    return pd.DataFrame(rows)


def checkpoint_name(run_key: str) -> str:
    """The file name of a run's epoch checkpoint prefix (no dots: those start suffixes)."""
    return "".join(c if c.isalnum() or c in "-=" else "_" for c in run_key)


def _with_checkpoint(run: PlannedRun, checkpoint_dir) -> PlannedRun:
    """The run with its own checkpoint prefix under `checkpoint_dir` (None: as it is)."""
    if checkpoint_dir is None:
        return run
    name = checkpoint_name(run.key)
    train = replace(run.spec.train, checkpoint=str(Path(checkpoint_dir) / name), resume=True)
    return replace(run, spec=replace(run.spec, train=train))


def check_plan(
    plan: LeaderboardPlan, max_len: int = 200, windows: int = 4, progress: bool = True
) -> pd.DataFrame:
    """A dry run of a plan, before its GPU hours are spent: on each dataset's first fold (or
    seed) and for each model, build the model with the config its runs would get, `prepare` it
    on the training split (memory banks, reference models) and take one loss and backward pass
    on `windows` training windows. One row per (dataset, model): ok, seconds, the warnings
    raised and the error of a cell that failed (a finite loss is checked too)."""
    rows = []
    bar = tqdm(total=len(plan.datasets) * len(plan.models), desc="check", disable=not progress)
    for per_dataset in plan.data():
        data = per_dataset[0]
        train = data.load().train
        for name in plan.models:
            base, fields = plan.settings.cell(data.name, name)
            row = {"dataset": data.name, "model": name, "fold": data.fold, "ok": False}
            row.update(error=None, warnings="")
            t0 = time.perf_counter()
            try:
                with warnings.catch_warnings(record=True) as caught, torch.random.fork_rng():
                    warnings.simplefilter("always")
                    torch.manual_seed(data.seed)  # inside fork_rng: the caller's RNG stays
                    model = build_model(base, dataset=train, preset=plan.preset, **fields)
                    model.prepare(train)
                    model.train()
                    batch = collate(train, chunk(train, max_len)[:windows])
                    loss = model.loss(model(batch), batch)["total"]
                    loss.backward()
                row["ok"] = bool(torch.isfinite(loss))
                if not row["ok"]:
                    row["error"] = f"non-finite loss {float(loss)}"
                row["warnings"] = "; ".join(sorted({str(w.message) for w in caught}))
            except Exception as exc:  # the cell would fail in every run: say why
                row["error"] = f"{type(exc).__name__}: {exc}"
            row["seconds"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            bar.update()
    bar.close()
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("files", nargs="+", help="results JSON files of kt run")
    p.add_argument(
        "--metrics",
        nargs="+",
        default=None,
        help=f"columns to show (default: those of {list(METRICS)} the files hold)",
    )
    p.add_argument("--digits", type=int, default=4)
    p.add_argument("--no-published", action="store_true", help="leave out the published AUCs")
    p.add_argument(
        "--merge-into",
        default=None,
        metavar="OUT",
        help="first merge the files' leaderboard runs into OUT by run_key (e.g. runs filled in "
        "separate files, into the full profile's resume file), then print OUT's table",
    )
    p.add_argument(
        "--pairs",
        nargs="+",
        default=[],
        metavar="A:B",
        help="paired comparisons per dataset (runs matched on fold and seed), e.g. "
        "simakt:dtransformer idkt:akt",
    )
    p.add_argument("--pair-metric", default=None, help="metric of --pairs (default test_auc)")
    a = p.parse_args(argv)
    if a.digits < 0:
        p.error(f"--digits {a.digits}: must be >= 0")
    if a.pair_metric is not None and not a.pairs:  # a setting that would act on nothing
        p.error("--pair-metric names the metric of --pairs: give --pairs A:B too")
    if a.merge_into:
        try:
            n = merge_files(a.files, a.merge_into)
        except ValueError as exc:
            raise SystemExit(f"--merge-into: {exc}") from exc
        print(f"{a.merge_into}: {n} runs")
        a.files = [a.merge_into]
    table = load_results(a.files)
    missing = sorted(set(a.metrics or ()) - set(table.columns))
    if missing:  # named ones: a misspelt name is not left out unseen (the default filters)
        have = sorted(
            c for c in table.columns if c.startswith(("test_", "valid_")) and "@" not in c
        )
        p.error(f"--metrics {missing}: no run of {a.files} has it; they have {have}")
    board = leaderboard(table, a.metrics or list(METRICS), a.digits, published=not a.no_published)
    print(to_markdown(board))
    print()
    for _, row in protocols(table).iterrows():
        print(f"- {row['dataset']} ({row.get('preset', '')}): {row['protocol']}")
    if a.pairs:
        try:
            pairs = compare_pairs(table, a.pairs, a.pair_metric or "test_auc", per="dataset")
        except (KeyError, ValueError) as exc:
            raise SystemExit(f"--pairs: {exc}") from exc
        print()
        print(pairs_markdown(pairs, a.digits))


if __name__ == "__main__":
    sys.exit(main())
