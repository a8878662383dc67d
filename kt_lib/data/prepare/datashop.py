"""PSLC DataShop step exports: KDD Cup 2010 (Algebra I 2005-2006, Bridge to Algebra 2006-2007) and
Statics2011, as pykt-toolkit reads them (`algebra2005_`, `bridge2algebra2006_`,
`statics2011_preprocess.py`).

KDD Cup: tab-separated, unquoted; one row per student step. The problem is the pair
`Problem Name----Step Name`; its skills are the `~~`-joined knowledge components of `KC(Default)`
(Algebra) or `KC(SubSkills)` (Bridge); the response is `Correct First Attempt`; the order is
`First Transaction Time`. Rows without a student, problem, step, KC, time or response are dropped,
then rows whose response is not 0 or 1.

Statics2011 (`AllData_student_step_2011F.csv`, comma- or tab-separated): no problem ids; the skill
is the step, `Problem Name----Step Name`; `First Attempt` is correct (1) / incorrect (0), rows
with `hint` are dropped, as are rows without problem, step, time or first attempt. Students are
taken in the order of their sorted ids (pykt groups them with pandas' default sort).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from .common import binary, find_file, make_log
from .raw import Drops, read_table

_STUDENT, _PROBLEM, _STEP = "Anon Student Id", "Problem Name", "Step Name"
_KDD_TIME = "First Transaction Time"
_KDD_TIME_FORMATS = ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")
_STATICS_TIME_FORMATS = ("%Y/%m/%d %H:%M", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S")

KDD = {
    "algebra2005": ("algebra_2005_2006_train.txt", "KC(Default)"),
    "bridge2algebra2006": ("bridge_to_algebra_2006_2007_train.txt", "KC(SubSkills)"),
}


def _steps(f: pd.DataFrame) -> pd.Series:
    return f[_PROBLEM] + "----" + f[_STEP]


def read_kdd(raw_path: Path, opts, name: str):
    if opts.ordinal:
        raise ValueError(f"{name} has no partial-credit columns: ordinal=True is not available")
    file, kc = KDD[name]
    path = find_file(raw_path, [file], f"{name} ({file})")
    correct_col = "Correct First Attempt"
    table = read_table(path, [_STUDENT, _PROBLEM, _STEP, kc, _KDD_TIME, correct_col], sep="\t")
    f = table.frame
    drops = Drops()
    kept = drops.missing(f, [_STUDENT, _PROBLEM, _STEP, kc, _KDD_TIME, correct_col])
    correct = table.numbers(correct_col)
    time = table.times(_KDD_TIME, _KDD_TIME_FORMATS)
    kept = binary(kept, drops, correct_col, correct)
    cols = {
        "user": f[_STUDENT],
        "problem": _steps(f),
        "skill": f[kc],
        "response": correct.fillna(-1).astype(np.int64),
        "time": time,
        "timestamp": time,
    }
    choices = {
        "columns": {
            "student": _STUDENT,
            "problem": f"{_PROBLEM}----{_STEP}",
            "skill": kc,
            "response": correct_col,
            "order": _KDD_TIME,
        },
        "dropped rows": f"missing student, problem, step, {kc}, time or response; then "
        "response not 0/1",
        "order": f"{_KDD_TIME} (ms, read as UTC), ties by the row's place in the file",
        "separator": "tab, no quoting",
    }
    return make_log(table, kept, cols, drops, choices, skill_sep="~~")


_STATICS_FILE = "AllData_student_step_2011F.csv"
_ATTEMPT = "First Attempt"
_OUTCOMES = {"correct": 1, "incorrect": 0}


def read_statics(raw_path: Path, opts):
    if opts.ordinal:
        raise ValueError("statics2011 has no partial-credit columns: ordinal=True is not available")
    path = find_file(raw_path, [_STATICS_FILE], f"statics2011 ({_STATICS_FILE})")
    table = read_table(path, [_STUDENT, _PROBLEM, _STEP, _KDD_TIME, _ATTEMPT])
    f = table.frame
    drops = Drops()
    kept = drops.missing(f, [_STUDENT, _PROBLEM, _STEP, _KDD_TIME, _ATTEMPT])
    attempt = f[_ATTEMPT].str.strip().str.lower()
    kept = drops.apply(kept, attempt.loc[kept.index] == "hint", "First Attempt is hint")
    unknown = ~attempt.loc[kept.index].isin(list(_OUTCOMES))
    table.first_bad(unknown, _ATTEMPT, "{v} is not one of correct, incorrect, hint")
    time = table.times(_KDD_TIME, _STATICS_TIME_FORMATS)
    cols = {
        "user": f[_STUDENT],
        "skill": _steps(f),
        "response": attempt.map(_OUTCOMES).fillna(-1).astype(np.int64),
        "time": time,
        "timestamp": time,
    }
    choices = {
        "columns": {
            "student": _STUDENT,
            "skill": f"{_PROBLEM}----{_STEP}",
            "response": _ATTEMPT,
            "order": _KDD_TIME,
        },
        "dropped rows": "missing student, problem, step, time or first attempt; then "
        "First Attempt = hint",
        "order": f"{_KDD_TIME} (ms, read as UTC), ties by the row's place in the file",
        "problems": "none: the step is the skill (pykt's concept-only statics2011)",
    }
    return make_log(table, kept, cols, drops, choices, user_order="sorted")


READERS = {
    **{name: partial(read_kdd, name=name) for name in KDD},
    "statics2011": read_statics,
}
