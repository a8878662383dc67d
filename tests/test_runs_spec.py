"""kt_lib.runs.spec: run specs, evaluation configs and a plan's model settings, validated
against the models' config dataclasses."""

from __future__ import annotations

import pytest

from kt_lib.runs.data import DataSpec
from kt_lib.runs.spec import DEFAULT_PRESET, EvalConfig, ModelSettings, RunSpec, Variant
from kt_lib.train import TrainConfig


def test_a_spec_takes_its_evaluation_from_training_and_checks_fields():
    tc = TrainConfig(eval_batch_size=64, max_len=50, progress=False)
    spec = RunSpec("dkt", fields={"d": 8}, train=tc, data=DataSpec())
    assert spec.preset == DEFAULT_PRESET and spec.name == "dkt"
    assert spec.eval == EvalConfig(64, 50, "cpu", ("window",), 1)
    assert spec.validate() is spec
    nested = {"similarity": {"base": "knn_only"}}
    own = RunSpec("simakt", fields=nested).fields
    nested["similarity"]["base"] = "cluster_only"  # the caller's mapping changes later
    assert own == {"similarity": {"base": "knn_only"}}
    # a field named like a run setting is a field like any other: no reserved names
    with pytest.raises(ValueError, match=r"run 'x': dkt has no config field\(s\) \['seed'\]"):
        RunSpec("dkt", fields={"seed": 3}, label="x").validate()
    with pytest.raises(KeyError, match="unknown model 'nope'"):
        RunSpec("nope").validate()


def test_evaluation_always_scores_the_window_history():
    assert EvalConfig(histories=("sliding",)).histories == ("window", "sliding")
    with pytest.raises(ValueError, match="EvalConfig.stride must be an integer >= 1"):
        EvalConfig(stride=0)


def test_model_settings_merge_in_order_and_refuse_unknown_names():
    settings = ModelSettings.parse(
        overrides={"dkt": {"d": 6}, "narrow": {"d": 5}},
        variants={"narrow": {"model": "dkt", "d": 4, "n_layers": 2}},
        dataset_overrides={"a09": {"narrow": {"d": 3}, "dkt": {"d": 9}}},
    )
    assert settings.variants["narrow"] == Variant("narrow", "dkt", {"d": 4, "n_layers": 2})
    assert settings.cell("sim", "dkt") == ("dkt", {"d": 6})
    assert settings.cell("sim", "narrow") == ("dkt", {"d": 5, "n_layers": 2})
    assert settings.cell("a09", "narrow") == ("dkt", {"d": 3, "n_layers": 2})  # not dkt's entry
    assert settings.cell("sim", "no_such_model") == ("no_such_model", {})  # fails in its run
    with pytest.raises(ValueError, match=r"overrides\['dktt'\]: expected a registered model"):
        ModelSettings.parse(overrides={"dktt": {"d": 3}})
    with pytest.raises(ValueError, match="must map model names to fields"):
        ModelSettings.parse(dataset_overrides={"a09": ["dkt"]})


def test_eval_config_refuses_a_stride_past_the_window():
    with pytest.raises(ValueError, match="stride 60 > max_len 50"):
        EvalConfig(64, 50, "cpu", ("window", "sliding"), 60)
