"""benchmarks/bench_eval.py: both evaluation orders timed on one split, their rows equal."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_eval import main  # noqa: E402

from kt_lib.data.formats import write_line3  # noqa: E402
from kt_lib.data.synthetic import simulate  # noqa: E402


def test_both_orders_are_timed_and_agree_and_longest_first_pads_less(tmp_path):
    sim = simulate(num_students=80, seq_len=30, num_c=5, seed=1, min_len=3).data
    folder = tmp_path / "tiny"
    folder.mkdir()
    write_line3(sim.subset(range(60)), folder / "tiny_train.csv")
    write_line3(sim.subset(range(60, 80)), folder / "tiny_test.csv")
    out = tmp_path / "e.json"
    main(["--data-dir", str(folder), "--format", "line3", "--models", "dkt", "--batch", "8",
          "--repeats", "1", "--split", "test", "--out", str(out)])  # fmt: skip
    (row,) = json.loads(out.read_text())
    assert row["model"] == "dkt" and row["log_order_s"] > 0 and row["longest_first_s"] > 0
    assert row["max_abs_diff"] < 1e-5  # the same predictions in either order
    assert row["real_steps"] <= row["cells_longest_first"] <= row["cells_log_order"]
