"""kt_lib.runs.budget: seed 000's equal tuning budget. Every label searches the shared settings,
a preset also its own; the drawn settings build the model they name; a search resumes with the
trials it lacks; the best configurations become the simakt_tuned study's variants."""

from __future__ import annotations

import json

import optuna
import pytest

from kt_lib.data.synthetic import simulate
from kt_lib.models import build_model
from kt_lib.runs import budget, studies
from kt_lib.runs.search import trial_settings
from kt_lib.train import TrainConfig


def test_every_label_searches_the_shared_settings_and_a_preset_its_own():
    spaces = {label: budget.label_space(label, 400) for label in budget.BUDGET}
    for label, space in spaces.items():
        assert set(budget.SHARED_SPACE) <= set(space) and "lr" not in space, label
    assert set(spaces["dtransformer"]) == set(budget.SHARED_SPACE)
    assert set(spaces["simakt_no_inter"]) == set(budget.SHARED_SPACE)
    assert {"cluster_weight", "n_clusters"} <= set(spaces["simakt_cluster_only"])
    assert {"knn_weight", "k_neighbors"} <= set(spaces["simakt_knn_only"])
    assert "knn_weight" not in spaces["simakt_cluster_only"]  # acts on nothing there


@pytest.mark.parametrize("label", list(budget.BUDGET))
def test_drawn_settings_build_the_model_the_label_names(label):
    sim = simulate(num_students=40, seq_len=12, num_c=5, seed=0).data
    space = budget.label_space(label, len(sim))
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1)).ask()
    settings = trial_settings(trial, space)
    model_name, _ = budget.BUDGET[label]
    fields = budget.label_fields(label, settings)
    model = build_model(model_name, preset="tiny", dataset=sim, **fields)
    assert model.config.dropout == pytest.approx(settings["dropout"])
    assert (model.config.n_know, model.config.d_fc) == (settings["n_know"], settings["d_fc"])
    if label == "simakt_knn_only":
        heads = model.config.similarity_config().heads
        k = min(settings["k_neighbors"], settings["memory_size"])
        assert any(getattr(h.params, "k_neighbors", None) == k for h in heads)


def test_a_search_resumes_and_its_best_become_the_tuned_study(tmp_path, monkeypatch):
    sim = simulate(num_students=50, seq_len=12, num_c=5, seed=2).data
    bundle = type("B", (), {"train": sim.subset(range(40)), "valid": sim.subset(range(40, 50))})
    storage = f"sqlite:///{tmp_path / 'budget.db'}"
    cfg = TrainConfig(epochs=1, progress=False)
    for label in ("dtransformer", "simakt_knn_only"):
        budget.search_label(bundle, label, 2, cfg, storage, preset="tiny")
        assert budget.finished_trials(storage, label) == 2
    budget.search_label(bundle, "dtransformer", 3, cfg, storage, preset="tiny")
    assert budget.finished_trials(storage, "dtransformer") == 3  # one more, not three
    best = budget.best_configs(storage)
    assert set(best) == {"dtransformer", "simakt_knn_only"}
    assert best["dtransformer"]["trials"] == {"complete": 3}
    assert set(best["dtransformer"]["fields"]) == set(budget.SHARED_SPACE)
    knn = best["simakt_knn_only"]
    heads = {h["type"]: h for h in knn["fields"]["similarity"]["inter_heads"]}
    assert heads["knn"]["influence_weight"] == knn["params"]["knn_weight"]
    assert heads["cluster"]["influence_weight"] == 0.0  # knn_only stays knn-only
    out = tmp_path / "tuning.json"
    budget.main(["best", "--storage", storage, "--out", str(out)])
    assert json.loads(out.read_text())["labels"].keys() == best.keys()
    variants = budget.tuned_variants(out)
    assert variants["dtransformer_tuned"]["model"] == "dtransformer"
    study = studies.tuned_study(variants)
    assert study.pairs == (("simakt_knn_only_tuned", "dtransformer_tuned"),)
    plan = study.plan()
    assert {r["model"] for r in plan} == {"dtransformer_tuned", "simakt_knn_only_tuned"}
    assert sorted({r["seed"] for r in plan}) == [0, 1, 2, 3, 4]
    assert budget.tuned_variants(tmp_path / "none.json") == {}
    with pytest.raises(ValueError, match="no label 'nope'"):
        budget.search_label(bundle, "nope", 1, cfg, storage)
