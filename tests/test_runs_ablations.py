"""kt_lib.runs.ablations: the predefined grids build valid configurations."""

from __future__ import annotations

import warnings

import pytest

from kt_lib.heads.simakt_config import load_simakt_config
from kt_lib.models import MODELS, make_config
from kt_lib.runs.ablations import build_grid, list_grids, simakt_similarity

NUM_C = 12


@pytest.mark.parametrize("name", list_grids())
def test_predefined_grids_build_valid_configs(name):
    grid = build_grid(name)
    assert len(grid) >= 2 and grid.description
    labels = [c["label"] for c in grid.cells]
    assert len(set(labels)) == len(labels)
    K = 4 if grid.ordinal else 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # no_inter_student: every head off
        for cell in grid.cells:
            assert MODELS[cell["model"]].ordinal == grid.ordinal
            cfg = make_config(
                cell["model"], preset=cell["preset"], num_c=NUM_C, K=K, **cell["overrides"]
            )
            cfg.validate()
            assert set(grid.factors) <= set(cell["factors"])


def test_simakt_grids_shrink_banks_and_set_factors():
    sim = simakt_similarity("position_weighted_dual", n_clusters=3, k_neighbors=2, future_weight=1)
    parsed = load_simakt_config(sim)
    cluster, knn = parsed.heads
    assert cluster.params.n_clusters == 3 and knn.params.k_neighbors == 2
    assert cluster.future_weight == knn.future_weight == 1.0
    step2 = load_simakt_config(
        simakt_similarity("dual_modular", n_clusters=5, memory_size=7, k_neighbors=3)
    )
    assert step2.heads[0].params.n_clusters == 5 and step2.heads[1].params.memory_size == 7
    with pytest.raises(ValueError, match="unknown SimAKT setting"):
        simakt_similarity("position_weighted_dual", clusters=3)
    heads = build_grid("simakt_heads")
    weights = {
        c["label"]: (c["factors"]["cluster_weight"], c["factors"]["knn_weight"])
        for c in heads.cells
    }
    assert weights == {
        "no_inter_student": (0.0, 0.0),
        "cluster_only": (1.0, 0.0),
        "knn_only": (0.0, 1.0),
        "dual": (1.0, 1.0),
    }
    fw = build_grid("simakt_future_weight", weights=[0, 1])
    assert [c["factors"]["future_weight"] for c in fw.cells] == [0.0, 1.0]
    with pytest.raises(KeyError, match="valid names"):
        build_grid("nope")
