"""OULAD, the Open University Learning Analytics Dataset (Kuzilek, Hlosta & Zdrahal, Scientific
Data 4, 2017; CC BY 4.0): assessment scores as ordinal responses on the Open University's bands.

Files (in RAW_PATH, or beside a given `studentAssessment.csv`): `studentAssessment.csv`
(id_student, id_assessment, date_submitted, is_banked, score) and `assessments.csv` (code_module,
code_presentation, id_assessment, assessment_type, date, weight).

- One sequence per student: every scored assessment of every module presentation they took.
- Item (problem id): the assessment, `id_assessment` (one per module presentation); skill: its
  module and type, `code_module/assessment_type` (e.g. `AAA/TMA`, `DDD/Exam`): the modules share
  no skill tags, so the type within a module is the only grouping the data gives.
- Order: time of submission. `date_submitted` and the deadline `date` count days from the start of
  their presentation, so both are put on one calendar: a presentation `YYYYB` starts in February
  and `YYYYJ` in October (the dataset's documentation; the day is not published, the 1st is
  taken). Rows are ordered by that submission day, ties by the deadline (a `?` deadline, most
  exams, after every dated one: the exam closes the presentation), then by id_assessment. Taking a
  student's presentations one after the other instead would reorder the few who overlap a B and a J
  presentation of one year (14 students of the real files).
- Responses: the score (0-100) on the Open University's grade bands, `bands` = K (default 5):
  K=5: 0 fail < 40, 1 40-59, 2 60-69, 3 70-84, 4 distinction >= 85; K=4 merges the top two
  (3 >= 70); K=2: 0 fail < 40, 1 pass >= 40. K=5 is the default: it is the finest scale the
  University itself grades on, and the dataset is here for its real ordinal scores.
- Dropped rows, counted: no score (`?`); then banked results (`is_banked` = 1)
  unless `keep_banked`. A banked result is a grade carried over from an earlier presentation of the
  module: its `date_submitted` (-1 in the real files) is not when the student did the work, and the
  work itself is the earlier presentation's (often already in the student's sequence), so by
  default it is not an interaction.
- Errors naming the file and the 1-based line: an id_assessment not in assessments.csv (or listed
  twice there), a score outside 0-100 or not a number, `is_banked` not 0/1, a date that is not a
  number (`?` is allowed only for the deadline), a presentation code not `YYYYB`/`YYYYJ`, an empty
  cell (the files mark a missing value with `?`: an empty cell is a damaged row, one short of
  fields for instance).
- No timestamps are written: the calendar above is exact only to the presentation's month.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from .common import find_file, make_log, table_input
from .raw import Drops, RawTable, read_table

BANDS = {5: (40, 60, 70, 85), 4: (40, 60, 70), 2: (40,)}  # K -> lower score of bands 1..K-1
DEFAULT_BANDS = 5
BAND_NAMES = {
    5: ["fail < 40", "40-59", "60-69", "70-84", "distinction >= 85"],
    4: ["fail < 40", "40-59", "60-69", ">= 70"],
    2: ["fail < 40", "pass >= 40"],
}
_START_MONTH = {"B": 2, "J": 10}  # the presentation code's letter -> month it starts in
_SCORES = "studentAssessment.csv"
_ASSESSMENTS = "assessments.csv"
_NO_VALUE = "?"


def bands(score: np.ndarray | pd.Series, K: int) -> np.ndarray:
    """The band (0..K-1) of each score on the Open University's scale (module doc)."""
    return np.searchsorted(np.asarray(BANDS[K], dtype=float), np.asarray(score), side="right")


def _numbers(table: RawTable, column: str, question_mark: bool) -> pd.Series:
    """The column as float; `?` is NaN where `question_mark`, else an error. An empty cell is an
    error (OULAD writes `?`; an empty cell is a damaged row, e.g. one short of fields)."""
    raw = table.frame[column]
    table.first_bad(raw.isna() | (raw.str.strip() == ""), column, "empty cell")
    unknown = raw.str.strip() == _NO_VALUE
    if not question_mark:
        table.first_bad(unknown, column, "{v}: a number is needed")
    table.frame[column] = raw.mask(unknown)
    return table.numbers(column)


def _ids(table: RawTable, column: str) -> pd.Series:
    """Integer ids as int64; an empty or non-integer cell is an error."""
    num = _numbers(table, column, question_mark=False)
    table.first_bad(num != num.round(), column, "{v} is not an integer id")
    return num.astype(np.int64)


def _starts(table: RawTable) -> pd.Series:
    """Day number (proleptic ordinal) of the first of each row's presentation's start month."""
    codes = table.frame["code_presentation"].fillna("").str.strip()
    parts = codes.str.extract(r"^(\d{4})([BJ])$")
    table.first_bad(parts[0].isna(), "code_presentation", "{v} is not a presentation YYYYB/YYYYJ")
    return pd.Series(
        [
            datetime.date(int(y), _START_MONTH[h], 1).toordinal()
            for y, h in zip(parts[0], parts[1], strict=True)
        ],
        index=codes.index,
        dtype=float,
    )


def _assessments(path: Path) -> tuple[RawTable, pd.DataFrame]:
    """assessments.csv indexed by id_assessment: skill, start day, deadline day (inf for `?`)."""
    cols = ["code_module", "code_presentation", "id_assessment", "assessment_type", "date"]
    table = read_table(path, cols)
    f = table.frame
    ids = _ids(table, "id_assessment")
    table.first_bad(ids.duplicated(), "id_assessment", "{v} is listed twice")
    for c in ("code_module", "assessment_type"):
        table.first_bad(f[c].isna() | (f[c].str.strip() == ""), c, "empty cell")
    start = _starts(table)
    deadline = _numbers(table, "date", question_mark=True)
    frame = pd.DataFrame(
        {
            "skill": f["code_module"].str.strip() + "/" + f["assessment_type"].str.strip(),
            "start": start,
            "deadline": (start + deadline).fillna(np.inf),
        }
    )
    return table, frame.set_index(ids.to_numpy())


def _files(raw_path: Path) -> tuple[Path, Path]:
    if raw_path.is_file():
        scores, other = raw_path, raw_path.parent / _ASSESSMENTS
        if not other.is_file():
            raise FileNotFoundError(f"{raw_path}: no {_ASSESSMENTS} beside it (OULAD)")
        return scores, other
    return (
        find_file(raw_path, [_SCORES], f"OULAD ({_SCORES})"),
        find_file(raw_path, [_ASSESSMENTS], f"OULAD ({_ASSESSMENTS})"),
    )


def read(raw_path: Path, opts):
    if opts.ordinal:
        raise ValueError(
            "oulad: the responses are already ordinal (score bands); choose K with bands=5|4|2 "
            "(--bands), not ordinal=True"
        )
    K = DEFAULT_BANDS if opts.bands is None else opts.bands
    scores_path, assessments_path = _files(raw_path)
    atable, assess = _assessments(assessments_path)
    table = read_table(
        scores_path, ["id_student", "id_assessment", "date_submitted", "is_banked", "score"]
    )
    f = table.frame
    table.first_bad(f["id_student"].isna(), "id_student", "empty cell")
    aid = _ids(table, "id_assessment")
    table.first_bad(
        ~aid.isin(assess.index), "id_assessment", f"{{v}} is not an id_assessment of {atable.path}"
    )
    submitted = _numbers(table, "date_submitted", question_mark=False)
    banked = f["is_banked"].str.strip()
    table.first_bad(~banked.isin(["0", "1"]), "is_banked", "{v} is not 0 or 1")
    score = _numbers(table, "score", question_mark=True)
    table.first_bad((score < 0) | (score > 100), "score", "{v} is not a score in 0-100")
    drops = Drops()
    kept = drops.apply(f, score.isna(), "no score ('?')")
    if not opts.keep_banked:
        kept = drops.apply(kept, banked.loc[kept.index] == "1", "banked (is_banked = 1)")
    row = assess.loc[aid.to_numpy()]
    day = row["start"].to_numpy() + submitted.to_numpy()
    rank = np.empty(len(f), dtype=float)
    rank[np.lexsort((aid.to_numpy(), row["deadline"].to_numpy(), day))] = np.arange(len(f))
    cols = {
        "user": f["id_student"].str.strip(),
        "problem": aid.astype(str),
        "skill": pd.Series(row["skill"].to_numpy(), index=f.index),
        "response": pd.Series(bands(score.fillna(0), K), index=f.index),
        "time": pd.Series(rank, index=f.index),
    }
    choices = {
        "columns": {
            "student": "id_student",
            "problem": "id_assessment",
            "skill": "code_module/assessment_type of assessments.csv",
            "response": "score, on the Open University's bands",
            "order": "presentation start (B: February 1, J: October 1) + date_submitted",
        },
        "order": "submission day on the presentations' calendar, ties by the deadline (date; "
        "'?' last), then id_assessment",
        "bands": {
            "K": K,
            "lower scores of bands 1..K-1": list(BANDS[K]),
            "labels": BAND_NAMES[K],
        },
        "banked": "kept (is_banked = 1 rows are interactions, ordered at date_submitted)"
        if opts.keep_banked
        else "dropped: a banked result is a grade carried over from an earlier presentation; "
        "its date is not when the work was done",
        "dropped rows": "no score ('?'), then banked results unless keep_banked",
        "timestamps": "left out: the presentations' start days are not published",
    }
    log = make_log(table, kept, cols, drops, choices, K=K)
    log.inputs.append(table_input(atable))
    return log
