"""Attention collection and plots (kt_lib.viz.attention) for every model."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from kt_lib.audit import random_batch  # noqa: E402
from kt_lib.models import MODELS, build_model, list_models  # noqa: E402
from kt_lib.viz import attention as att  # noqa: E402
from tests.conftest import make_tiny_dataset  # noqa: E402

pytestmark = pytest.mark.usefixtures("close_figures")

NUM_C, NUM_PID = 12, 36


def _trained_tiny(name: str):
    K = 4 if MODELS[name].ordinal else 2
    train = make_tiny_dataset(NUM_C, NUM_PID, K)
    torch.manual_seed(0)
    model = build_model(name, preset="tiny", num_c=NUM_C, num_pid=NUM_PID, K=K)
    model.prepare(train)
    return model, random_batch(NUM_C, B=3, L=16, num_pid=NUM_PID, K=K, seed=1), K


@pytest.mark.parametrize("name", list_models())
def test_collect_attention_every_model(name):
    model, batch, K = _trained_tiny(name)
    model.train()
    maps = att.collect_attention(model, batch, index=1)
    assert model.training, "collect_attention restores the training mode"
    n = int(batch.mask[1].sum())
    if not MODELS[name].attends:  # the capability tag (DKT, qDKT, DIMKT, ...): no maps
        assert maps == {}
    else:
        assert maps, f"{name} returned no attention maps"
    for key, w in maps.items():
        layer, head = att.split_key(key)
        assert layer and head, key
        assert isinstance(w, np.ndarray) and w.ndim == 2 and np.isfinite(w).all(), key
        assert w.shape[0] == n, key
        if not att.is_memory(key):
            assert re.fullmatch(r"h\d+", head) and w.shape == (n, n), key
            assert np.triu(w, 1).max(initial=0) == 0, f"{key} attends to a later step"
    assert all(not att.is_memory(k) for k in maps) or MODELS[name].memory_maps  # the tag
    labels = att.step_labels(batch, 1, K)
    assert len(labels) == n
    keys = att.key_labels(model, batch, 1, K)
    assert len(keys) == n and (keys[0] == "start") == (name == "ikt3")


def test_named_maps_of_akt_simakt_and_ordinal():
    akt, batch, _ = _trained_tiny("akt")
    maps = att.collect_attention(akt, batch)
    assert {"retriever0", "retriever0/undecayed"} <= set(att.layers(maps))
    simakt, batch, _ = _trained_tiny("simakt")
    maps = att.collect_attention(simakt, batch)
    assert {"block3/cluster", "block3/knn"} <= {k for k in maps if att.is_memory(k)}
    assert att.layers(maps, memory=True) == ["block3"]
    modular, batch, _ = _trained_tiny("modular_attention_gpcm")
    maps = att.collect_attention(modular, batch)
    assert "ordinal_aware/attention" in att.layers(maps)


def test_tick_labels():
    batch = random_batch(NUM_C, B=1, L=3, K=2, seed=0, ragged=False)
    batch.q[0], batch.r[0] = torch.tensor([12, 3, 0]), torch.tensor([1, 0, 1])
    assert att.step_labels(batch) == ["q12✓", "q3✗", "q0✓"]
    batch.r[0] = torch.tensor([2, 0, 3])
    assert att.step_labels(batch, K=4) == ["q12:2", "q3:0", "q0:3"]


@pytest.mark.parametrize("name", ["sakt", "akt", "ikt3", "modular_attention_gpcm"])
def test_heatmaps_draw(name):
    model, batch, K = _trained_tiny(name)
    maps = att.collect_attention(model, batch)
    labels = att.step_labels(batch, 0, K)
    assert att.plot_heads(maps, labels=labels, key_labels=att.key_labels(model, batch, 0, K))
    assert att.plot_layers(maps, labels=labels, max_steps=8)
    per_model = {name: maps, "dkt": {}}
    assert att.plot_side_by_side(per_model, labels)
    with pytest.raises(KeyError, match="layers"):
        att.plot_heads(maps, "nope")


def test_decay_curves_and_fusion_weights():
    akt, _, _ = _trained_tiny("akt")
    rates = att.decay_rates(akt)
    assert set(rates) == {"encoder0", "question0", "retriever0"}
    curves = att.decay_curves(rates, max_distance=10, n=11)
    expected = np.exp(-rates["encoder0"][1] * 10)
    row = curves[(curves.layer == "encoder0") & (curves["head"] == "h1")].iloc[-1]
    assert row["factor"] == pytest.approx(expected)
    assert att.plot_decay_curves(akt)
    dt, _, _ = _trained_tiny("dtransformer")
    assert {"block1", "block2", "block3", "block4"} <= set(att.decay_rates(dt))
    modular, _, _ = _trained_tiny("modular_attention_gpcm")
    weights = att.fusion_weights(modular)
    assert weights["weight"].sum() == pytest.approx(1.0)
    assert att.plot_fusion_weights(modular)
    sakt, _, _ = _trained_tiny("sakt")
    assert att.fusion_weights(sakt).empty
    with pytest.raises(ValueError, match="no decay"):
        att.plot_decay_curves(sakt)
