"""The model leaderboard: results of `python -m kt_lib.experiment ... --out FILE` (or of a
notebook run) as one table, mean ± std per dataset and model, beside the published figures.

    python -m kt_lib.leaderboard runs/assist2009.json runs/statics2011.json [--metrics ...]
        [--pairs simakt:dtransformer idkt:akt]

prints a markdown table for the README (with `--pairs`, paired comparisons per dataset below it:
kt_lib/stats.py). A results file is {"args", "protocol", "results": [row]}
with one row per (model, seed) run (kt_lib/experiment.py); files of several folds or datasets
are concatenated, and runs of one (dataset, model) pool over seeds and folds.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime as dt
import hashlib
import json
import math
import sys
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from .fileio import locked, save_json
from .provenance import run_commit
from .published import published_wide
from .runs.data import DataSpec, dataset_name
from .runs.tables import format_mean_std, mean_std, to_markdown

METRICS = ("test_auc", "test_acc", "test_rmse")
FOLD_BASE = {"line3": 1, "line4": 1, "pykt": 0}  # formats whose files carry folds: first id
NESTED = ("valid", "history", "protocols", "train")  # per-run fields that are not table columns
ROOT = Path(__file__).resolve().parents[1]
BENCHMARK = ROOT / "benchmarks" / "results" / "models.json"


def load_results(paths: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    """One row per run from one or more results files, with dataset, fold, preset and file."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not paths:
        raise ValueError("load_results needs at least one results file")
    rows = []
    for path in paths:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read a results file ({exc})") from exc
        if not isinstance(data, dict) or not isinstance(data.get("results"), list):
            raise ValueError(
                f"{path}: not a kt_lib.experiment results file (expected a mapping with "
                "'args', 'protocol' and a 'results' list)"
            )
        args = data.get("args") or {}
        for r in data["results"]:
            # a file of one experiment keeps dataset, fold and preset in its args; a leaderboard
            # file (several datasets) keeps them in each row, and the row wins
            row = dict(
                dataset=dataset_name(args.get("data_dir"), args.get("data_format", "synthetic")),
                data_format=args.get("data_format", "synthetic"),
                fold=args.get("fold"),
                preset=args.get("preset"),
                protocol=data.get("protocol", ""),
            )
            row.update({k: v for k, v in r.items() if k not in NESTED})
            row["file"] = path.name
            rows.append(row)
    first = ["dataset", "model", "fold", "seed"]
    table = pd.DataFrame(rows)
    return table[[c for c in first if c in table] + [c for c in table if c not in first]]


def has_fold_files(data_dir: str | Path | None, data_format: str) -> bool:
    """Whether a folder carries its own folds: line3/line4 `*_train1.csv` (a folder with only
    train/test files has none), pykt always (a `fold` column); unknown without a folder."""
    if data_format == "pykt":
        return True
    if data_format in ("line3", "line4"):
        return data_dir is None or any(Path(data_dir).glob("*_train1.csv"))
    return False


def fold_plan(
    data_format: str, folds: int, seeds: Iterable[int], data_dir: str | Path | None = None
) -> list[tuple[int | None, int]]:
    """(fold, seed) of each run: the files' `folds` folds with the first seed where the format
    has folds (line3/line4: 1..k, pykt: 0..k-1), folds > 0 and `data_dir` (when given) has the
    fold files; else every seed without a fold."""
    seeds = list(seeds)
    if not seeds:
        raise ValueError("fold_plan needs at least one seed")
    if folds > 0 and data_format in FOLD_BASE and has_fold_files(data_dir, data_format):
        base = FOLD_BASE[data_format]
        return [(base + k, seeds[0]) for k in range(folds)]
    return [(None, s) for s in seeds]


def run_key(dataset: str, model: str, fold, seed: int, preset: str, settings: dict) -> str:
    """Identity of one leaderboard run: dataset, model, fold, seed, preset and a short hash of
    everything else that changes its result (training settings, model overrides, simulator)."""
    blob = json.dumps(settings, sort_keys=True, default=str).encode()
    digest = hashlib.sha1(blob).hexdigest()[:10]
    return f"{dataset}/{model}/fold={fold}/seed={seed}/{preset}/{digest}"


def _read_runs(path: Path) -> list[dict]:
    """Rows of a leaderboard results file ([] when it does not exist yet)."""
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
        rows = data["results"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path}: cannot resume from this results file ({exc}); move it away to start afresh"
        ) from exc
    if not isinstance(rows, list) or any(not isinstance(r, dict) for r in rows):
        raise ValueError(f"{path}: 'results' must be a list of rows to resume from")
    return rows


def add_runs(path: str | Path, new_rows: Iterable[dict]) -> int:
    """Merge rows into a leaderboard results file by `run_key` (a new row replaces one with the
    same key), under a file lock and with an atomic rewrite, so several processes can fill one
    file. Returns the number of rows in the file."""
    path = Path(path)
    with locked(path):
        merged = {}
        for r in [*_read_runs(path), *new_rows]:
            merged[r.get("run_key") or f"unkeyed-{len(merged)}"] = r
        rows = list(merged.values())
        save_json(path, {"args": {"kind": "leaderboard"}, "protocol": "", "results": rows})
    return len(rows)


def run_leaderboard(
    datasets: Iterable[tuple[str | None, str]],
    models: Iterable[str],
    train_config,
    preset: str = "tiny",
    seeds: Iterable[int] = (0,),
    folds: int = 0,
    simulator: dict | None = None,
    overrides: dict[str, dict] | None = None,
    progress: bool = True,
    results_file: str | Path | None = None,
    workers: int = 1,
    executor: str = "process",
    gpus_per_run: float | None = None,
    ray_address: str | None = None,
    on_error: str = "record",
    histories: Iterable[str] = ("window",),
    variants: dict[str, dict] | None = None,
    dataset_overrides: dict[str, dict[str, dict]] | None = None,
    checkpoint_dir: str | Path | None = None,
) -> pd.DataFrame:
    """Train `models` on each (data_dir, data_format) following `fold_plan`; rows as in
    `load_results`, in plan order (the simulator takes `simulator` keyword arguments,
    `overrides` maps a model name to config fields for it). Each row records the run's
    `wall_seconds`, `device_name` (GPU or CPU model) and the workbook's git `commit`.

    `variants` names configurations of a registered model so that one profile can hold several
    of them, each a row label of its own that `models` may list: label -> {"model": registered
    name, **config fields}, e.g. {"ikt3_lambda0": {"model": "ikt3", "lambda_target": 0}} or
    {"simakt_knn_only": {"model": "simakt", "similarity": "knn_only"}}. A variant's fields are
    laid over `overrides` of its model (and `overrides[label]` over them); its rows carry the
    label as `model` and the registered name as `variant_of`, so `kt_lib.stats.compare_pairs`
    pairs it like any model. `dataset_overrides` maps a dataset name (`dataset_name`: the
    folder's) to {model or variant label: fields} laid over everything else on that dataset
    alone (an entry for a model does not reach its variants), e.g. smaller SimAKT banks where
    the training students are few. Fields a model does not have are refused before any run.

    `checkpoint_dir` (workers=1 only) gives each run an epoch checkpoint there, named by its
    `run_key`, resumed from when the same run is started again after a kill and removed once its
    row is written.

    With `results_file` the run is resumable: each finished run is merged into that JSON file
    (file lock, atomic rewrite; `load_results` reads it), and runs already in it with the same
    `run_key` are not trained again (failed ones are). A long profile can so be filled piece by
    piece (several sessions, or some models on a GPU machine) and read back with
    `python -m kt_lib.leaderboard FILE`. Test sets are scored under both row rules and each of
    `histories` (`kt_lib.train.evaluate_protocols`; add "sliding" for the papers' protocol).

    `workers` runs train at a time (see `kt_lib.runner.execute`): worker processes by default,
    each loading its data once, or Ray tasks with executor="ray" (`gpus_per_run`, default
    1/workers on CUDA; `ray_address` for a cluster). workers=1 trains in this process. A failed
    run gives a row with its `error` and `traceback` (on_error="raise": stop at the first).
    """
    from . import runner

    models = list(models)
    seeds = list(seeds)
    config_of = _cell_configs(models, overrides, variants, dataset_overrides)
    plan = [
        dataclasses.replace(spec, fold=fold, seed=seed, kw=_reader_kw(spec, simulator))
        for spec in _data_specs(datasets)
        for fold, seed in fold_plan(spec.data_format, folds, seeds, spec.data_dir)
    ]
    path = Path(results_file) if results_file is not None else None
    done = {
        r["run_key"]: r
        for r in (_read_runs(path) if path else [])
        if r.get("run_key") and not r.get("error")
    }
    histories = list(dict.fromkeys(["window", *histories]))
    settings = runner.train_settings(train_config)
    if histories != ["window"]:  # keys of earlier files (window only) stay valid
        settings = {**settings, "histories": histories}
    train = runner.train_dict(train_config)
    rows: list[dict | None] = []  # plan order; None until the run comes back
    tasks, heads = [], {}
    for data in plan:
        dataset, fold, seed = data.name, data.fold, data.seed
        for name in models:
            base, model_overrides = config_of(dataset, name)
            key = run_key(
                dataset,
                name,
                fold,
                seed,
                preset,
                {
                    "train": settings,
                    "model": model_overrides,
                    "data": {"format": data.data_format, **data.kw},
                    **({"variant_of": base} if base != name else {}),
                },
            )
            if key in done:
                rows.append(done[key])
                continue
            index = len(rows)
            rows.append(None)
            head = {"dataset": dataset, "model": name, "fold": fold, "seed": seed}
            heads[index] = (
                {**head, "variant_of": base} if base != name else head,
                {"data_format": data.data_format, "preset": preset, "run_key": key},
            )
            tasks.append(
                {
                    "index": index,
                    "model": base,
                    "preset": preset,
                    "seed": seed,
                    "label": name if base != name else None,
                    "config": None,
                    "overrides": copy.deepcopy(model_overrides),
                    "train": _with_checkpoint(train, checkpoint_dir, key),
                    "histories": histories,
                    "data": data,
                }
            )
    commit = run_commit() if tasks else None
    outcomes = runner.execute(
        tasks,
        workers=workers,
        executor=executor,
        gpus_per_run=gpus_per_run,
        ray_address=ray_address,
        progress=progress,
        desc="leaderboard",
        skipped=len(rows) - len(tasks),
        on_error=on_error,
    )
    for out in outcomes:
        head, tail = heads[out.index]
        row = {**head, **out.row, "data_format": tail["data_format"], "preset": preset}
        row.update(protocol=out.protocol, run_key=tail["run_key"])
        if not out.ok:
            row.update(error=out.error, traceback=out.traceback)
        row.update(wall_seconds=out.wall_seconds, device_name=out.device_name, commit=commit)
        row.update(date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), train=settings)
        rows[out.index] = row
        if path is not None:
            add_runs(path, [row])
        if out.ok and checkpoint_dir is not None:  # the row is safe: its checkpoint can go
            prefix = _with_checkpoint(train, checkpoint_dir, tail["run_key"])["checkpoint"]
            for f in Path(prefix).parent.glob(Path(prefix).name + "_*"):
                f.unlink(missing_ok=True)
    return pd.DataFrame(rows)


def _data_specs(datasets: Iterable[tuple[str | None, str | None]]) -> list[DataSpec]:
    """A `DataSpec` per (data_dir, data_format): a folder with no format is read with `auto`, a
    folder with `synthetic` is refused before any run."""
    return [DataSpec(data_dir, data_format) for data_dir, data_format in datasets]


def _reader_kw(spec: DataSpec, simulator: dict | None) -> dict:
    """The simulator's keyword arguments for simulated data; none for a folder."""
    return dict(simulator or {}) if spec.synthetic else {}


def _with_checkpoint(train: dict, checkpoint_dir, key: str) -> dict:
    """The run's train settings with its own checkpoint prefix under `checkpoint_dir`."""
    if checkpoint_dir is None:
        return train
    name = "".join(c if c.isalnum() or c in "-=" else "_" for c in key)  # no dots: suffixes
    return {**train, "checkpoint": str(Path(checkpoint_dir) / name), "resume": True}


# run_experiment's own keywords: a model config field cannot take these names
_RUN_KEYWORDS = frozenset(
    ("model_config", "train_config", "seed", "preset", "label", "histories", "on_epoch")
)


def _check_fields(where: str, model: str, fields) -> None:
    """Refuse config fields that model `model` does not have (a typo would fail every run)."""
    from .models import MODELS

    if not isinstance(fields, dict):
        raise ValueError(f"{where}: expected a mapping of config fields, got {fields!r}")
    known = {f.name for f in dataclasses.fields(MODELS[model].config_cls)} - _RUN_KEYWORDS
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(
            f"{where}: {model} has no config field(s) {unknown}; fields: {', '.join(sorted(known))}"
        )


def _model_configs(
    models: list[str], overrides: dict[str, dict], variants: dict[str, dict]
) -> dict[str, tuple[str, dict]]:
    """(registered model, config overrides) of each name in `models`: a model with its
    `overrides`, or a variant label with its model's overrides, its own fields and then
    `overrides[label]` on top (each merge is shallow: a `similarity` mapping replaces the whole
    similarity config)."""
    from .models import MODELS

    for label, spec in variants.items():
        if label in MODELS:
            raise ValueError(
                f"variant {label!r} has the name of a registered model; give it another label"
            )
        base = spec.get("model") if isinstance(spec, dict) else spec
        if not isinstance(base, str) or base not in MODELS:
            raise ValueError(
                f"variant {label!r} must name a registered model under 'model' (got {base!r}); "
                f"models: {', '.join(sorted(MODELS))}"
            )
        _check_fields(f"variant {label!r}", base, {k: v for k, v in spec.items() if k != "model"})
    configs = {}
    for name in models:
        if name in variants:
            spec = dict(variants[name])
            base = spec.pop("model")
            merged = {**overrides.get(base, {}), **spec, **overrides.get(name, {})}
            configs[name] = (base, merged)
        else:  # a name that is not registered fails in its run, recorded like any failure
            configs[name] = (name, dict(overrides.get(name, {})))
    return configs


def _check_dataset_overrides(
    given: dict[str, dict[str, dict]], variants: dict[str, dict]
) -> dict[str, dict[str, dict]]:
    """`dataset_overrides` as given, refusing a name that is neither a registered model nor a
    variant, and fields its model does not have (a typo would otherwise change nothing, or fail
    every run). An entry for a variant label reaches that variant alone, not the model's other
    variants. Datasets and models the plan does not hold are allowed: a profile's file may be
    run a part at a time."""
    from .models import MODELS

    for dataset, per_model in given.items():
        if not isinstance(per_model, dict):
            raise ValueError(f"dataset_overrides[{dataset!r}] must map model names to fields")
        for name, fields in per_model.items():
            if name not in MODELS and name not in variants:
                raise ValueError(
                    f"dataset_overrides[{dataset!r}] names {name!r}: expected a registered "
                    "model or a variant label"
                )
            base = variants[name]["model"] if name in variants else name
            _check_fields(f"dataset_overrides[{dataset!r}][{name!r}]", base, fields)
    return given


def _cell_configs(
    models: list[str],
    overrides: dict[str, dict] | None,
    variants: dict[str, dict] | None,
    dataset_overrides: dict[str, dict[str, dict]] | None,
):
    """Validate a plan's model settings once and return `config_of(dataset, name)` -> (registered
    model, config fields) of one cell: `_model_configs`, then that dataset's overrides on top."""
    configs = _model_configs(models, overrides or {}, variants or {})
    per_dataset = _check_dataset_overrides(dataset_overrides or {}, variants or {})

    def config_of(dataset: str, name: str) -> tuple[str, dict]:
        base, fields = configs[name]
        return base, {**fields, **per_dataset.get(dataset, {}).get(name, {})}

    return config_of


def check_plan(
    datasets: Iterable[tuple[str | None, str]],
    models: Iterable[str],
    preset: str = "tiny",
    seeds: Iterable[int] = (0,),
    folds: int = 0,
    simulator: dict | None = None,
    overrides: dict[str, dict] | None = None,
    variants: dict[str, dict] | None = None,
    dataset_overrides: dict[str, dict[str, dict]] | None = None,
    max_len: int = 200,
    windows: int = 4,
    progress: bool = True,
) -> pd.DataFrame:
    """A dry run of a `run_leaderboard` plan, before its GPU hours are spent: on each dataset's
    first fold (or seed) and for each model, build the model with the config its runs would
    get, `prepare` it on the training split (memory banks, reference models) and take one loss
    and backward pass on `windows` training windows. One row per (dataset, model): ok, seconds,
    the warnings raised and the error of a cell that failed (a finite loss is checked too)."""
    import time
    import warnings

    import torch
    from tqdm.auto import tqdm

    from .data.dataset import chunk, collate
    from .models import build_model

    datasets, models = list(datasets), list(models)
    config_of = _cell_configs(models, overrides, variants, dataset_overrides)
    rows = []
    bar = tqdm(total=len(datasets) * len(models), desc="check", disable=not progress)
    for spec in _data_specs(datasets):
        fold, seed = fold_plan(spec.data_format, folds, list(seeds), spec.data_dir)[0]
        data = dataclasses.replace(spec, fold=fold, seed=seed, kw=_reader_kw(spec, simulator))
        train = data.load().train
        dataset = data.name
        for name in models:
            base, fields = config_of(dataset, name)
            row = {"dataset": dataset, "model": name, "fold": fold, "ok": False, "error": None}
            row["warnings"] = ""
            t0 = time.perf_counter()
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    torch.manual_seed(seed)
                    model = build_model(base, dataset=train, preset=preset, **fields)
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


def leaderboard(
    table: pd.DataFrame,
    metrics: Iterable[str] = METRICS,
    digits: int = 4,
    published: bool = True,
) -> pd.DataFrame:
    """'mean ± std' per (dataset, model) over seeds and folds, runs (and failed runs), mean
    training and wall seconds, the devices and commits the runs record and, with `published`,
    the published AUCs of the same dataset and model."""
    metrics = [m for m in metrics if m in table]
    # the same metrics under the other evaluation protocols, side by side (test_auc@per_row/...)
    metrics += [c for c in table.columns if "@" in c and c.split("@")[0] in metrics]
    g = table.groupby(["dataset", "model"], sort=False)
    mean, std, count = g[metrics].mean(), g[metrics].std(), g[metrics].count()
    board = pd.DataFrame(index=mean.index)
    for m in metrics:
        board[m.removeprefix("test_")] = [
            format_mean_std(a, s, n, digits)
            for a, s, n in zip(mean[m], std[m], count[m], strict=True)
        ]
    failed = table["error"].notna() if "error" in table else pd.Series(False, index=table.index)
    board["runs"] = (~failed).groupby([table["dataset"], table["model"]], sort=False).sum()
    if failed.any():
        board["failed"] = failed.groupby([table["dataset"], table["model"]], sort=False).sum()
    if "train_seconds" in table:
        board["train s"] = g["train_seconds"].mean().round(1)
    if "wall_seconds" in table and table["wall_seconds"].notna().any():
        board["wall s"] = g["wall_seconds"].mean().round(1)
    for col, name in (("device_name", "device"), ("commit", "commit")):
        if col in table and table[col].notna().any():
            board[name] = g[col].agg(lambda s: ", ".join(sorted({str(v) for v in s.dropna()})))
    if published:
        pub = published_wide()
        for col in pub.columns:
            values = [pub[col].get(key, math.nan) for key in board.index]
            if not all(math.isnan(v) for v in values):
                board[f"{col} AUC"] = ["" if math.isnan(v) else f"{v:.4f}" for v in values]
    return board


def run_protocol(runs: pd.DataFrame) -> str:
    """One protocol line for a group of runs: the first run's, plus the folds and seeds pooled."""
    given = runs["protocol"].dropna() if "protocol" in runs else pd.Series(dtype=str)
    first = str(given.iloc[0]) if len(given) else "protocol not recorded"
    pooled = []
    for col, what in (("fold", "folds"), ("seed", "seeds")):
        values = sorted({int(v) for v in runs.get(col, pd.Series(dtype=float)).dropna()})
        if len(values) > 1:
            pooled.append(f"{what} {values}")
    return first + (f"; pooled over {' and '.join(pooled)}" if pooled else "")


def published_comparison(table: pd.DataFrame, digits: int = 4) -> pd.DataFrame:
    """Our test AUC (mean ± std) beside every published AUC of the same dataset and model, with
    the protocol difference stated."""
    from .published import protocol_note, published_frame

    pub = published_frame()
    rows = []
    for (dataset, model), runs in table.groupby(["dataset", "model"], sort=False):
        ours = runs["test_auc"].dropna()  # failed runs have none
        protocol = run_protocol(runs)
        for _, p in pub[(pub.dataset == dataset) & (pub.model == model)].iterrows():
            rows.append(
                {
                    "dataset": dataset,
                    "model": model,
                    "ours": mean_std(ours, digits),
                    "published": p["auc"],
                    "difference": round(float(ours.mean() - p["auc"]), digits),
                    "source": p["short"],
                    "protocol difference": protocol_note(protocol, p),
                }
            )
    cols = ["dataset", "model", "ours", "published", "difference", "source", "protocol difference"]
    return pd.DataFrame(rows, columns=cols)


def protocols(table: pd.DataFrame) -> pd.DataFrame:
    """The distinct protocols of a results table, per dataset."""
    cols = [c for c in ("dataset", "preset", "protocol") if c in table]
    return table[cols].drop_duplicates().reset_index(drop=True)


def throughput(path: str | Path | None = None) -> pd.DataFrame:
    """Speed per model from `benchmarks/bench_models.py`'s JSON (empty table if absent)."""
    path = Path(path) if path is not None else BENCHMARK
    cols = [
        "model",
        "params",
        "train_interactions_per_s",
        "inference_interactions_per_s",
        "peak_rss_mb",
    ]
    if not path.exists():
        return pd.DataFrame(columns=cols).set_index("model")
    rows = [r for r in json.loads(path.read_text()) if "error" not in r and "params" in r]
    return pd.DataFrame(rows, columns=cols).set_index("model")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("files", nargs="+", help="results JSON files of python -m kt_lib.experiment")
    p.add_argument("--metrics", nargs="+", default=list(METRICS))
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
    p.add_argument("--pair-metric", default="test_auc", help="metric of --pairs")
    a = p.parse_args(argv)
    if a.merge_into:
        rows = [r for f in a.files if Path(f) != Path(a.merge_into) for r in _read_runs(Path(f))]
        if any(not r.get("run_key") for r in rows):
            raise SystemExit("--merge-into takes leaderboard files (rows with a run_key) only")
        n = add_runs(a.merge_into, rows)
        print(f"{a.merge_into}: {n} runs")
        a.files = [a.merge_into]
    table = load_results(a.files)
    board = leaderboard(table, a.metrics, a.digits, published=not a.no_published)
    print(to_markdown(board))
    print()
    for _, row in protocols(table).iterrows():
        print(f"- {row['dataset']} ({row.get('preset', '')}): {row['protocol']}")
    if a.pairs:
        from .stats import compare_pairs, pairs_markdown

        try:
            pairs = compare_pairs(table, a.pairs, a.pair_metric, per="dataset")
        except (KeyError, ValueError) as exc:
            raise SystemExit(f"--pairs: {exc}") from exc
        print()
        print(pairs_markdown(pairs, a.digits))


if __name__ == "__main__":
    sys.exit(main())
