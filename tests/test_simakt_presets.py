"""SimAKT's typed configuration: presets build what they built before, parsed once, seed
000's examples as written, Step 1 approaches."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from kt_lib.audit import audit_causality
from kt_lib.checkpoint import load_model, save_model
from kt_lib.data.synthetic import simulate
from kt_lib.heads.simakt_config import load_simakt_configs
from kt_lib.models import build_model
from kt_lib.models.simakt import load_simakt_config
from tests.simakt_support import (
    DATA,
    NUM_C,
    SEED_EXAMPLES,
    SIZES,
    batch_of,
    dual,
    simakt,
    students,
)

# -- the typed configuration: presets unchanged, parsed once, seed examples ---------------------

REFERENCE = json.loads((DATA / "simakt_preset_reference.json").read_text())
REF_INLINE = {  # the '@' cases of the reference file
    "@tiny": None,  # TINY_SIMILARITY, filled in below
    "@dual_content": dual(strategy="content"),
    "@dual_block2": dual(0.5, encoder="block2"),
}


@pytest.mark.parametrize("name", [k for k in REFERENCE if not k.startswith("_")])
def test_presets_build_the_models_they_built_before(name):
    """State dict keys/shapes and outputs (eval, and train mode for a fixed seed) as recorded
    from the code before the typed configuration; then backward and the causality audit."""
    from kt_lib.models.simakt import TINY_SIMILARITY

    ref = REFERENCE[name]
    train = simulate(ref["students"], 8, num_c=NUM_C, problems_per_c=3, seed=1).data
    spec = {"preset": name}
    if name.startswith("@"):
        spec = {"similarity": REF_INLINE[name] or TINY_SIMILARITY}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.manual_seed(0)
        model = build_model("simakt", dataset=train, **spec, **{**SIZES, "max_len": 8})
    model.prepare(train)
    assert [[k, list(v.shape)] for k, v in model.state_dict().items()] == ref["state_dict"]
    batch = batch_of(train, range(4), pad_to=8)
    # banks come out of k-means / nearest neighbours on BLAS, whose rounding differs by CPU and
    # grows through the bank: another CPU than the recording's moves logits by up to 6e-5
    # (cluster_dominant, full_collaborative on an Intel Xeon); a changed model moves them far more
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(batch).logits, torch.tensor(ref["eval_logits"]), atol=2e-4)
    model.train()
    torch.manual_seed(7)
    out = model(batch)
    assert torch.allclose(out.logits.detach(), torch.tensor(ref["train_logits"]), atol=2e-4)
    model.loss(out, batch)["total"].backward()
    model.eval()
    assert audit_causality(model, batch, steps=[0, 3, 7])


def test_similarity_is_parsed_once(monkeypatch):
    import kt_lib.heads.simakt_config as sc

    calls = []
    original = sc.parse_similarity
    monkeypatch.setattr(
        sc, "parse_similarity", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    build_model("simakt", num_c=NUM_C, similarity="position_weighted_dual", **SIZES)
    assert len(calls) == 1


def test_config_object_in_the_model_config_round_trips(tmp_path):
    sim = load_simakt_config("dual_modular").with_settings(
        n_clusters=4, memory_size=8, k_neighbors=3
    )
    model = simakt(sim, students())
    assert model.similarity is not None and isinstance(model.config.similarity, dict)
    assert load_simakt_config(model.config.similarity).to_mapping() == sim.to_mapping()
    save_model(tmp_path / "m", model)  # the config is plain JSON
    loaded, _, _ = load_model(tmp_path / "m")
    batch = batch_of(students(), range(3))
    with torch.no_grad():
        assert torch.equal(loaded.eval()(batch).logits, model(batch).logits)


@pytest.mark.parametrize("path", SEED_EXAMPLES, ids=lambda p: p.stem)
def test_seed_examples_load_as_written(path):
    """Every configuration block of seed 000 loads, builds an 8-head model, round-trips through
    its mapping, and (banks shrunk) prepares, runs and passes the causality audit."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        configs = load_simakt_configs(path)
    train = students(n=40)
    for name, sim in configs.items():
        assert load_simakt_config(sim.to_mapping(), warn=False).to_mapping() == sim.to_mapping()
        custom = any(h.type == "custom" for h in sim.heads)  # set_size: DeepSet's field
        small = sim.shrink(  # one size list for every layout: off heads keep theirs
            n_clusters=3,
            memory_size=6,
            k_neighbors=2,
            kmeans_n_init=1,
            set_size=4 if custom else None,
        )
        model = simakt(small, train)
        assert model.n_intra + len(sim.heads) == 8, name
        batch = batch_of(train, range(3))
        assert torch.isfinite(model(batch).logits).all(), name
        assert audit_causality(model, batch, steps=[2, 9], trials=1), name


@pytest.mark.parametrize(
    "approach, n, types",
    [
        ("cluster", None, ["cluster"]),
        ("cluster", 3, ["cluster", "cluster", "cluster"]),
        ("knn", 2, ["knn", "knn"]),
        ("hybrid", 1, ["hybrid"]),
        ("hybrid", 2, ["hybrid", "hybrid"]),
        ("position_weighted_dual", 2, ["cluster", "knn"]),
        ("none", 0, []),
        ("cluster", 0, []),
    ],
)
def test_step1_approaches_and_inter_heads(approach, n, types):
    raw = {"approach": approach, "temporal_config": {"future_weight": 0.2}}
    if approach != "none":
        raw.update(
            cluster_config={"n_clusters": 3}, knn_config={"memory_size": 6, "k_neighbors": 2}
        )
    if approach in ("cluster", "knn"):
        raw.pop("knn_config" if approach == "cluster" else "cluster_config")
    if n is not None:
        raw["inter_heads"] = n
    if n == 0:  # no head: its sections act on nothing and are refused, not left unread
        with pytest.raises(ValueError, match=r"inter_heads 0 builds no inter-student head: \["):
            load_simakt_config(raw)
        raw = {k: v for k, v in raw.items() if k in ("approach", "inter_heads")}
    sim = load_simakt_config(raw)
    assert [h.type for h in sim.heads] == types
    assert sim.n_intra(8) == 8 - len(types)
    if approach == "hybrid":
        parts = sim.heads[-1].params.modules
        assert [p.name for p in parts] == [
            f"{sim.heads[-1].name}.cluster",
            f"{sim.heads[-1].name}.knn",
        ]
        assert all(p.temporal.future_weight == 0.2 for p in parts)  # inherited
    if not types:  # inter_heads 0: DTransformer's parameters exactly
        torch.manual_seed(0)
        dt = build_model("dtransformer", num_c=NUM_C, **SIZES)
        torch.manual_seed(0)
        model = build_model("simakt", num_c=NUM_C, similarity=raw, **SIZES)
        assert all(
            torch.equal(a, b)
            for a, b in zip(dt.state_dict().values(), model.state_dict().values(), strict=True)
        )
    else:
        model = simakt(raw, students())
        assert torch.isfinite(model(batch_of(students(), range(2))).logits).all()
