"""Every seed-000 similarity key acts, is refused with why, or (the seed's own example) warns."""

from __future__ import annotations

import warnings

import pytest

from kt_lib.heads.simakt_config import load_simakt_config
from kt_lib.heads.similarity import KNNHead
from kt_lib.heads.similarity_base import NegativeEuclidean
from kt_lib.models import build_model
from kt_lib.seed_warnings import SeedRangeWarning, SeedSettingWarning

TEMPORAL = {"strategy": "position_weighted", "future_weight": 0.3}


def step1(**sections) -> dict:
    """Seed 000's Step 1 dual layout (6 intra + cluster + KNN), sizes inside the seed's ranges."""
    cluster = {"n_clusters": 100, **sections.pop("cluster_config", {})}
    knn = {"memory_size": 200, "k_neighbors": 15, **sections.pop("knn_config", {})}
    return {
        "approach": "dual_similarity",
        "intra_heads": 6,
        "cluster_config": cluster,
        "knn_config": knn,
        **sections,
    }


def step2(head: dict, temporal: dict | None = TEMPORAL) -> dict:
    return {
        "intra_heads": 7,
        "inter_heads": [{**head, **({"temporal_config": temporal} if temporal else {})}],
    }


def quiet_load(spec):
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeedRangeWarning)
        warnings.simplefilter("error", SeedSettingWarning)
        return load_simakt_config(spec)


# -- similarity_metric / distance_metric under temporal strategies -------------------------------


@pytest.mark.parametrize(
    "head,key",
    [
        ({"type": "cluster", "n_clusters": 100, "similarity_metric": "euclidean"}, "similarity"),
        ({"type": "knn", "memory_size": 200, "distance_metric": "dot"}, "distance"),
    ],
)
def test_a_metric_under_a_temporal_strategy_is_refused(head, key):
    with pytest.raises(ValueError, match=rf"{key}_metric=.* no effect under the position_weighted"):
        load_simakt_config(step2(head))
    sim = quiet_load(step2(head, temporal=None))  # content scoring: the metric acts
    assert sim.heads[0].params.__dict__[f"{key}_metric"] == head[f"{key}_metric"]


def test_the_seeds_own_metric_under_a_temporal_strategy_warns():
    """Seed 000's position_weighted_dual sets similarity_metric: cosine with a temporal_config."""
    spec = step1(cluster_config={"similarity_metric": "cosine"}, temporal_config=TEMPORAL)
    with pytest.warns(SeedSettingWarning, match="similarity_metric='cosine' has no effect"):
        load_simakt_config(spec)
    quiet_load(step1(temporal_config=TEMPORAL))  # not set: nothing to say


def test_the_content_metric_acts_in_the_model():
    sim = quiet_load(step2({"type": "knn", "memory_size": 200, "k_neighbors": 15}, None))
    model = build_model("simakt", preset="tiny", similarity=sim, num_c=10)
    assert isinstance(model.inter.heads[0].metric, NegativeEuclidean)


def test_changing_a_metric_of_temporal_heads_by_settings_is_refused():
    sim = quiet_load(step1(temporal_config=TEMPORAL))
    with pytest.raises(ValueError, match="similarity_metric='dot' has no effect"):
        sim.with_settings(similarity_metric="dot")


# -- head_allocation ---------------------------------------------------------------------------


def allocation(seventh: str, eighth: str) -> dict:
    return {"head_1_to_6": "intra_student", "head_7": seventh, "head_8": eighth}


def test_head_allocation_decides_which_head_index_is_which():
    seed_order = quiet_load(step1(head_allocation=allocation("cluster_similarity", "knn")))
    swapped = quiet_load(step1(head_allocation=allocation("knn_similarity", "cluster_similarity")))
    assert [h.type for h in seed_order.heads] == ["cluster", "knn"]
    assert [h.type for h in swapped.heads] == ["knn", "cluster"]
    model = build_model("simakt", preset="tiny", similarity=swapped, num_c=10, n_heads=8, d=32)
    assert isinstance(model.inter.heads[0], KNNHead)  # head 7: the first inter slice of W_Q


@pytest.mark.parametrize(
    "alloc,match",
    [
        (
            {"head_1": "knn_similarity", "head_2_to_7": "intra_student", "head_8": "cluster"},
            "inter-student heads before intra-student",
        ),
        (allocation("cluster_similarity", "graph_similarity"), "'graph_similarity', which is not"),
        ({"head_1_to_6": "intra_student", "head_7": "cluster"}, "leaves out .*knn"),
        ({"head_1_to_5": "intra_student", "head_7": "cluster", "head_8": "knn"}, "without gaps"),
        ({"head_1_to_5": "intra_student", "head_6": "cluster", "head_7": "knn"}, "5 intra heads"),
    ],
)
def test_a_head_allocation_that_cannot_hold_is_refused(alloc, match):
    with pytest.raises(ValueError, match=match):
        load_simakt_config(step1(head_allocation=alloc))


# -- update_frequency ----------------------------------------------------------------------------


def test_update_frequency_with_the_default_encoder_warns_in_the_seeds_section_else_is_refused():
    with pytest.warns(SeedSettingWarning, match="update_frequency=10 has no effect"):
        sim = load_simakt_config(step1(cluster_config={"update_frequency": 10}))
    assert sim.memory.update_frequency == 0
    block2 = quiet_load(
        step1(cluster_config={"update_frequency": 10}, memory={"encoder": "block2"})
    )
    assert block2.memory.update_frequency == 10  # acts: banks rebuilt every 10 epochs
    with pytest.raises(ValueError, match="update_frequency=5 has no effect with the heuristic"):
        load_simakt_config(step1(memory={"update_frequency": 5}))
    with pytest.raises(ValueError, match="set encoder: block2"):
        sim.with_settings(update_frequency=3)


# -- memory sizes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "section,what",
    [
        ({"knn_config": {"memory_size": 5000}}, r"memory_size=5000 is outside \[50, 500\]"),
        ({"cluster_config": {"n_clusters": 2}}, r"n_clusters=2 is outside \[50, 200\]"),
    ],
)
def test_memory_sizes_far_outside_the_seeds_ranges_warn(section, what):
    with pytest.warns(SeedRangeWarning, match=what):
        load_simakt_config(step1(**section))


def test_memory_sizes_inside_the_seeds_ranges_are_quiet():
    sim = quiet_load(step1(knn_config={"memory_size": 500}, cluster_config={"n_clusters": 50}))
    assert sim.heads[1].params.memory_size == 500


def test_a_seed_warning_is_raised_once_per_process():
    """Python's own once-per-place memory is reset by any catch_warnings; this one is not."""
    spec = step1(knn_config={"memory_size": 5000})
    with pytest.warns(SeedRangeWarning):
        load_simakt_config(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeedRangeWarning)
        load_simakt_config(spec)  # the same message again: silent
