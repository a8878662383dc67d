"""SimAKT similarity-config parsing (heads.simakt_config.parse): errors name file and field."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("field, value", [("decay_factor", "fast"), ("future_weight", "0.3")])
def test_simakt_temporal_config_strings_name_file_and_field(tmp_path, field, value):
    import yaml

    from kt_lib.models.simakt import load_simakt_config

    head = {"type": "cluster", "n_clusters": 3, "temporal_config": {field: value}}
    raw = {"intra_heads": 3, "inter_heads": [head]}
    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump(raw))
    where = r"sim\.yaml: inter_heads\[0\]: "
    with pytest.raises(ValueError, match=rf"{where}temporal_config\.{field} must be a number"):
        load_simakt_config(path)
    inline = rf"similarity: inter_heads\[0\]: temporal_config\.{field}"
    with pytest.raises(ValueError, match=inline):
        load_simakt_config(raw)


@pytest.mark.parametrize(
    "old",
    [
        "kt_lib.heads.similarity.DeepSetSimilarity",  # before heads/ became packages by job
        "research.trajectory_similarity.DeepSetSimilarity",  # seed 000's name for it
    ],
)
def test_configs_naming_moved_modules_still_load(old):
    """Configs and checkpoints written before the heads moved into kt_lib.heads.inter name the
    old module; they load the same class, recorded under today's path."""
    from kt_lib.heads.inter import DeepSetSimilarity
    from kt_lib.heads.inter.base import head_class_of
    from kt_lib.heads.simakt_config.parse import parse_head

    head = parse_head({"type": "custom", "module_path": old}, "cfg")
    assert head.module_path == "kt_lib.heads.inter.DeepSetSimilarity"
    assert head_class_of("custom", old) is DeepSetSimilarity
