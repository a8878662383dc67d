"""kt_lib.viz.search: a tuning record's learning curves, the pruner's median and the best so far."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402

from kt_lib.viz.search import best_so_far, plot_search, pruner_median  # noqa: E402


def _trials() -> list[dict]:
    def t(state, value, curve, end):
        return {"state": state, "value": value, "complete": end,
                "intermediate": {str(i): v for i, v in enumerate(curve)}}  # fmt: skip

    return [
        t("COMPLETE", 0.70, [0.60, 0.65, 0.70], "2026-11-27T10:00"),
        t("PRUNED", None, [0.50, 0.52], "2026-11-27T10:05"),
        t("FAIL", None, [], "2026-11-27T10:06"),
        t("COMPLETE", 0.75, [0.62, 0.70, 0.75], "2026-11-27T10:20"),
    ]


def test_the_median_per_epoch_counts_only_the_trials_that_reached_it():
    epochs, median = pruner_median(_trials())
    assert epochs.tolist() == [0, 1, 2]
    np.testing.assert_allclose(median, [0.60, 0.65, 0.725])  # epoch 2: the two whole trials


def test_best_so_far_follows_the_order_trials_ended_and_ignores_unfinished_values():
    trials = _trials()
    np.testing.assert_allclose(best_so_far(trials), [0.70, 0.70, 0.70, 0.75])
    np.testing.assert_allclose(best_so_far(trials[::-1]), [0.70, 0.70, 0.70, 0.75])  # by time
    assert np.isnan(best_so_far([trials[1]])).all()  # no completed trial yet


def test_the_plot_draws_each_reporting_trial_the_median_and_names_the_states():
    left, right = plot_search(_trials(), label="dtransformer")
    assert len(left.lines) == 3 + 1  # three trials reported epochs, plus the median
    black = [ln for ln in left.lines if ln.get_color() == "black"]
    assert len(black) == 1 and black[0].get_ydata()[-1] == 0.75  # the best trial
    assert left.get_title() == "dtransformer: 2 complete, 1 pruned, 1 fail"
    assert right.lines[0].get_ydata().tolist() == [0.70, 0.70, 0.70, 0.75]
