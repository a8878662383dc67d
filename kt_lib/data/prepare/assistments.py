"""ASSISTments 2009 (skill builder), 2012, 2015 and 2017: columns, filters and order as pykt-toolkit
reads them (`pykt/preprocess/assist20XX_preprocess.py`), and the ordinal option.

- 2009, `skill_builder_data_corrected_collapsed.csv`: user_id, problem_id, skill_id (several
  skills `_`-joined), ordered by order_id;
- 2012, `2012-2013-data-with-predictions-4-final.csv`: user_id, problem_id, skill_id, start_time;
- 2015, `2015_100_skill_builders_main_problems.csv`: user_id, sequence_id (the skill; no
  problems), log_id;
- 2017, `anonymized_full_release_competition_dataset.csv`: studentId, problemId, skill, startTime.
  The skill name is split on `_` as in 2009: pykt's `assist2017_preprocess.py` keeps the name
  whole, but its `split_datasets.py` (`extend_multi_concepts`) splits every concept holding `_`
  into one interaction per part, for every dataset with questions.

Rows missing any of the listed columns are dropped (2012 also without ms_first_response), then rows
whose `correct` is not 0 or 1 (2015's fractional partial credit). Ordinal responses (K=4) from the
partial-credit columns: 3 = right on the first attempt (`correct` = 1); 0 = the bottom hint (the
answer) was shown; 1 = hints asked or more than two attempts; 2 = otherwise (wrong once, no hint).
A missing attempt/hint/bottom-hint cell counts as 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from .common import binary, find_file, make_log
from .raw import Drops, read_table

ORDINAL_K = 4
_TIME_FORMATS = ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class Spec:
    file: str
    user: str
    problem: str | None
    skill: str
    time: str
    time_kind: str  # "number" (an order id), "datetime" (text), "seconds" (unix seconds)
    needed: tuple[str, ...]  # a row missing one of these is dropped (pykt's dropna subset)
    skill_sep: str | None = None
    usetime: tuple[str, float] | None = None  # (column, factor to milliseconds)
    partial: tuple[str, str, str] | None = None  # attempt count, hint count, bottom hint


SPECS = {
    "assist2009": Spec(
        "skill_builder_data_corrected_collapsed.csv",
        "user_id",
        "problem_id",
        "skill_id",
        "order_id",
        "number",
        ("user_id", "problem_id", "skill_id", "correct", "order_id"),
        skill_sep="_",
        partial=("attempt_count", "hint_count", "bottom_hint"),
    ),
    "assist2012": Spec(
        "2012-2013-data-with-predictions-4-final.csv",
        "user_id",
        "problem_id",
        "skill_id",
        "start_time",
        "datetime",
        ("user_id", "skill_id", "start_time", "problem_id", "correct", "ms_first_response"),
        usetime=("ms_first_response", 1.0),
        partial=("attempt_count", "hint_count", "bottom_hint"),
    ),
    "assist2015": Spec(
        "2015_100_skill_builders_main_problems.csv",
        "user_id",
        None,
        "sequence_id",
        "log_id",
        "number",
        ("user_id", "log_id", "sequence_id", "correct"),
    ),
    "assist2017": Spec(
        "anonymized_full_release_competition_dataset.csv",
        "studentId",
        "problemId",
        "skill",
        "startTime",
        "seconds",
        ("studentId", "problemId", "correct", "skill", "startTime"),
        skill_sep="_",
        usetime=("timeTaken", 1000.0),
        partial=("attemptCount", "hintCount", "bottomHint"),
    ),
}


def ordinal(correct: pd.Series, attempts: pd.Series, hints: pd.Series, bottom: pd.Series):
    """K=4 responses from ASSISTments' partial-credit columns (module doc)."""
    attempts, hints, bottom = (s.fillna(0) for s in (attempts, hints, bottom))
    r = np.where(bottom > 0, 0, np.where((hints > 0) | (attempts > 2), 1, 2))
    return pd.Series(np.where(correct == 1, 3, r), index=correct.index)


def read(raw_path: Path, opts, name: str):
    spec = SPECS[name]
    if opts.ordinal and spec.partial is None:
        raise ValueError(f"{name} has no partial-credit columns: ordinal=True is not available")
    path = find_file(raw_path, [spec.file], f"{name} ({spec.file})")
    required = {*spec.needed, "correct", spec.user, spec.skill, spec.time}
    if spec.problem:
        required.add(spec.problem)
    if opts.ordinal:
        required.update(spec.partial)
    optional = [spec.usetime[0]] if spec.usetime else []
    table = read_table(path, sorted(required), optional)
    f = table.frame
    drops = Drops()
    kept = drops.missing(f, spec.needed)
    correct = table.numbers("correct")
    if spec.time_kind == "datetime":
        time = table.times(spec.time, _TIME_FORMATS)
        timestamp = time
    else:
        time = table.numbers(spec.time)
        timestamp = time * 1000 if spec.time_kind == "seconds" else None
    kept = binary(kept, drops, "correct", correct)
    response = correct.fillna(-1).astype(np.int64)
    if opts.ordinal:
        response = ordinal(correct, *(table.numbers(c) for c in spec.partial))
    cols = {"user": f[spec.user], "skill": f[spec.skill], "response": response, "time": time}
    if spec.problem:
        cols["problem"] = f[spec.problem]
    if timestamp is not None:
        cols["timestamp"] = timestamp
    if spec.usetime and spec.usetime[0] in f.columns:
        cols["usetime"] = table.numbers(spec.usetime[0]) * spec.usetime[1]
    choices = {
        "columns": {
            "student": spec.user,
            "problem": spec.problem,
            "skill": spec.skill,
            "response": "correct",
            "order": spec.time,
        },
        "dropped rows": f"missing {list(spec.needed)}, then correct not 0/1",
        "order": f"{spec.time}, ties by the row's place in the file",
    }
    if opts.ordinal:
        choices["ordinal"] = (
            f"K={ORDINAL_K} from {list(spec.partial)}: 3 correct first attempt, 2 wrong once "
            "without hints, 1 hints or > 2 attempts, 0 bottom hint shown"
        )
    return make_log(
        table,
        kept,
        cols,
        drops,
        choices,
        skill_sep=spec.skill_sep,
        K=ORDINAL_K if opts.ordinal else 2,
    )


READERS = {name: partial(read, name=name) for name in SPECS}
