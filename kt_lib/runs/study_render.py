"""A study's block for the README and docs/, from its results file alone (`kt study render`):
per (dataset, model) the headline metrics beside the published figures, then the study's pairs.
It reads the fields of a `runs.study.Study` and imports neither study module."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from ..fileio import atomic_write_text
from ..published import PUBLISHED, PYKT_LATER, PYKT_PAPER, SHORT
from .results import load_results, read_runs
from .stats import compare_pairs, pairs_markdown
from .tables import devices_cell, mean_std, mixes_devices, to_markdown


def _finished(study, path: str | Path | None) -> pd.DataFrame | None:
    """The study's finished runs (failed rows left out), or None without a results file."""
    path = Path(path or study.path)
    if not path.exists():
        return None
    runs = load_results(path)
    runs = runs[runs["error"].isna()] if "error" in runs else runs
    return runs if len(runs) else None  # e.g. every row retired


def render(study, path: str | Path | None = None) -> str:
    """The README's block for a study, from its results file alone: per (dataset, model) the
    test AUC (mean ± std over runs), runs, mean best epoch and training seconds, the device;
    then each of the study's pairs per dataset and pooled over datasets (paired by dataset,
    fold and seed; kt_lib.runs.stats). `kt study render NAME` prints it."""
    runs = _finished(study, path)
    if runs is None:
        ours = path is None or Path(path).resolve() == Path(study.path).resolve()
        note = _retired(study) if ours else []
        return "\n\n".join([f"No finished run yet (`kt study status {study.name}`).", *note]) + "\n"
    metrics = [m for m in ("test_auc", "test_qwk") if m in runs]  # ordinal K > 2: no AUC
    shown = metrics + [m for m in ORDINAL_SHOWN if "test_qwk" in runs and m in runs]
    g = runs.groupby(["dataset", "model"], sort=False)
    rows = []
    for (dataset, model), part in g:
        row = {"dataset": dataset, "model": model}
        for m in shown:
            v = part[m].dropna()
            row[m] = mean_std(v, digits=3 if m in ORDINAL_SHOWN else 4)
        if study.published:
            row["published"] = published_figures(dataset, model)
            pykt = [
                x.auc
                for x in PUBLISHED
                if (x.dataset, x.model, x.source) == (dataset, model, PYKT_PAPER)
            ]
            v = part["test_auc"].dropna()
            row["ours - pyKT"] = f"{v.mean() - pykt[0]:+.4f}" if pykt and len(v) else "-"
        row.update(
            runs=len(part),
            best_epoch=f"{part['best_epoch'].mean():.1f}",
            train_s=f"{part['train_seconds'].mean():.0f}",
            device=devices_cell(part["device_name"]),
        )
        if study.breakdown:  # older rows store no positions: say how many runs each mean is
            n_pos, means = _bucket_means(part, BREAKDOWN)
            row.update(means, **{"pos runs": n_pos})
        rows.append(row)
    out = [to_markdown(pd.DataFrame(rows), index=False)]
    if len(shown) > len(metrics):
        out.append(
            "Ordinal columns: `test_acc` exact category (seed 002's ordinal accuracy), `test_mae` "
            "in categories, `test_spearman` rank correlation of the expected category with the "
            "true one, `test_macro_f1` over categories, `test_auc_ge1` the pass/fail AUC of "
            'P(Y >= 1) ("-": runs recorded before the metric existed).'
        )
    if study.breakdown:
        out.append(
            "`auc posA-B`: per-question test AUC of the steps at positions A-B of the student's "
            "log (windows of 200: a step after 200 is predicted from its own window), the mean "
            "over the `pos runs` runs that store it (rows recorded before the breakdown have "
            "none). algebra05's files hold records of at most 200 steps, a longer student's log "
            "cut into several, each read as a student: there a position is one within its "
            "record, and pos201+ is empty."
        )
        lengths = _by_length(g)
        if lengths is not None:
            out += [
                "By the student's log length (per-question test AUC of the test students in "
                "each quarter by length, quartiles of each run's test students: lenq1 the "
                "shortest logs; mean over the runs that store it):",
                lengths,
            ]
    present = set(runs["model"])
    pairs = [p for p in study.pairs if set(p) <= present]  # a filling study: the cells so far
    for m in metrics:
        has = set(runs.loc[runs[m].notna(), "model"])
        pairs_m = [p for p in pairs if set(p) <= has]  # e.g. no test_auc at K > 2: no table
        if pairs_m:
            per = compare_pairs(runs, pairs_m, metric=m, per="dataset")
            out += [f"Paired, per dataset ({m}):", pairs_markdown(per)]
            if runs["dataset"].nunique() > 1:
                pooled = compare_pairs(runs, pairs_m, metric=m)
                out += [f"Paired, pooled over datasets ({m}):", pairs_markdown(pooled)]
    if study.pair_breakdown and pairs:
        out += pair_breakdown(runs, pairs)
    elif study.breakdown_pairs:
        out += pair_breakdown(runs, [p for p in study.breakdown_pairs if set(p) <= present])
    hours = runs["wall_seconds"].sum() / 3600
    out.append(f"{len(runs)} runs; their wall times add up to {hours:.2f} h.{_adopted(runs)}")
    if path is None or Path(path).resolve() == Path(study.path).resolve():
        out += _retired(study)
    return "\n\n".join(x.strip() for x in out) + "\n"


def _retired(study) -> list[str]:
    """A line per retirement (`kt study retire`): how many rows of which cells, and why."""
    path = Path(study.retired_path)
    if not path.exists():
        return []
    rows = read_runs(path)
    why: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        why.setdefault((r["retired"]["reason"], r["retired"]["on"][:10]), []).append(r)
    out = []
    for (reason, on), part in why.items():
        cells = pd.Series([f"{r['dataset']} {r['model']}" for r in part]).value_counts(sort=False)
        named = ", ".join(f"{cell} ({n})" for cell, n in cells.items())
        out.append(f"Retired on {on} (`{path.relative_to(path.parents[2])}`, not in the tables "
                   f"above): {named}. Why: {reason}")  # fmt: skip
    return out


def _by_length(groups) -> str | None:
    """Per (dataset, model) the mean test AUC of each quarter of students by log length; None
    when no run stores it (runs recorded before the breakdown)."""
    rows = []
    for (dataset, model), part in groups:
        n, means = _bucket_means(part, LENGTHS)
        if n:
            rows.append({"dataset": dataset, "model": model, "runs": n, **means})
    return to_markdown(pd.DataFrame(rows), index=False) if rows else None


def _bucket_means(part: pd.DataFrame, buckets) -> tuple[int, dict[str, str]]:
    """(the most runs any bucket has, {"auc BUCKET": mean test AUC or "-"}) of a cell's runs
    over `buckets` (`test_auc@BUCKET` columns; runs recorded before them have none)."""
    cols = {b: part[f"test_auc@{b}"].dropna() if f"test_auc@{b}" in part else [] for b in buckets}
    means = {f"auc {b}": f"{v.mean():.4f}" if len(v) else "-" for b, v in cols.items()}
    return max(len(v) for v in cols.values()), means


def _adopted(runs: pd.DataFrame) -> str:
    """' N of them were trained for other studies (...)' where `kt study adopt` took runs."""
    if "adopted_from" not in runs:
        return ""
    n = runs["adopted_from"].value_counts()
    if n.empty:
        return ""
    each = ", ".join(f"{k} {v}" for k, v in sorted(n.items()))
    return (f" {n.sum()} of them were trained for other studies under the same run keys and "
            f"taken by `kt study adopt` ({each}).")  # fmt: skip


def render_summary(study, path: str | Path | None = None) -> str:
    """The short table of a study for the README (`kt study render NAME --summary`): per model
    (rows) and dataset (columns) the headline test metric, mean ± std over its runs and their
    number, "-" where a cell has no finished run yet; the full block (published figures, pairs,
    AUC by history position) is `render`'s."""
    runs = _finished(study, path)
    if runs is None:
        return f"No finished run yet (`kt study status {study.name}`).\n"
    metric = "test_auc" if "test_auc" in runs else "test_qwk"
    datasets = list(dict.fromkeys(runs["dataset"]))
    rows = []
    mixed = False
    declared = list(dict.fromkeys(m for part in study.parts for m in part.models))
    rank = {m: i for i, m in enumerate(declared)}  # the study's order; others after, as found
    by_model = runs.groupby("model", sort=False)
    for model in sorted(dict.fromkeys(runs["model"]), key=lambda m: rank.get(m, len(rank))):
        part = by_model.get_group(model)
        row = {"model": model}
        for d in datasets:
            cell = part[(part["dataset"] == d) & part[metric].notna()]
            mark = "*" if "device_name" in cell and mixes_devices(cell["device_name"]) else ""
            mixed |= bool(mark)
            row[d] = f"{mean_std(cell[metric])} ({len(cell)}){mark}" if len(cell) else "-"
        rows.append(row)
    note = (
        f"{metric}, mean ± std over folds or seeds (runs); {len(runs)} runs so far"
        + ("; * the cell's runs mix CPU and GPU" if mixed else "")
        + ". Published figures, paired tests and AUC by history position: the full table in "
        "docs/leaderboard.md."
    )
    return to_markdown(pd.DataFrame(rows), index=False) + "\n\n" + note + "\n"


def pair_breakdown(runs: pd.DataFrame, pairs: list[tuple[str, str]]) -> list[str]:
    """The pairs' test-AUC differences at each history position and in each quarter of the
    students by their log's length (pooled over datasets, paired by dataset, fold and seed):
    where a difference sits, e.g. whether collaborative memory helps the first steps or the
    students with short histories. Runs recorded before the breakdown existed have no such
    columns and pair nowhere."""
    out = []
    for cols, name, heading in (
        (BREAKDOWN, "position", "Paired by history position, pooled over datasets (test AUC of "
         "the steps at positions A-B; runs without the breakdown pair nowhere):"),
        (LENGTHS, "students", "Paired by the student's log length, pooled over datasets (test "
         "AUC of the students in each quarter by length: lenq1 the shortest logs, lenq4 the "
         "longest; quartiles of each run's test students):"),
    ):  # fmt: skip
        frames = []
        for col in cols:
            m = f"test_auc@{col}"
            if m not in runs:
                continue
            has = set(runs.loc[runs[m].notna(), "model"])
            present = [p for p in pairs if set(p) <= has]
            if present:
                frames.append(compare_pairs(runs, present, metric=m).assign(**{name: col}))
        if frames:
            table = pd.concat(frames, ignore_index=True)
            table = table.sort_values(["a", "b"], kind="stable")[[name, *table.columns[:-1]]]
            table = table.drop(columns="metric").assign(metric="test_auc")
            out += [heading, pairs_markdown(table)]
    return out


ORDINAL_SHOWN = ("test_acc", "test_mae", "test_spearman", "test_macro_f1", "test_auc_ge1")
BREAKDOWN = ("pos1-10", "pos11-50", "pos51-200", "pos201+")
LENGTHS = ("lenq1", "lenq2", "lenq3", "lenq4")  # quarters of the test students by log length


def published_figures(dataset: str, model: str) -> str:
    """The published test AUCs of (dataset, model), each with its source's short name."""
    names = {**SHORT, PYKT_LATER: "pyKT, later"}  # SHORT groups both pyKT sources
    found = [
        f"{p.auc:.4f} ({names[p.source]})"
        for p in PUBLISHED
        if p.dataset == dataset and p.model == model
    ]
    return "; ".join(found) or "-"


def write_blocks(name: str, text: str, pages: list[Path]) -> list[Path]:
    """Replace the `<!-- study:NAME -->` blocks of `pages` with `text` (atomic writes); the
    pages that changed. A study without any block on the pages is an error naming them."""
    pattern = re.compile(rf"(<!-- study:{name} -->\n)(.*?)(<!-- /study:{name} -->)", re.S)
    changed, found = [], False
    for page in pages:
        old = page.read_text(encoding="utf-8")
        found |= bool(pattern.search(old))
        new = pattern.sub(lambda m: m.group(1) + text + m.group(3), old)
        if new != old:
            atomic_write_text(page, new)
            changed.append(page)
    if not found:
        raise ValueError(f"no <!-- study:{name} --> block in {[str(p) for p in pages]}")
    return changed
