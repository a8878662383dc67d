"""SimAKT's memory attention against the synthetic archetypes (kt_lib.viz.memory_attention)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from kt_lib.data import load_bundle  # noqa: E402
from kt_lib.models import build_model  # noqa: E402
from kt_lib.viz import attention as att  # noqa: E402

pytestmark = pytest.mark.usefixtures("close_figures")


def test_memory_attention_against_archetypes():
    res = load_bundle(None, "synthetic", seed=0, num_students=60, seq_len=12, num_c=4)
    torch.manual_seed(0)
    model = build_model("simakt", preset="tiny", dataset=res.train, max_len=12)
    model.prepare(res.train)
    uid = res.test.students[0].uid
    maps, batch = att.student_attention(model, res.test, uid, max_len=12)
    slots = att.memory_slots(model, uid, res.truth)
    cluster = slots[slots["kind"] == "cluster"]
    assert len(cluster) == 3 and cluster["size"].sum() > 0
    shares = cluster[list(res.truth.arch_names)].to_numpy()
    assert np.allclose(shares.sum(1)[cluster["size"] > 0], 1.0)
    table = att.memory_attention(maps)
    assert set(table["map"]) == {"block3/cluster", "block3/knn", "block3/graph", "block3/attention"}
    assert att.plot_memory_attention(maps, slots)
    affinity = att.archetype_affinity(model, res.test, res.truth, max_len=12)
    sums = affinity.groupby(["map", "true"])["mass"].sum()
    assert np.allclose(sums.loc[["block3/cluster", "block3/knn"]], 1.0, atol=1e-5)
    assert att.plot_archetype_affinity(affinity)
