"""benchmarks/bench_block4_fusion.py: it times Block 4's chunk recompute eager and compiled over
every chunk of a row, and checks the compiled outputs against the eager ones (dynamo's `eager`
backend here: the plumbing, without code generation)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_block4_fusion import main  # noqa: E402


def test_both_modes_are_timed_and_the_compiled_chain_matches(tmp_path):
    out = tmp_path / "f.json"
    res = main(["--backend", "eager", "--repeats", "1", "--len", "12", "--out", str(out)])
    assert json.loads(out.read_text()) == res
    assert res["chunks_per_row"] >= 1 and res["S"] == 12
    for mode in ("forward", "backward_recompute"):
        m = res[mode]
        assert m["eager_ms"] > 0 and m["compiled_ms"] > 0 and m["compiled_over_eager"] > 0
        assert m["max_abs_diff"] == 0.0  # the eager backend runs the same operators
