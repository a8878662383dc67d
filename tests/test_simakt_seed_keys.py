"""Every seed-000 similarity key acts, is refused with why, or (the seed's own example) warns."""

from __future__ import annotations

import warnings

import pytest

from kt_lib.heads.inter import KNNHead
from kt_lib.heads.inter.base import NegativeEuclidean
from kt_lib.heads.simakt_config import load_simakt_config
from kt_lib.models import build_model
from kt_lib.seed_warnings import SeedRangeWarning, SeedSettingWarning, quiet

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


# -- temporal settings a strategy does not read (review finding 3) -------------------------------


@pytest.mark.parametrize(
    "temporal,match",
    [
        (
            {"strategy": "content", "decay_factor": 0.5},
            "decay_factor=0.5 has no effect under the c",
        ),
        ({"strategy": "content", "future_weight": 0.9}, "future_weight=0.9 has no effect under"),
        ({"strategy": "prefix_aligned", "decay_factor": 0.5}, "it reads none of them"),
        ({"strategy": "position_weighted", "window_sizes": [5]}, r"reads it \(multiscale\)"),
        ({"strategy": "multiscale", "future_weight": 0.4}, "it reads window_sizes"),
    ],
)
def test_a_temporal_field_the_strategy_does_not_read_is_refused(temporal, match):
    with pytest.raises(ValueError, match=match):
        load_simakt_config(step2({"type": "cluster", "n_clusters": 100}, temporal))


def test_temporal_fields_act_where_read_and_the_seeds_value_elsewhere_warns():
    multi = quiet_load(
        step2({"type": "knn", "memory_size": 200}, {"strategy": "multiscale", "window_sizes": [4]})
    )
    model = build_model("simakt", preset="tiny", similarity=multi, num_c=10)
    assert model.inter.heads[0].temporal.windows == [4]  # acts: one projection per window
    with pytest.warns(SeedSettingWarning, match="decay_factor=0.95 has no effect under the c"):
        load_simakt_config(
            step2({"type": "cluster"}, {"strategy": "content", "decay_factor": 0.95})
        )


def test_a_hybrid_temporal_config_that_reaches_no_module_is_refused():
    module = {"type": "cluster", "n_clusters": 100, "temporal_config": {"strategy": "content"}}
    hybrid = {"type": "hybrid", "modules": [module]}
    with pytest.raises(ValueError, match="temporal_config reaches no module"):
        load_simakt_config(step2(hybrid))
    inherited = quiet_load(step2({**hybrid, "modules": [{"type": "knn", "memory_size": 200}]}))
    assert inherited.heads[0].params.modules[0].temporal.future_weight == 0.3  # inherits: acts


def test_with_settings_refuses_a_temporal_setting_no_head_reads():
    content = quiet_load(
        {"intra_heads": 6, "inter_heads": [{"type": "cluster", "n_clusters": 100}] * 2}
    )
    with pytest.raises(ValueError, match="decay_factor=0.5 has no effect: no head"):
        content.with_settings(decay_factor=0.5)
    mixed = quiet_load(
        {
            "intra_heads": 6,
            "inter_heads": [
                {"type": "cluster", "n_clusters": 100},
                {"type": "knn", "memory_size": 200, "temporal_config": TEMPORAL},
            ],
        }
    )
    changed = mixed.with_settings(decay_factor=0.5)
    assert [h.decay_factor for h in changed.heads] == [0.95, 0.5]  # the content head unchanged


def test_the_search_space_keeps_only_settings_the_preset_reads():
    from kt_lib.runs.search import SIMAKT_SPACE, preset_space, simakt_overrides

    assert preset_space(SIMAKT_SPACE, "position_weighted_dual") == SIMAKT_SPACE
    content = preset_space(SIMAKT_SPACE, "multi_similarity")  # content heads, no KNN head
    assert sorted(content) == ["cluster_weight", "lr", "n_clusters"]
    draw = {n: (int(d.high) if d.kind == "int" else d.high) for n, d in content.items()}
    overrides = simakt_overrides(draw, "multi_similarity")  # a trial builds instead of failing
    assert overrides["similarity"]["inter_heads"][0]["n_clusters"] == 200
    with pytest.raises(ValueError, match="has no effect"):
        simakt_overrides({"decay_factor": 0.9}, "multi_similarity")
    assert "memory_size" in preset_space(SIMAKT_SPACE, "cluster_only")  # knn_weight turns it on
    no_knn_weight = {k: v for k, v in SIMAKT_SPACE.items() if k != "knn_weight"}
    assert "memory_size" not in preset_space(no_knn_weight, "cluster_only")


# -- total_heads (review finding 4) --------------------------------------------------------------


def test_total_heads_is_checked_after_head_allocation_and_against_the_model():
    with pytest.raises(ValueError, match="6 intra \\+ 2 inter heads != total_heads=9"):
        load_simakt_config(step1(intra_heads=None, total_heads=9, head_allocation=allocation(
            "cluster_similarity", "knn_similarity")))  # fmt: skip
    step1_ten = {k: v for k, v in step1(total_heads=10).items() if k != "intra_heads"}
    step2_ten = {"total_heads": 10, "inter_heads": [{"type": "cluster", "n_clusters": 100}]}
    for spec in (step1_ten, step2_ten):
        sim = quiet_load(spec)
        with pytest.raises(ValueError, match="total_heads=10 but the model has n_heads=8"):
            build_model("simakt", preset="tiny", similarity=sim, num_c=10, n_heads=8, d=32)
        build_model("simakt", preset="tiny", similarity=sim, num_c=10, n_heads=10, d=40)
    assert quiet_load(step2_ten).to_mapping()["total_heads"] == 10  # kept through checkpoints


# -- settings of heads that are off (review finding 5) -------------------------------------------


@pytest.mark.parametrize("preset", ["knn_only", "no_inter_student"])
def test_a_setting_of_heads_that_are_all_off_is_refused(preset):
    sim = load_simakt_config(preset, warn=False)
    with pytest.raises(ValueError, match="n_clusters=30 acts on nothing: every head .*cluster"):
        sim.with_settings(n_clusters=30)
    with pytest.raises(ValueError, match="acts on nothing"):
        load_simakt_config({"base": preset, "n_clusters": 30}, warn=False)
    on = sim.with_settings(n_clusters=60, cluster_weight=0.5)  # turned on in the same call: acts
    assert on.heads[0].params.n_clusters == 60
    shrunk = sim.shrink(n_clusters=4, kmeans_n_init=1)  # grids' sizes skip off heads
    assert shrunk.heads[0].params.n_clusters == 100  # and banks only where a head is on:
    assert shrunk.memory.kmeans_n_init == (1 if preset == "knn_only" else 10)


def test_a_head_an_influence_rule_may_turn_on_takes_its_settings():
    spec = step1(
        cluster_config={"influence_weight": 0.0},
        large_dataset={"cluster_config": {"influence_weight": 1.0}},
    )
    sim = quiet_load(spec).with_settings(n_clusters=60)
    assert sim.heads[0].params.n_clusters == 60


# -- content metrics in Step 2 and in to_mapping (review finding 6) ------------------------------


def test_to_mapping_writes_only_what_each_head_reads_and_step2_metrics_warn():
    sim = quiet_load(step1(temporal_config=TEMPORAL))
    mapping = sim.to_mapping()
    cluster, knn = mapping["inter_heads"]
    assert "similarity_metric" not in cluster and "distance_metric" not in knn
    assert set(cluster["temporal_config"]) == {"strategy", "decay_factor", "future_weight"}
    assert quiet_load(mapping) == sim  # parses back with no warning
    content = quiet_load(step2({"type": "cluster", "n_clusters": 100}, None)).to_mapping()
    assert content["inter_heads"][0]["temporal_config"] == {"strategy": "content"}
    assert content["inter_heads"][0]["similarity_metric"] == "cosine"  # read: written
    head = {"type": "cluster", "n_clusters": 100, "similarity_metric": "cosine"}
    with pytest.warns(SeedSettingWarning, match="similarity_metric='cosine' has no effect"):
        load_simakt_config(step2(head))  # a Step 2 entry no longer passes silently


# -- warnings the library silences are not used up (review finding 13) ---------------------------


def test_a_seed_warning_silenced_by_the_library_is_still_shown_later():
    spec = step1(knn_config={"memory_size": 5000})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet():
            load_simakt_config(spec)
    assert not [w for w in caught if issubclass(w.category, SeedRangeWarning)]
    with pytest.warns(SeedRangeWarning, match="memory_size=5000"):
        load_simakt_config(spec)  # the user's own load still warns


def test_a_memory_setting_of_a_layout_that_builds_no_bank_is_refused():
    """no_inter_student builds no bank: kmeans_n_init or folds there would vary nothing; a
    layout with a head on takes them, and `shrink` skips them where no bank is built."""
    off = load_simakt_config("no_inter_student")
    for setting in ({"kmeans_n_init": 3}, {"folds": 3}):
        with pytest.raises(ValueError, match="act on nothing: every inter-student head"):
            off.with_settings(**setting)
        assert not off.takes(next(iter(setting)))
    assert off.shrink(kmeans_n_init=1).memory == off.memory
    on = load_simakt_config("cluster_only")
    assert on.with_settings(kmeans_n_init=3).memory.kmeans_n_init == 3 and on.takes("folds")
