"""Reading configuration files (kt_lib.config): duplicate keys and bad JSON are refused."""

from __future__ import annotations

import pytest


def test_duplicate_yaml_and_json_keys_are_refused(tmp_path):
    from kt_lib.config import read_mapping

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("model:\n  d: 16\n  n_heads: 2\n  d: 32\n")
    with pytest.raises(ValueError, match=r"cfg\.yaml: .*line 4: duplicate key 'd'"):
        read_mapping(cfg)
    cfg.write_text("base: &b {d: 16, n_heads: 2}\nmodel:\n  <<: *b\n  d: 32\n")  # merge override
    assert read_mapping(cfg)["model"] == {"d": 32, "n_heads": 2}
    js = tmp_path / "cfg.json"
    js.write_text('{"model": {"d": 16, "d": 32}}')
    with pytest.raises(ValueError, match=r"cfg\.json: .*duplicate key 'd'"):
        read_mapping(js)
    js.write_text('{"model": {"d": 16,}}')
    with pytest.raises(ValueError, match=r"cfg\.json: not valid JSON at line 1, column 20"):
        read_mapping(js)
