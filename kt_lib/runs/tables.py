"""Results tables: the leaderboard (mean ± std per dataset and model beside the published
figures), the published comparison, throughput, the one mean ± std policy and GitHub markdown.

A group of runs shows "mean ± std" (sample std, ddof 1) when it has two runs or more, the mean
alone for a single run (one run has no spread to state: never "± 0"), and "-" without a value
(failed runs carry none).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from ..provenance import ROOT, device_kind
from ..published import protocol_note, published_frame, published_wide

METRICS = ("test_auc", "test_acc", "test_rmse")
BENCHMARK = ROOT / "benchmarks" / "results" / "models.json"


def format_mean_std(mean: float, std: float, n: int, digits: int = 4) -> str:
    """The policy on precomputed figures: n runs with this mean and sample std."""
    if n == 0 or mean is None or math.isnan(mean):
        return "-"
    if n == 1 or std is None or math.isnan(std):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def mean_std(values: Iterable[float], digits: int = 4) -> str:
    """'mean ± std' of the runs' values, missing values (failed runs) left out."""
    v = pd.Series(list(values), dtype=float).dropna()
    return format_mean_std(float(v.mean()) if len(v) else math.nan, float(v.std()), len(v), digits)


def to_markdown(frame: pd.DataFrame, index: bool = True) -> str:
    """A GitHub markdown table (no extra dependency); the index becomes leading columns."""
    f = frame.reset_index() if index else frame
    header = [str(c) for c in f.columns]
    body = [["" if pd.isna(v) else str(v) for v in row] for row in f.itertuples(index=False)]
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines += ["| " + " | ".join(esc(v) for v in row) + " |" for row in body]
    return "\n".join(lines)


def _set_label(fields) -> str:
    """A row's `--set` fields as `key=value, ...` ('' for none or a row without them)."""
    if not isinstance(fields, dict):
        return ""
    return ", ".join(f"{k}={fields[k]}" for k in sorted(fields))


def leaderboard(
    table: pd.DataFrame,
    metrics: Iterable[str] = METRICS,
    digits: int = 4,
    published: bool = True,
) -> pd.DataFrame:
    """'mean ± std' per (dataset, model) over seeds and folds, runs (and failed runs), mean
    training and wall seconds, the devices and commits the runs record and, with `published`,
    the published AUCs of the same dataset and model."""
    if "preset" in table:  # a cell mixing model sizes is split by preset, never averaged
        mixed = table.groupby(["dataset", "model"])["preset"].transform("nunique") > 1
        if mixed.any():
            table = table.copy()
            table.loc[mixed, "model"] = (
                table.loc[mixed, "model"] + " [" + table.loc[mixed, "preset"].astype(str) + "]"
            )
    if "set" in table:  # `kt run --set` rows of other fields: split, never averaged
        fields = table["set"].map(_set_label)
        mixed = fields.groupby([table["dataset"], table["model"]]).transform("nunique") > 1
        if mixed.any():
            table = table.copy()
            table.loc[mixed, "model"] = table.loc[mixed, "model"] + " {" + fields[mixed] + "}"
    metrics = [m for m in metrics if m in table]
    # the same metrics under the other evaluation protocols, side by side (test_auc@per_row/...)
    # (not the `@lendistinctq*` bands of older rows: withdrawn, docs/leaderboard.md)
    metrics += [
        c
        for c in table.columns
        if "@" in c and c.split("@")[0] in metrics and "@lendistinct" not in c
    ]
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
    if "device_name" in table and table["device_name"].notna().any():
        board["device"] = g["device_name"].agg(devices_cell)
    if "commit" in table and table["commit"].notna().any():
        board["commit"] = g["commit"].agg(lambda s: ", ".join(sorted({str(v) for v in s.dropna()})))
    if published:
        pub = published_wide()
        for col in pub.columns:
            values = [pub[col].get(key, math.nan) for key in board.index]
            if not all(math.isnan(v) for v in values):
                board[f"{col} AUC"] = ["" if math.isnan(v) else f"{v:.4f}" for v in values]
    return board


def source_note(runs: pd.DataFrame, results_file=None) -> str:
    """Where a table's runs come from, in one line: the committed store (its files, and the
    commits, devices and dates its runs record) or this run (its datasets)."""
    n = f"{len(runs)} run{'s' * (len(runs) != 1)}"
    if not results_file:
        datasets = ", ".join(dict.fromkeys(str(d) for d in runs.get("dataset", [])))
        return f"this run: {n} trained now, on {datasets or 'no data'}"
    files = [results_file] if isinstance(results_file, str) else list(results_file)
    facts = []
    for col, label in (("commit", "commits"), ("device_name", "devices")):
        if col in runs and runs[col].notna().any():
            facts.append(f"{label} {', '.join(sorted({str(v) for v in runs[col].dropna()}))}")
    if "date" in runs and runs["date"].notna().any():
        days = sorted(str(v)[:10] for v in runs["date"].dropna())
        facts.append(f"dated {days[0]}" + (f" to {days[-1]}" if days[-1] != days[0] else ""))
    return f"the committed store ({', '.join(map(str, files))}): {n}, " + "; ".join(facts)


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


def mixes_devices(names: pd.Series) -> bool:
    """Whether a cell's runs come from more than one device kind (CPU and GPU; a run without a
    device name is a kind of its own): its spread then mixes them."""
    return len({device_kind(n) for n in names}) > 1


def devices_cell(names: pd.Series) -> str:
    """The devices of a cell's runs, "MIXED: " first where they mix kinds. Two CPU models are
    one kind (they differ only in rounding)."""
    shown = sorted({str(n) for n in names.dropna()})
    if names.isna().any():
        shown.append("unknown")
    return ("MIXED: " if mixes_devices(names) else "") + ", ".join(shown)
