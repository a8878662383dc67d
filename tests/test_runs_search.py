"""kt_lib.runs.search: Optuna studies over SimAKT's typed configuration."""

from __future__ import annotations

import pytest

optuna = pytest.importorskip("optuna")

from kt_lib.data import load_bundle  # noqa: E402
from kt_lib.heads.simakt_config import load_simakt_config  # noqa: E402
from kt_lib.runs.search import (  # noqa: E402
    best_overrides,
    importance,
    run_study,
    simakt_overrides,
    small_space,
    trials_frame,
)
from kt_lib.train import TrainConfig  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def bundle():
    return load_bundle(None, "synthetic", num_students=60, seq_len=16, num_c=4)


def _cfg(epochs=2):
    return TrainConfig(epochs=epochs, max_len=16, batch_size=16, lr=1e-2, progress=False)


def test_drawn_settings_reach_the_typed_configuration():
    over = simakt_overrides({"future_weight": 0.3, "knn_weight": 0.25, "n_clusters": 7, "lr": 1})
    sim = load_simakt_config(over["similarity"])
    assert sim.influence("knn") == 0.25
    temporal = [h.temporal for h in sim.heads if h.temporal is not None]
    assert temporal and all(t.future_weight == 0.3 for t in temporal)
    with pytest.raises(ValueError, match="unknown SimAKT setting"):
        simakt_overrides({"futur_weight": 0.3})
    space = small_space(40)
    assert space["memory_size"].high <= 20 and space["n_clusters"].high <= 10


def test_study_resumes_from_its_sqlite_file_and_reports_importance(bundle, tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    first = run_study(bundle, n_trials=2, train_config=_cfg(), storage=url)
    assert len(first.trials) == 2
    again = run_study(bundle, n_trials=1, train_config=_cfg(), storage=url)  # same name: resumed
    frame = trials_frame(again)
    assert len(frame) == 3 and frame["value"].between(0, 1).all()
    assert set(importance(again).index) <= set(small_space(len(bundle.train)))
    overrides, lr = best_overrides(again)
    assert "similarity" in overrides and lr == again.best_params["lr"]


def test_pruned_trials_stop_after_the_epoch_that_was_pruned(bundle):
    prune_all = optuna.pruners.ThresholdPruner(upper=0.0)  # every AUC > 0 is pruned
    study = run_study(bundle, n_trials=2, train_config=_cfg(epochs=4), pruner=prune_all)
    states = {t.state for t in study.trials}
    assert states == {optuna.trial.TrialState.PRUNED}
    assert all(len(t.intermediate_values) == 1 for t in study.trials)  # stopped at epoch 0
    assert all(t.user_attrs.get("device") for t in study.trials)  # pruned ones say where too
    assert {t.user_attrs["sampler_seed"] for t in study.trials} == {0}  # run_study's default


def test_k_neighbors_never_exceeds_the_drawn_bank_and_bad_trials_fail_alone(bundle):
    from kt_lib.runs.search import Dim

    space = {
        "n_clusters": Dim(4, 4, kind="int"),
        "memory_size": Dim(8, 8, kind="int"),
        "k_neighbors": Dim(30, 30, kind="int"),
    }
    study = run_study(bundle, n_trials=1, train_config=_cfg(epochs=1), space=space)
    assert study.trials[0].state == optuna.trial.TrialState.COMPLETE  # k clamped to 8
    bad = {"n_clusters": Dim(10_000, 10_000, kind="int")}  # more clusters than students
    study = run_study(bundle, n_trials=2, train_config=_cfg(epochs=1), space=bad)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL] * 2


def test_the_space_contains_seed_000s_ranges_and_shrinks_to_the_bank():
    from kt_lib.runs.search import SIMAKT_SPACE, preset_space

    def covers(name, low, high):
        dim = SIMAKT_SPACE[name]
        return dim.low <= low and dim.high >= high

    assert covers("cluster_weight", 0.0, 2.5) and covers("knn_weight", 0.0, 2.5)  # 1.0, 0.8-2.5
    assert covers("future_weight", 0.0, 1.0)  # strict_causal 0, full_collaborative 1
    assert covers("memory_size", 50, 500)  # the seed's stated range
    assert SIMAKT_SPACE["memory_size"].kind == "int"
    # every drawn setting is in the seed's range and the preset reads it
    assert set(preset_space(SIMAKT_SPACE)) == set(SIMAKT_SPACE)
    edge = {"cluster_weight": 2.5, "knn_weight": 2.5, "future_weight": 1.0, "memory_size": 500}
    sim = load_simakt_config(simakt_overrides(edge)["similarity"])
    assert [h.influence_weight for h in sim.heads] == [2.5, 2.5]
    assert {h.future_weight for h in sim.heads} == {1.0}
    assert sim.heads[1].params.memory_size == 500
    # small data: the bank size is still clamped to what a fold of the students can fill
    space = small_space(60)
    assert space["memory_size"].high == 20 and space["memory_size"].low <= 8


def test_the_ordinal_models_are_searched_over_their_own_fields():
    """Seed 002's phase 2: distance_penalty, window size, fusion, lr and embedding size for
    ModularAttentionGPCM, lr and size alone where a model has no mechanisms; trials maximise
    the validation QWK and their settings reach the model."""
    from kt_lib.runs.search import ORDINAL_SPACE, ordinal_space, run_ordinal_study

    assert set(ordinal_space("modular_attention_gpcm")) == set(ORDINAL_SPACE)
    assert set(ordinal_space("attention_gpcm")) == {"lr", "d"}
    assert set(ordinal_space("dkt_gpcm")) == {"lr", "d"}
    ordinal = load_bundle(None, "synthetic", num_students=60, seq_len=16, num_c=4, K=4)
    cfg = TrainConfig(epochs=1, max_len=16, batch_size=16, lr=1e-2, progress=False)
    study = run_ordinal_study(ordinal, "modular_attention_gpcm", n_trials=2, train_config=cfg,
                              model_preset="tiny")  # fmt: skip
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 2 and all(-1 <= t.value <= 1 for t in done)  # QWK
    for t in done:
        assert t.params["fusion"] in ORDINAL_SPACE["fusion"].choices
        assert 0.0 <= t.params["distance_penalty"] <= 2.0 and 2 <= t.params["window_size"] <= 7
