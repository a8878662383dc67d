"""SimAKT's similarity configuration (kt_lib.heads.simakt_config: schema, parse, loading):
presets, seed files, Step 1 / Step 2 parsing, errors, settings."""

from __future__ import annotations

import warnings

import pytest

from kt_lib.heads.simakt_config import (
    MemoryConfig,
    load_simakt_configs,
)
from kt_lib.models import build_model
from kt_lib.models.simakt import list_simakt_presets, load_simakt_config
from kt_lib.seed_warnings import SeedSettingWarning
from tests.simakt_support import DATA, NUM_C, PRESETS, SIZES, dual


def test_shipped_presets():
    assert sorted(PRESETS) == list_simakt_presets()
    layouts = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for name in PRESETS:
            sim = load_simakt_config(name)
            layouts[name] = (sim.n_intra(8), [(h.type, h.influence_weight) for h in sim.heads])
    assert layouts["none"] == (8, [])
    assert layouts["position_weighted_dual"] == (6, [("cluster", 1.0), ("knn", 1.0)])
    assert layouts["cluster_only"] == (6, [("cluster", 1.0), ("knn", 0.0)])
    assert layouts["minimal_modular"] == (7, [("cluster", 1.0)])
    assert [t for t, _ in layouts["multi_similarity"][1]] == [
        "cluster",
        "graph",
        "attention",
        "custom",
    ]
    strict = load_simakt_config("strict_causal").heads[0]
    assert (strict.strategy, strict.future_weight, strict.decay_factor) == (
        "position_weighted",
        0.0,
        0.95,
    )
    full = load_simakt_config("full_collaborative")
    assert full.heads[1].params.memory_size == 300 and full.heads[0].decay_factor == 0.98


def test_head_count_mismatch_and_intra():
    with pytest.raises(
        ValueError,
        match=r"head-count mismatch: 6 intra \+ 2 inter heads != "
        r"n_heads=4",
    ):
        build_model("simakt", num_c=5, similarity="dual_modular", d=32, n_heads=4)
    with pytest.raises(ValueError, match="total_heads=9"):
        load_simakt_config({**dual(), "total_heads": 9})
    with pytest.raises(ValueError, match="at least one intra-student head"):
        load_simakt_config({**dual(), "intra_heads": 0}).n_intra(2)
    with pytest.raises(ValueError, match="inter_heads must be 2"):
        load_simakt_config({"approach": "position_weighted_dual", "inter_heads": 3})


@pytest.mark.parametrize(
    "head, message",
    [
        (
            {"type": "clusterz"},
            "unknown inter-student head type 'clusterz'; valid types: attention, "
            "cluster, custom, graph, hybrid, knn",
        ),
        ({"type": "cluster", "influence_weight": -0.5}, "influence_weight must be >= 0"),
        (
            {"type": "knn", "temporal_config": {"future_weight": 1.5}},
            r"future_weight must be in \[0, 1\], got 1.5",
        ),
        ({"type": "knn", "temporal_config": {"future_weight": -0.1}}, "future_weight must be in"),
        (
            {"type": "knn", "memory_size": 10, "k_neighbors": 20},
            r"k_neighbors=20 is larger than the bank \(memory_size=10\)",
        ),
        ({"type": "cluster", "n_cluster": 3}, r"unknown field\(s\) \['n_cluster'\]"),
        (
            {"type": "graph", "temporal_config": {"strategy": "multiscale"}},
            "head type 'graph' does not support the multiscale strategy",
        ),
        (
            {
                "type": "custom",
                "module_path": "kt_lib.heads.inter.DeepSetSimilarity",
                "temporal_config": {"future_weight": 0.2},
            },
            "does not support the position_weighted strategy",
        ),
        (
            {"type": "attention", "temporal_config": {"future_weight": 0.2}},
            "future_weight must be 0 for an attention head",
        ),
        (
            {"type": "knn", "temporal_config": {"strategy": "completion", "future_weight": 0.0}},
            "completion weighs the predicted future by future_weight: it must be > 0",
        ),
        (
            {"type": "knn", "temporal_config": {"strategy": "multiscale", "window_sizes": []}},
            "window_sizes must be a non-empty list",
        ),
        ({"type": "knn", "sampling": "lottery"}, "sampling must be one of farthest_first, random"),
        ({"type": "cluster", "similarity_metric": "manhattan"}, "similarity_metric must be one of"),
        ({"type": "hybrid"}, "a hybrid head needs 'modules'"),
        (
            {"type": "hybrid", "modules": [{"type": "knn", "influence_weight": 2.0}]},
            "influence_weight belongs to the hybrid head",
        ),
        (
            {"type": "hybrid", "modules": [{"type": "cluster"}], "weights": [1.0, 2.0]},
            r"weights must be 1 numbers",
        ),
        ({"type": "knn", "temporal_config": {"strategy": "magic"}}, "unknown similarity strategy"),
        ({"type": "custom"}, "a custom head needs module_path"),
        ({"type": "custom", "module_path": "no_such_pkg.Head"}, "cannot import 'no_such_pkg'"),
        ({"type": "custom", "module_path": "torch.nn.Linear"}, "is not a subclass of"),
        (
            {"type": "custom", "module_path": "kt_lib.heads.inter.BaseSimilarityHead"},
            "is not a subclass of",
        ),
        ({"type": "custom", "module_path": "kt_lib.heads.inter.Nope"}, "has no 'Nope'"),
        ({"influence_weight": 1.0}, "needs a 'type'"),
    ],
)
def test_head_config_errors(head, message):
    with pytest.raises(ValueError, match=message):
        load_simakt_config({"intra_heads": 7, "inter_heads": [head]})


def test_config_errors_name_the_source(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("intra_heads: 7\ninter_heads:\n  - type: cluster\n    influence_weight: -1\n")
    with pytest.raises(ValueError, match=r"mine.yaml: inter_heads\[0\]: influence_weight"):
        load_simakt_config(path)
    with pytest.raises(ValueError, match="unknown SimAKT preset or config file 'nope'"):
        load_simakt_config("nope")
    with pytest.raises(ValueError, match="unknown approach 'triple'"):
        load_simakt_config({"approach": "triple"})
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['colour'\]"):
        load_simakt_config({"approach": "none", "colour": "red"})
    with pytest.raises(ValueError, match="unknown encoder 'lstm'"):
        load_simakt_config({**dual(), "memory": {"encoder": "lstm"}})
    with pytest.raises(ValueError, match="folds must be >= 2"):
        load_simakt_config({**dual(), "memory": {"folds": 1}})
    path.write_text("intra_heads: 7\ninter_heads:\n  - type: cluster\n    n_clusters: 3\n")
    assert build_model("simakt", num_c=5, similarity=str(path), **SIZES).n_intra == 7


def test_warning_when_every_inter_head_is_off():
    with pytest.warns(UserWarning, match="every inter-student head has influence_weight 0"):
        load_simakt_config("no_inter_student")
    with pytest.warns(UserWarning, match="influence_weight 0"):
        build_model("simakt", num_c=5, similarity="no_inter_student", **SIZES)


def test_seed_examples_match_the_shipped_presets():
    """The seed's multi-preset files parse to exactly the shipped presets of the same name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for file in ("similarity_approaches.json", "step_2_configurations.json"):
            for name, sim in load_simakt_configs(DATA / "seed000" / file).items():
                if name in list_simakt_presets():
                    mine = load_simakt_config(name).to_mapping()
                    theirs = sim.to_mapping()
                    mine.pop("description"), theirs.pop("description")
                    assert mine == theirs, name


def test_seed_layouts_and_collections():
    seed = DATA / "seed000"
    step2 = load_simakt_config(seed / "step_2_modular_config.json")
    assert [(h.name, h.temporal.strategy, h.temporal.future_weight) for h in step2.heads] == [
        ("cluster", "position_weighted", 0.3),
        ("knn", "position_weighted", 0.3),
        ("graph", "position_weighted", 0.2),  # temporal_config on a graph head
        ("custom", "content", 0.3),  # the seed's default, unread under content
    ]
    assert step2.heads[3].module_path == "kt_lib.heads.inter.DeepSetSimilarity"
    with pytest.warns(SeedSettingWarning, match="update_frequency=10 has no effect"):
        dual_cfg = load_simakt_config(seed / "dual_similarity_config.json")
    assert dual_cfg.heads[1].params.temperature == 0.1  # initial_temperature
    assert dual_cfg.memory.update_frequency == 0  # heuristic encoder: the seed's 10 is ignored
    strict = load_simakt_config(f"{seed / 'similarity_approaches.json'}:strict_causal")
    assert strict.heads[0].temporal.future_weight == 0.0
    assert strict.source.endswith("similarity_approaches.strict_causal")
    with pytest.raises(ValueError, match="holds several similarity configs"):
        load_simakt_config(seed / "similarity_approaches.json")
    with pytest.raises(ValueError, match="no similarity config named 'nope'; it holds none, "):
        load_simakt_config(seed / "similarity_approaches.json", name="nope")
    model = build_model(
        "simakt", num_c=NUM_C, similarity=f"{seed / 'influence_example3_ablation.json'}:knn_only"
    )
    assert model.inter.weights == [0.0, 1.0]


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"approach": "cluster", "inter_heads": 4}, "inter_heads must be in 0-3, got 4"),
        ({"approach": "knn", "inter_heads": "two"}, "inter_heads must be an integer 0-3"),
        ({"approach": "none", "inter_heads": 1}, "approach none builds no inter head"),
        ({"approach": "cluster", "knn_config": {}}, r"does not use \['knn_config'\]"),
        (
            {"approach": "hybrid", "cluster_config": {"influence_weight": 2}},
            "influence_weight belongs to the hybrid head",
        ),
        ({"large_dataset": {"cluster_config": {"n_clusters": 3}}}, "may set influence_weight only"),
        ({"lr_scaling": "sqrt"}, "lr_scaling must be one of none, inverse_influence"),
        (
            {
                "intra_heads": 7,
                "inter_heads": [{"type": "knn"}],
                "influence_rule": {"large": {"x": 1}},
            },
            r"influence rule \(large\): 'x' names no head",
        ),
    ],
)
def test_step1_and_rule_errors(raw, message):
    with pytest.raises(ValueError, match=message):
        load_simakt_config(raw)


def test_with_settings_changes_typed_fields_once():
    sim = load_simakt_config("multi_similarity")
    small = sim.with_settings(n_clusters=3, set_size=5, graph_weight=0.5, kmeans_n_init=2)
    assert small.heads[0].params.n_clusters == 3 and small.heads[3].params.set_size == 5
    assert small.heads[1].influence_weight == 0.5 and small.memory.kmeans_n_init == 2
    assert sim.heads[0].params.n_clusters == 80  # the original is untouched
    pw = load_simakt_config("dual_modular").with_settings(future_weight=1.0, decay_factor=0.5)
    assert all(h.temporal.future_weight == 1.0 and h.decay_factor == 0.5 for h in pw.heads)
    with pytest.raises(ValueError, match="future_weight=1.0 has no effect: no head"):
        load_simakt_config("multi_similarity").with_settings(future_weight=1.0)  # content heads
    with pytest.raises(ValueError, match=r"k_neighbors=400 is larger than the bank"):
        load_simakt_config("dual_modular").with_settings(k_neighbors=400)
    with pytest.raises(ValueError, match=r"future_weight must be in \[0, 1\]"):
        load_simakt_config("dual_modular").with_settings(future_weight=2.0)
    with pytest.raises(ValueError, match=r"unknown SimAKT setting\(s\) \['clusters'\]"):
        load_simakt_config("dual_modular").with_settings(clusters=3)
    assert MemoryConfig().kmeans_n_init == 10 and MemoryConfig().min_length == 5  # the seed's


def test_base_form_is_a_preset_with_settings():
    """{base: preset, setting: value} is the preset through with_settings, in a model config
    too (it stays a plain mapping, so checkpoints keep it), and its errors name the setting."""
    spec = {"base": "cluster_only", "n_clusters": 30, "cluster_weight": 0.5}
    assert load_simakt_config(spec) == load_simakt_config("cluster_only").with_settings(
        n_clusters=30, cluster_weight=0.5
    )
    model = build_model("simakt", preset="tiny", num_c=4, similarity=spec)
    assert model.config.similarity == spec
    assert model.config.similarity_config().heads[0].params.n_clusters == 30
    with pytest.raises(ValueError, match=r"unknown SimAKT setting\(s\) \['clusters'\]"):
        load_simakt_config({"base": "cluster_only", "clusters": 3})
    with pytest.raises(ValueError, match="base must name a SimAKT preset"):
        load_simakt_config({"base": 3})


# -- seed 000 to the letter: Step 1 strategy and temporal defaults (issue 32) ---------------------


def _heads(sim) -> list[dict]:
    return [h.to_mapping() for h in sim.heads]


def test_step1_without_temporal_config_is_position_weighted_as_the_seed_selects():
    seed = DATA / "seed000"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        examples = {
            **load_simakt_configs(seed / "influence_example1_cluster_dominant.json"),
            **load_simakt_configs(seed / "influence_example2_knn_dominant.json"),
            **load_simakt_configs(seed / "influence_example3_ablation.json"),
            **load_simakt_configs(seed / "configuration_compatibility.json"),
            "dual_similarity": load_simakt_config(seed / "dual_similarity_config.json"),
        }
    step1 = {k: v for k, v in examples.items() if k != "step_2_modular"}
    assert len(step1) == 7
    for name, sim in step1.items():
        got = [(h.type, h.strategy, h.decay_factor, h.future_weight) for h in sim.heads]
        assert got == [
            ("cluster", "position_weighted", 0.95, 0.3),
            ("knn", "position_weighted", 0.95, 0.3),
        ], name
    # a Step 2 head without temporal_config keeps content scoring (documented in docs/models.md)
    assert {h.strategy for h in examples["step_2_modular"].heads} == {"content"}
    # content stays one setting away in Step 1
    sections = {"cluster_config": {}, "knn_config": {}}
    content = load_simakt_config({**sections, "temporal_config": {"strategy": "content"}})
    assert {h.strategy for h in content.heads} == {"content"}


def test_the_seeds_cluster_only_example_is_the_shipped_cluster_only_preset():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        seed = load_simakt_config(
            DATA / "seed000" / "influence_example3_ablation.json", "cluster_only"
        )
        shipped = load_simakt_config("cluster_only")
    assert _heads(seed) == _heads(shipped)
    assert seed.n_intra(8) == shipped.n_intra(8) == 6
    assert [h.temporal.strategy for h in shipped.heads] == ["position_weighted"] * 2


def test_omitted_future_weight_is_the_seeds_0_3_and_no_similarity_is_approach_none():
    from kt_lib.heads.simakt_config.schema import TemporalConfig
    from kt_lib.models.simakt import SimAKTConfig

    assert TemporalConfig().future_weight == 0.3 and TemporalConfig().decay_factor == 0.95
    for temporal in ({"decay_factor": 0.9}, {"strategy": "position_weighted"}):
        head = load_simakt_config({"inter_heads": [{"type": "knn", "temporal_config": temporal}]})
        assert head.heads[0].future_weight == 0.3, temporal
    step1 = load_simakt_config({"cluster_config": {}, "knn_config": {}})
    assert [h.future_weight for h in step1.heads] == [0.3, 0.3]
    # an attention head has no later steps: its omitted future_weight is 0, not refused
    proto = {"type": "attention", "temporal_config": {"strategy": "position_weighted"}}
    assert load_simakt_config({"inter_heads": [proto]}).heads[0].future_weight == 0.0
    # no similarity config: the seed's {approach: none}, DTransformer's 8 intra heads
    for spec in (None, {}, {"approach": "none"}):
        sim = load_simakt_config(spec)
        assert (sim.approach, sim.heads, sim.n_intra(8)) == ("none", [], 8), spec
    model = build_model("simakt", similarity=None, num_c=NUM_C, **SIZES)
    assert model.inter is None
    # the registry's default is a SimAKT, not DTransformer: a documented deviation
    assert SimAKTConfig().similarity == "position_weighted_dual"


def test_the_attention_head_reads_no_future_weight_and_weights_must_be_numbers():
    """The prototype head has no later steps: under position_weighted it reads the decay alone,
    so a grid over future_weight skips it rather than fail on it; an influence weight that is
    not a number is refused by name."""
    from kt_lib.heads.inter.heads import CrossStudentAttentionHead

    assert CrossStudentAttentionHead.temporal_reads("position_weighted") == {"decay_factor"}
    with pytest.raises(ValueError, match=r"inter_weight must be a number >= 0, got 'big'"):
        load_simakt_config("dual_modular").with_settings(inter_weight="big")
