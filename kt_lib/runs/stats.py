"""Paired comparisons of two models (or ablation cells) over matched runs.

Two runs pair when they share the `by` columns (dataset, fold, seed by default): same students,
same split, same seed. The differences a - b of the pairs give the mean difference, its 95%
t-interval, a paired t-test and a Wilcoxon signed-rank test (scipy.stats), and the smallest
effect the comparison could have detected (`detectable_effect`: the mean difference that the
paired t-test, two-sided at 5%, finds with 80% power given the number of pairs and the observed
spread of their differences). Rows without a partner are counted, never silently dropped; failed
runs (no metric) are counted apart.

    from kt_lib.runs.stats import compare_pairs, pairs_markdown
    table = compare_pairs(runs, [("simakt", "dtransformer"), ("idkt", "akt")], per="dataset")
    print(pairs_markdown(table))
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import optimize
from scipy import stats as st

from ..provenance import device_kind
from .tables import to_markdown

# metric names (or name parts) where less is better: the error and loss figures a run stores,
# and its costs (time, size), which `--pair-metric` may name too
LOWER_IS_BETTER = (
    "rmse", "mae", "loss", "logloss", "ece", "brier", "large_error",
    "seconds", "params", "mb",
)  # fmt: skip
NONE_KEY = "<none>"  # stands for a missing key value (fold None of a run without folds)


@dataclass
class PairedComparison:
    """The paired difference a - b of one metric over matched runs, with its tests."""

    a: str
    b: str
    metric: str
    n_pairs: int
    mean_a: float  # over the pairs
    mean_b: float
    mean_diff: float  # mean of a - b
    ci_low: float  # 95% t-interval of the mean difference
    ci_high: float
    p_ttest: float  # paired t-test, two-sided
    p_wilcoxon: float  # Wilcoxon signed-rank, two-sided (exact for small n)
    better: str  # the label with the better mean over the pairs, as measured ("tie" if equal)
    unmatched_a: int  # runs of a with a metric and no partner run of b
    unmatched_b: int
    failed: int  # runs of a or b without the metric (failed runs), left out
    note: str = ""
    # the smallest |mean difference| the t-test detects with 80% power (`detectable_effect`)
    detectable: float = math.nan

    def as_dict(self) -> dict:
        return asdict(self)


def lower_is_better(metric: str) -> bool:
    """Whether smaller values of `metric` are better (rmse, mae, losses)."""
    name = metric.lower().removeprefix("test_").removeprefix("valid_").split("@")[0]
    return any(
        name == m or name.endswith(f"_{m}") or name.startswith(f"{m}_") for m in LOWER_IS_BETTER
    )


def detectable_effect(sd: float, n: int, power: float = 0.8, alpha: float = 0.05) -> float:
    """The smallest true mean difference |delta| that a two-sided paired t-test at level `alpha`
    rejects with probability `power`, for `n` pairs whose differences have standard deviation
    `sd`: under delta the statistic follows a noncentral t with n - 1 degrees of freedom and
    noncentrality delta * sqrt(n) / sd, and delta is solved for exactly (no normal shortcut,
    which understates it for few pairs). NaN with fewer than 2 pairs or no spread."""
    if n < 2 or not sd > 0 or not math.isfinite(sd):
        return math.nan
    df = n - 1
    crit = float(st.t.ppf(1 - alpha / 2, df))

    def shortfall(delta: float) -> float:
        nc = delta * math.sqrt(n) / sd
        # the wrong-sign tail, P(T < -crit), is negligible where scipy returns NaN for it
        wrong = float(np.nan_to_num(st.nct.cdf(-crit, df, nc)))
        right = float(st.nct.sf(crit, df, nc))
        if math.isnan(right):  # far past the critical value
            right = 1.0 if nc > crit else 0.0
        return right + wrong - power

    hi = sd
    while shortfall(hi) < 0:
        hi *= 2
    return float(optimize.brentq(shortfall, 0.0, hi, xtol=sd * 1e-9))


DEVICE = "device_name"  # the runs table's column naming the device of each run


def _keys(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The `by` columns with missing values as one comparable key."""
    return frame[by].astype(object).where(frame[by].notna(), NONE_KEY).astype(str)


def paired_comparison(
    runs: pd.DataFrame,
    a: str,
    b: str,
    metric: str = "test_auc",
    by: Sequence[str] = ("dataset", "fold", "seed"),
    label_col: str = "model",
    higher_is_better: bool | None = None,
) -> PairedComparison:
    """Compare runs labelled `a` and `b` (in `label_col`) on `metric`, pairing on the `by`
    columns the table has. `higher_is_better` None: from the metric's name (AUC higher, RMSE
    lower). Fewer than 2 pairs: NaN interval and p-values with a note; constant differences:
    NaN t-test (no spread), Wilcoxon NaN when every difference is 0."""
    for col in (label_col, metric):
        if col not in runs:
            raise KeyError(f"the runs table has no {col!r} column; columns: {list(runs.columns)}")
    by = [c for c in by if c in runs and c != label_col]
    if not by:
        raise ValueError("no pairing column of `by` is in the runs table (e.g. seed)")
    found = set(runs[label_col].astype(str))
    for label in (a, b):
        if label not in found:
            raise ValueError(f"no runs labelled {label!r} in {label_col!r}; found {sorted(found)}")
    if higher_is_better is None:
        higher_is_better = not lower_is_better(metric)
    sides, failed = {}, 0
    for label in (a, b):
        part = runs[runs[label_col].astype(str) == label]
        good = part[metric].notna()
        failed += int((~good).sum())
        keyed = _keys(part[good], by).assign(_value=part.loc[good, metric].astype(float).values)
        if DEVICE in part:  # the device kind that made each run: pairs never cross kinds
            keyed["_device"] = [device_kind(n) for n in part.loc[good, DEVICE]]
        dup = keyed.duplicated(by, keep=False)
        if dup.any():
            raise ValueError(
                f"{label!r} has several runs with the same {by} (e.g. "
                f"{keyed.loc[dup, by].iloc[0].tolist()}): filter the table (preset, settings) or "
                "add the distinguishing column to `by`"
            )
        sides[label] = keyed
    pairs = sides[a].merge(sides[b], on=by, suffixes=("_a", "_b"))
    crossed = unknown = 0
    if "_device_a" in pairs and "_device_b" in pairs:
        blind = ((pairs["_device_a"] == "unknown") | (pairs["_device_b"] == "unknown")).to_numpy()
        across = (pairs["_device_a"] != pairs["_device_b"]).to_numpy() & ~blind
        crossed, unknown = int(across.sum()), int(blind.sum())
        pairs = pairs[~(across | blind)]
    kinds = sorted(set(pairs["_device_a"])) if "_device_a" in pairs else []
    n = len(pairs)
    xa, xb = pairs["_value_a"].to_numpy(), pairs["_value_b"].to_numpy()
    d = xa - xb
    notes = []
    mean_diff = float(d.mean()) if n else math.nan
    ci = (math.nan, math.nan)
    p_t = p_w = detectable = math.nan
    if n < 2:
        notes.append(f"{n} pair{'s' if n != 1 else ''}: tests need at least 2")
    elif np.allclose(d, d[0], rtol=1e-12, atol=1e-15):  # a zero sample spread bounds nothing:
        notes.append("every pair differs by the same amount: no spread, no interval, no t-test")
    else:
        sem = float(d.std(ddof=1)) / math.sqrt(n)
        half = float(st.t.ppf(0.975, n - 1)) * sem
        ci = (mean_diff - half, mean_diff + half)
        p_t = float(st.ttest_rel(xa, xb).pvalue)
        detectable = detectable_effect(float(d.std(ddof=1)), n)
    if n >= 2:
        if np.all(d == 0):
            notes.append("every difference is 0: no Wilcoxon test")
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p_w = float(st.wilcoxon(xa, xb).pvalue)
    unmatched = {
        label: len(sides[label]) - n - crossed - unknown for label in (a, b)
    }  # each key is unique per side, so every pair uses one row of each
    if crossed:
        notes.append(
            f"{crossed} pair(s) across devices left out (a run and its pair must come from the "
            "same device kind: CPU and GPU numbers differ by as much as the effects measured)"
        )
    if unknown:
        notes.append(
            f"{unknown} pair(s) with a run of unknown device left out (no device_name: the "
            "pair cannot be shown to come from one device kind)"
        )
    if len(kinds) > 1:  # each pair on one kind, but the row pools pairs of several
        counts = pairs["_device_a"].value_counts()
        notes.append("pairs from " + ", ".join(f"{counts[k]} {k}" for k in kinds))
    if unmatched[a] or unmatched[b]:
        notes.append(f"unmatched runs: {unmatched[a]} of {a}, {unmatched[b]} of {b}")
    if failed:
        notes.append(f"{failed} run(s) without {metric} left out")
    if n == 0 or mean_diff == 0 or math.isnan(mean_diff):
        better = "tie" if n else ""
    else:
        better = a if (mean_diff > 0) == higher_is_better else b
    return PairedComparison(
        a,
        b,
        metric,
        n,
        float(xa.mean()) if n else math.nan,
        float(xb.mean()) if n else math.nan,
        mean_diff,
        ci[0],
        ci[1],
        p_t,
        p_w,
        better,
        unmatched[a],
        unmatched[b],
        failed,
        "; ".join(notes),
        detectable,
    )


def parse_pair(text: str) -> tuple[str, str]:
    """'simakt:dtransformer' -> ('simakt', 'dtransformer')."""
    a, sep, b = text.partition(":")
    if not sep or not a or not b:
        raise ValueError(f"a pair is written A:B (e.g. simakt:dtransformer), got {text!r}")
    return a, b


def compare_pairs(
    runs: pd.DataFrame,
    pairs: Iterable[tuple[str, str] | str],
    metric: str = "test_auc",
    by: Sequence[str] = ("dataset", "fold", "seed"),
    label_col: str = "model",
    per: str | Sequence[str] | None = None,
    higher_is_better: bool | None = None,
) -> pd.DataFrame:
    """One row per pair (and per group of the `per` columns, e.g. per="dataset"): the fields of
    `PairedComparison`. Pairs are (a, b) tuples or 'a:b' strings; a group lacking one of the two
    labels is skipped."""
    pairs = [parse_pair(p) if isinstance(p, str) else tuple(p) for p in pairs]
    per = [per] if isinstance(per, str) else list(per or [])
    found = set(runs[label_col].astype(str)) if label_col in runs else set()
    for label in {x for pair in pairs for x in pair} - found:
        raise ValueError(f"no runs labelled {label!r} in {label_col!r}; found {sorted(found)}")
    groups = runs.groupby(per, sort=False, dropna=False) if per else [((), runs)]
    rows = []
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        labels = set(part[label_col].astype(str))
        for a, b in pairs:
            if per and not {a, b} <= labels:
                continue
            res = paired_comparison(part, a, b, metric, by, label_col, higher_is_better)
            rows.append({**dict(zip(per, key, strict=True)), **res.as_dict()})
    cols = per + list(PairedComparison.__dataclass_fields__)
    return pd.DataFrame(rows, columns=cols)


def _p(v: float) -> str:
    return "-" if math.isnan(v) else ("< 0.001" if v < 1e-3 else f"{v:.3f}")


def pairs_markdown(table: pd.DataFrame, digits: int = 4) -> str:
    """A `compare_pairs` table as GitHub markdown: a - b with its interval, p-values, n and the
    smallest difference the pairs could detect at 80% power."""
    f = lambda v: "-" if pd.isna(v) else f"{v:+.{digits}f}"  # noqa: E731
    extra = [c for c in table.columns if c not in PairedComparison.__dataclass_fields__]
    rows = []
    for _, r in table.iterrows():
        rows.append(
            {
                **{c: r[c] for c in extra},
                "a - b": f"{r['a']} - {r['b']}",
                "metric": r["metric"],
                "mean diff": f(r["mean_diff"]),
                "95% CI": "-"
                if pd.isna(r["ci_low"])
                else f"[{r['ci_low']:+.{digits}f}, {r['ci_high']:+.{digits}f}]",
                "t-test p": _p(r["p_ttest"]),
                "Wilcoxon p": _p(r["p_wilcoxon"]),
                "pairs": int(r["n_pairs"]),
                "detectable (80%)": "-"
                if pd.isna(r["detectable"])
                else f"{r['detectable']:.{digits}f}",
                "better (measured)": r["better"],
                "note": r["note"],
            }
        )
    return to_markdown(pd.DataFrame(rows), index=False)
