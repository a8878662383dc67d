"""kt_lib.runs.study_render: a cell's device column."""

from __future__ import annotations

import pandas as pd
import pytest

from kt_lib.runs.study_render import _devices, write_blocks


def test_a_cell_is_mixed_only_when_it_mixes_cpu_and_gpu_runs():
    def cell(*names):
        return _devices(pd.DataFrame({"device_name": names}))

    assert cell("AMD EPYC", "AMD EPYC") == "AMD EPYC"
    assert cell("Intel Xeon", "AMD EPYC") == "AMD EPYC, Intel Xeon"
    assert cell("NVIDIA H200", "AMD EPYC") == "MIXED: AMD EPYC, NVIDIA H200"


def test_write_blocks_replaces_each_block_and_only_it(tmp_path):
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text("x\n<!-- study:s -->\nold\n<!-- /study:s -->\ny\n<!-- study:t -->\nkeep\n")
    b.write_text("no block here\n")
    assert write_blocks("s", "new\n", [a, b]) == [a]
    assert (
        a.read_text() == "x\n<!-- study:s -->\nnew\n<!-- /study:s -->\ny\n<!-- study:t -->\nkeep\n"
    )
    assert write_blocks("s", "new\n", [a, b]) == []  # unchanged: nothing written
    with pytest.raises(ValueError, match="no <!-- study:u --> block"):
        write_blocks("u", "new\n", [a, b])
