"""benchmarks/bench_precision.py: bf16 and fp32 alternated on one model, at tiny sizes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_precision import main  # noqa: E402


def test_both_precisions_are_timed_on_one_model_and_their_ratio_and_loss_gap_written(tmp_path):
    out = tmp_path / "p.json"
    main(["--models", "dkt", "--batch", "4", "--len", "12", "--repeats", "2", "--out", str(out)])
    (row,) = json.loads(out.read_text())
    assert row["model"] == "dkt" and row["repeats"] == 2
    for prec in ("fp32", "bf16"):
        assert row[prec]["train_step_s"] > 0 and row[prec]["inference_s"] > 0
    ratio = row["bf16"]["train_step_s"] / row["fp32"]["train_step_s"]  # of times rounded to 0.1 ms
    assert row["bf16_over_fp32"]["train_step"] == pytest.approx(ratio, rel=0.15)
    # bf16 moves the loss a little, not nothing (it really ran in bf16) and not far
    assert 0 < row["loss_rel_change"] < 0.05, row["loss"]
    assert isinstance(row["cpu_bf16_flags"], list)


def test_zero_repeats_are_refused(capsys):
    with pytest.raises(SystemExit):
        main(["--repeats", "0"])
    assert "--repeats 0: must be >= 1" in capsys.readouterr().err


def test_a_run_keeps_the_other_models_rows_and_resume_skips_the_measured(tmp_path, capsys):
    out = tmp_path / "p.json"
    out.write_text(json.dumps([{"model": "akt", "kept": True}, {"model": "dkt", "old": True}]))
    main(["--models", "dkt", "--batch", "2", "--len", "6", "--repeats", "1", "--out", str(out)])
    rows = {r["model"]: r for r in json.loads(out.read_text())}
    assert rows["akt"] == {"model": "akt", "kept": True}  # not measured here: kept as it was
    assert "old" not in rows["dkt"] and rows["dkt"]["repeats"] == 1  # replaced
    capsys.readouterr()
    main(["--models", "dkt", "sakt", "--batch", "2", "--len", "6", "--repeats", "1",
          "--out", str(out), "--resume"])  # fmt: skip
    printed = [json.loads(line)["model"] for line in capsys.readouterr().out.splitlines()]
    assert printed == ["sakt"]  # dkt was in the file
    with pytest.raises(SystemExit):
        main(["--models", "nokt", "--out", str(out)])
    assert "unknown ['nokt']" in capsys.readouterr().err
