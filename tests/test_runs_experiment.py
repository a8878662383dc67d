"""kt_lib.runs.experiment: one RunSpec to its result; the keyword wrapper of notebooks gives
the same numbers."""

from __future__ import annotations

import pytest

from kt_lib.data import load_bundle
from kt_lib.runs import experiment as runs_experiment
from kt_lib.runs.experiment import run_model as run_experiment
from kt_lib.runs.spec import EvalConfig, RunSpec
from kt_lib.train import TrainConfig


def test_experiment_rows_carry_every_protocol():
    b = load_bundle(None, "synthetic", num_students=40, seq_len=30, num_c=4)
    tc = TrainConfig(epochs=1, max_len=12, progress=False)
    res = run_experiment(
        "dkt", b.train, b.valid, b.test, "tiny", train_config=tc, histories=("sliding",)
    )
    row = res.row()
    assert row["protocol"] == "per_question/window"
    assert row["test_auc"] == res.protocols["per_question/window"]["auc"]
    assert {
        "test_auc@per_row/window",
        "test_auc@per_question/sliding",
        "test_auc@per_row/sliding",
    } <= set(row)
    assert row["test_auc@per_row/sliding"] != row["test_auc"]  # logs of 30 > max_len 12


def test_a_spec_and_the_keyword_wrapper_give_the_same_run():
    b = load_bundle(None, "synthetic", num_students=30, seq_len=12, num_c=4)
    tc = TrainConfig(epochs=1, max_len=12, progress=False)
    spec = RunSpec("sakt", "tiny", {"d": 8}, seed=3, label="sakt d=8", train=tc)
    typed = runs_experiment.run_experiment(spec, b)
    wrapped = run_experiment("sakt", b.train, b.valid, b.test, "tiny", train_config=tc, seed=3,
                             label="sakt d=8", d=8)  # fmt: skip
    assert typed.name == wrapped.name == "sakt d=8" and typed.model.config.d == 8
    assert typed.test == wrapped.test and typed.figures()["valid_auc"] == typed.valid["auc"]
    skipped = runs_experiment.run_experiment(spec, runs_experiment.Splits(b.train, b.valid, None))
    assert skipped.test == {} and skipped.protocols == {} and skipped.valid == typed.valid
    with pytest.raises(ValueError, match="EvalConfig.histories"):
        EvalConfig(histories=("rolling",))


def test_the_final_scoring_runs_under_the_runs_attention_backend(monkeypatch):
    """`TrainConfig.backend` applies to every pass of a run: the validation and test scoring
    after `fit` too (they ran on the device's default backend before)."""
    from kt_lib.nn import backend

    seen = []
    plain_eval, plain_protocols = runs_experiment.evaluate, runs_experiment.evaluate_protocols

    def watched_eval(*a, **k):
        seen.append(backend._FORCED.get())
        return plain_eval(*a, **k)

    def watched_protocols(*a, **k):
        seen.append(backend._FORCED.get())
        return plain_protocols(*a, **k)

    monkeypatch.setattr(runs_experiment, "evaluate", watched_eval)
    monkeypatch.setattr(runs_experiment, "evaluate_protocols", watched_protocols)
    b = load_bundle(None, "synthetic", num_students=30, seq_len=12, num_c=4)
    tc = TrainConfig(epochs=1, max_len=12, progress=False, backend="reference")
    runs_experiment.run_experiment(RunSpec("sakt", "tiny", train=tc), b)
    assert seen == ["reference", "reference"]


def test_a_run_spec_refuses_a_training_seed_it_would_ignore():
    with pytest.raises(ValueError, match=r"TrainConfig.seed=3 would be ignored"):
        RunSpec("dkt", train=TrainConfig(seed=3))
    assert RunSpec("dkt", seed=3, train=TrainConfig(seed=3)).seed == 3  # the same seed: fine
