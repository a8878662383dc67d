"""Paired comparisons: hand computations, a known shift, unmatched and failed runs, few pairs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from kt_lib.runs.stats import (
    compare_pairs,
    detectable_effect,
    lower_is_better,
    paired_comparison,
    pairs_markdown,
)


def runs_frame(a: np.ndarray, b: np.ndarray, dataset: str = "d1") -> pd.DataFrame:
    """Runs of models 'a' and 'b' on seeds 0..n-1 (fold None), one metric."""
    rows = [
        {"dataset": dataset, "model": m, "fold": None, "seed": s, "test_auc": float(v)}
        for m, values in (("a", a), ("b", b))
        for s, v in enumerate(values)
    ]
    return pd.DataFrame(rows)


def test_equals_a_hand_computation():
    a = np.array([0.71, 0.74, 0.69, 0.73, 0.75])
    b = np.array([0.70, 0.71, 0.70, 0.70, 0.72])
    runs = runs_frame(a, b).sample(frac=1.0, random_state=0)  # pairing is by key, not row order
    res = paired_comparison(runs, "a", "b")
    d = a - b
    half = st.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    assert res.n_pairs == 5 and res.unmatched_a == res.unmatched_b == res.failed == 0
    assert res.mean_diff == pytest.approx(d.mean(), abs=1e-12)
    assert (res.ci_low, res.ci_high) == pytest.approx((d.mean() - half, d.mean() + half))
    assert res.p_ttest == pytest.approx(st.ttest_rel(a, b).pvalue)
    assert res.p_wilcoxon == pytest.approx(st.wilcoxon(d).pvalue)
    assert res.mean_a == pytest.approx(a.mean()) and res.mean_b == pytest.approx(b.mean())
    assert res.better == "a" and res.note == ""
    flipped = paired_comparison(runs, "b", "a")
    assert flipped.mean_diff == pytest.approx(-d.mean()) and flipped.better == "a"
    assert flipped.p_ttest == pytest.approx(res.p_ttest)


def test_a_known_shift_is_detected_and_direction_follows_the_metric():
    rng = np.random.default_rng(0)
    b = rng.normal(0.75, 0.01, 20)
    a = b + 0.02 + rng.normal(0, 0.002, 20)  # a is better by 0.02 on every seed
    res = paired_comparison(runs_frame(a, b), "a", "b")
    assert res.ci_low < 0.02 < res.ci_high and res.ci_low > 0
    assert res.p_ttest < 1e-6 and res.p_wilcoxon < 1e-4 and res.better == "a"
    rmse = runs_frame(a, b).rename(columns={"test_auc": "test_rmse"})
    assert lower_is_better("test_rmse") and not lower_is_better("test_auc")
    assert paired_comparison(rmse, "a", "b", metric="test_rmse").better == "b"
    no_shift = paired_comparison(runs_frame(b + rng.normal(0, 0.01, 20), b), "a", "b")
    assert no_shift.p_ttest > 0.05 and no_shift.ci_low < 0 < no_shift.ci_high


def test_unmatched_and_failed_runs_are_counted():
    runs = runs_frame(np.array([0.7, 0.72, 0.71, 0.73]), np.array([0.69, 0.7, 0.7]))
    runs.loc[(runs.model == "a") & (runs.seed == 1), "test_auc"] = np.nan  # a failed run
    extra = {"dataset": "d2", "model": "b", "fold": 1, "seed": 0, "test_auc": 0.8}
    runs = pd.concat([runs, pd.DataFrame([extra])], ignore_index=True)  # other dataset
    res = paired_comparison(runs, "a", "b")
    # pairs: seeds 0 and 2; a's seed 3 has no b, b's seed 1 (a failed) and d2 have no a
    assert res.n_pairs == 2 and res.unmatched_a == 1 and res.unmatched_b == 2 and res.failed == 1
    assert "unmatched runs: 1 of a, 2 of b" in res.note and "1 run(s)" in res.note
    dup = pd.concat([runs, runs.iloc[[0]]], ignore_index=True)
    with pytest.raises(ValueError, match="several runs"):
        paired_comparison(dup, "a", "b")
    with pytest.raises(ValueError, match="'c'"):
        paired_comparison(runs, "a", "c")


def test_fewer_than_two_pairs_give_nan_with_a_note():
    res = paired_comparison(runs_frame(np.array([0.7]), np.array([0.6])), "a", "b")
    assert res.n_pairs == 1 and res.mean_diff == pytest.approx(0.1)
    assert all(math.isnan(v) for v in (res.ci_low, res.ci_high, res.p_ttest, res.p_wilcoxon))
    assert "1 pair" in res.note and "at least 2" in res.note
    assert res.better == "a"  # as measured, whatever the tests say
    apart = runs_frame(np.array([0.7]), np.array([0.6]))
    apart.loc[apart.model == "b", "seed"] = 5  # no common seed
    none = paired_comparison(apart, "a", "b")
    assert none.n_pairs == 0 and math.isnan(none.mean_diff) and none.unmatched_a == 1
    assert "0 pairs" in none.note and none.better == ""
    same = paired_comparison(runs_frame(np.array([0.7, 0.8]), np.array([0.6, 0.7])), "a", "b")
    assert math.isnan(same.p_ttest) and "no spread" in same.note


def test_the_detectable_effect_has_80_percent_power():
    # many pairs: the normal approximation (z_0.975 + z_0.8) * sd / sqrt(n)
    normal = (st.norm.ppf(0.975) + st.norm.ppf(0.8)) * 0.01 / math.sqrt(2000)
    assert detectable_effect(0.01, 2000) == pytest.approx(normal, rel=2e-3)
    # six pairs: simulated paired t-tests at that shift reject 80% of the time
    n, sd = 6, 0.004
    delta = detectable_effect(sd, n)
    assert delta > (st.norm.ppf(0.975) + st.norm.ppf(0.8)) * sd / math.sqrt(n)  # few pairs cost
    d = np.random.default_rng(0).normal(delta, sd, (40_000, n))
    p = st.ttest_1samp(d, 0.0, axis=1).pvalue
    assert (p < 0.05).mean() == pytest.approx(0.8, abs=0.01)
    assert detectable_effect(sd, 2 * n) < delta  # more pairs detect less
    assert math.isnan(detectable_effect(sd, 1)) and math.isnan(detectable_effect(0.0, 5))


def test_each_comparison_carries_its_detectable_effect():
    a = np.array([0.71, 0.74, 0.69, 0.73, 0.75])
    b = np.array([0.70, 0.71, 0.70, 0.70, 0.72])
    res = paired_comparison(runs_frame(a, b), "a", "b")
    assert res.detectable == pytest.approx(detectable_effect((a - b).std(ddof=1), 5))
    assert math.isnan(paired_comparison(runs_frame(a[:1], b[:1]), "a", "b").detectable)
    md = pairs_markdown(compare_pairs(runs_frame(a, b), ["a:b"]))
    assert "| detectable (80%) |" in md.splitlines()[0]
    assert f"| {res.detectable:.4f} |" in md.splitlines()[2]


def test_compare_pairs_table_and_markdown():
    rng = np.random.default_rng(1)
    runs = pd.concat(
        [
            runs_frame(rng.normal(0.8, 0.01, 5), rng.normal(0.7, 0.01, 5), "d1"),
            runs_frame(rng.normal(0.6, 0.01, 5), rng.normal(0.7, 0.01, 5), "d2"),
        ],
        ignore_index=True,
    )
    table = compare_pairs(runs, ["a:b"], per="dataset")
    assert table["dataset"].tolist() == ["d1", "d2"] and table["better"].tolist() == ["a", "b"]
    assert table["n_pairs"].tolist() == [5, 5]
    pooled = compare_pairs(runs, [("a", "b")])
    assert pooled["n_pairs"].tolist() == [10]
    md = pairs_markdown(table)
    assert md.splitlines()[0].startswith("| dataset | a - b | metric | mean diff | 95% CI |")
    assert len(md.splitlines()) == 4
    with pytest.raises(ValueError, match="A:B"):
        compare_pairs(runs, ["ab"])


def test_pairs_never_cross_devices():
    """The same run on an H100 and on a CPU differs by as much as the effects measured: a pair
    whose two runs come from different devices is left out, and the note says so."""
    rows = []
    for s, (va, vb, dev) in enumerate(
        [(0.80, 0.79, "cpu"), (0.81, 0.80, "cpu"), (0.82, 0.70, "gpu")]
    ):
        rows.append(
            {
                "dataset": "d",
                "model": "a",
                "fold": None,
                "seed": s,
                "test_auc": va,
                "device_name": dev,
            }
        )
        rows.append(
            {
                "dataset": "d",
                "model": "b",
                "fold": None,
                "seed": s,
                "test_auc": vb,
                "device_name": "cpu",  # seed 2: a ran on the GPU, b on the CPU
            }
        )
    res = paired_comparison(pd.DataFrame(rows), "a", "b")
    assert res.n_pairs == 2 and res.mean_diff == pytest.approx(0.01)
    assert "1 pair(s) across devices left out" in res.note
    assert res.unmatched_a == 0 and res.unmatched_b == 0


def test_two_cpu_models_pair_but_a_gpu_and_a_cpu_do_not():
    """Studies fill over sessions on different CPUs: those runs pair (they differ by rounding);
    a GPU run never pairs with a CPU one."""
    devices = [("AMD EPYC", "Intel(R) Xeon(R) Processor @ 2.50GHz"), ("AMD EPYC", "AMD EPYC"),
               ("NVIDIA H100 80GB HBM3", "AMD EPYC")]  # fmt: skip
    rows = [
        {"dataset": "d", "model": m, "fold": 0, "seed": s, "test_auc": v, "device_name": dev}
        for s, (da, db) in enumerate(devices)
        for m, v, dev in (("a", 0.80 + s / 100, da), ("b", 0.79 + s / 50, db))
    ]
    res = paired_comparison(pd.DataFrame(rows), "a", "b")
    assert res.n_pairs == 2 and res.mean_diff == pytest.approx(0.005)
    assert "1 pair(s) across devices left out" in res.note and "pairs from" not in res.note
    # each pair on one kind, the row pooling both kinds: said in the note (a review)
    rows += [
        {"dataset": "d", "model": m, "fold": 0, "seed": 3, "test_auc": v,
         "device_name": "NVIDIA H100 80GB HBM3"}
        for m, v in (("a", 0.83), ("b", 0.85))
    ]  # fmt: skip
    res = paired_comparison(pd.DataFrame(rows), "a", "b")
    assert res.n_pairs == 3 and "pairs from 2 cpu, 1 gpu" in res.note


def test_a_run_of_unknown_device_pairs_with_nothing():
    """A row without a device name cannot be shown to share its pair's device kind (it used to
    count as a CPU): the pair is left out and the note says why."""
    rows = [
        {"dataset": "d", "model": m, "fold": 0, "seed": s, "test_auc": v, "device_name": dev}
        for s, (da, db) in enumerate([("AMD EPYC", "AMD EPYC")] * 2 + [(None, "AMD EPYC")])
        for m, v, dev in (("a", 0.80 + s / 100, da), ("b", 0.79 + s / 50, db))
    ]
    res = paired_comparison(pd.DataFrame(rows), "a", "b")
    assert res.n_pairs == 2 and res.mean_diff == pytest.approx(0.005)
    assert "1 pair(s) with a run of unknown device left out" in res.note
    assert "across devices" not in res.note and res.unmatched_a == 0 and res.unmatched_b == 0


def test_losses_and_error_rates_are_lower_is_better_under_every_name():
    """`test_logloss` (every run stores it) and seed 002's `test_large_error` were read as
    higher-is-better, so a pair named the model with the worse loss the better one."""
    for m in (
        "test_logloss",
        "valid_logloss",
        "test_large_error",
        "test_rmse@pos1-10",
        "train_seconds",
        "wall_seconds",
        "params",
    ):  # fmt: skip  (costs: --pair-metric)
        assert lower_is_better(m), m
    for m in ("test_auc", "test_acc", "test_qwk", "test_auc@lenq1"):
        assert not lower_is_better(m), m
    b = np.array([0.50, 0.52, 0.51])
    loss = runs_frame(b - 0.06, b).rename(columns={"test_auc": "test_logloss"})
    assert paired_comparison(loss, "a", "b", metric="test_logloss").better == "a"


def test_pairs_that_differ_by_one_amount_get_no_interval():
    """A zero sample spread bounds nothing: no [d, d] interval printed as if it were one."""
    b = np.array([0.70, 0.71, 0.72])
    res = paired_comparison(runs_frame(b + 0.0013, b), "a", "b")
    assert res.n_pairs == 3 and math.isclose(res.mean_diff, 0.0013)
    assert math.isnan(res.ci_low) and math.isnan(res.ci_high) and math.isnan(res.p_ttest)
    assert "no interval" in res.note
