"""kt_lib.runs.study_render: a cell's device column."""

from __future__ import annotations

import pandas as pd

from kt_lib.runs.study_render import _devices


def test_a_cell_is_mixed_only_when_it_mixes_cpu_and_gpu_runs():
    def cell(*names):
        return _devices(pd.DataFrame({"device_name": names}))

    assert cell("AMD EPYC", "AMD EPYC") == "AMD EPYC"
    assert cell("Intel Xeon", "AMD EPYC") == "AMD EPYC, Intel Xeon"
    assert cell("NVIDIA H200", "AMD EPYC") == "MIXED: AMD EPYC, NVIDIA H200"
