"""benchmarks/peers_table.py: the docs' peer table from bench_peers.py's JSON files."""

from __future__ import annotations

import json
import sys

import pytest

from kt_lib.provenance import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import peers_table  # noqa: E402


def _row(model: str, step: float, per_round: float, ours_params: int = 10) -> dict:
    side = {"params": ours_params, "train_step_s": 1.0, "peak_rss_mb": 1234.0}
    return {
        "model": model, "pykt_model": model,
        "ours_over_theirs": {"train_step": step, "inference": 0.5},
        "ours_over_theirs_per_round": {"train_step": per_round, "inference": 0.6},
        "ours": side, "theirs": {**side, "params": 20, "train_step_s": 2.0},
    }  # fmt: skip


def test_a_later_file_replaces_a_model_and_noisy_ratios_are_marked(tmp_path):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    skipped = {"model": "cl4kt", "pykt_model": "cl4kt", "skipped": "pyKT has no CL4KT"}
    failed = {"model": "robustkt", "error": "killed by signal 15"}
    old.write_text(json.dumps([_row("akt", 0.9, 0.9), _row("dkt", 1.14, 0.99), skipped, failed]))
    new.write_text(json.dumps([_row("akt", 0.55, 0.54, ours_params=2_066_201)]))
    lines = peers_table.table([str(old), str(new)]).splitlines()
    assert len(lines) == 2 + 4  # header, rule, one row per model
    assert "| robustkt (?) | - | - | error: killed by signal 15 |" in lines[-1]
    akt = next(x for x in lines if x.startswith("| akt"))
    assert "2,066,201 / 20" in akt and "| 0.55 (0.54) |" in akt and "new.json" in akt
    dkt = next(x for x in lines if x.startswith("| dkt"))
    assert "1.14 (0.99) ~" in dkt and "1,234 / 1,234 MB" in dkt  # the two ratios disagree
    assert "skipped: pyKT has no CL4KT" in next(x for x in lines if x.startswith("| cl4kt"))


def test_noisy_inference_is_marked_and_old_files_are_refused_by_name(tmp_path):
    row = _row("saint", 0.6, 0.63)
    row["ours_over_theirs"]["inference"] = 1.33  # per round: 0.6
    new = tmp_path / "new.json"
    new.write_text(json.dumps([row]))
    assert "| 1.33 (0.60) ~ |" in peers_table.table([str(new)])
    old = tmp_path / "old.json"
    old.write_text(json.dumps([{"model": "dkt", "pykt_model": "dkt", "ours": {}, "theirs": {},
                                "ours_over_theirs": {}}]))  # fmt: skip
    with pytest.raises(
        ValueError, match=r"old.json: model dkt lacks \['ours_over_theirs_per_round'\]"
    ):
        peers_table.table([str(old)])
