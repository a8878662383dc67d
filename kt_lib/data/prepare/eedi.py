"""Eedi, the NeurIPS 2020 Education Challenge (tasks 1-2 by default, `task="3_4"` for 3-4), as
pykt-toolkit reads its tasks 3-4 (`nips_task34_preprocess.py`).

The task: `task` when given; for a train file given directly, the one its name says
(`train_task_3_4.csv` -> "3_4"), and a `task` that disagrees with the name is an error; else "1_2".
The metadata files read are those of that task.

Files (found below RAW_PATH, or beside / above a given train file): `train_task_1_2.csv`
(QuestionId, UserId, AnswerId, IsCorrect), `answer_metadata_task_1_2.csv` (AnswerId,
DateAnswered), `question_metadata_task_1_2.csv` (QuestionId, SubjectId: a list such as
`[3, 71, 98, 209]`) and `subject_metadata.csv` (SubjectId, Level). A question's skills are its
level-3 subjects, in ascending id order. Order: DateAnswered, ties by the row's place.
Dropped: rows without user, question or IsCorrect, rows whose answer has no DateAnswered, rows
whose question has no level-3 subject (pykt keeps these under an empty concept), then IsCorrect
not 0/1.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np

from .common import binary, find_file, make_log, table_input
from .raw import Drops, RawTable, read_table

_TIME_FORMATS = ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")
_TASKS = ("1_2", "3_4")
_TRAIN_FILE = re.compile(r"train_task_(\w+)\.csv")


def _find(raw_path: Path, name: str) -> Path:
    base = raw_path if raw_path.is_dir() else raw_path.parent
    for d in (base, base.parent):
        try:
            return find_file(d, [name], f"Eedi {name}")
        except FileNotFoundError:
            continue
    raise FileNotFoundError(f"{raw_path}: no Eedi {name} below {base} or {base.parent}")


def _subjects(table: RawTable) -> dict[str, tuple[int, ...]]:
    """QuestionId -> its subject ids, parsed from the list text of each row."""
    out = {}
    frame = table.frame
    for row, q, text in zip(frame.index, frame["QuestionId"], frame["SubjectId"], strict=True):
        try:
            ids = ast.literal_eval(text) if isinstance(text, str) else []
            ids = tuple(int(i) for i in ids)
        except (ValueError, SyntaxError, TypeError):
            raise table.error(row, "SubjectId", f"{text!r} is not a list of ids") from None
        out[q] = ids
    return out


def task_of(raw_path: Path, task: str | None) -> str:
    """The Eedi task to read (module doc); a train file named for another task is an error."""
    named = None if raw_path.is_dir() else _TRAIN_FILE.fullmatch(raw_path.name)
    if named and task is not None and named.group(1) != task:
        raise ValueError(
            f"{raw_path}: the file is Eedi task {named.group(1)}'s train file, but task={task!r} "
            f"was asked (--task {task}); pass --task {named.group(1)}, leave --task out, or give "
            f"train_task_{task}.csv"
        )
    task = task or (named.group(1) if named else "1_2")
    if task not in _TASKS:
        raise ValueError(f"{raw_path}: Eedi task must be one of {list(_TASKS)}, got {task!r}")
    return task


def read(raw_path: Path, opts):
    if opts.ordinal:
        raise ValueError("eedi has no partial-credit columns: ordinal=True is not available")
    task = task_of(raw_path, opts.task)
    primary = (
        find_file(raw_path, [f"train_task_{task}.csv"], f"Eedi task {task}")
        if raw_path.is_dir()
        else raw_path
    )
    table = read_table(primary, ["QuestionId", "UserId", "AnswerId", "IsCorrect"])
    answers = read_table(
        _find(raw_path, f"answer_metadata_task_{task}.csv"), ["AnswerId", "DateAnswered"]
    )
    questions = read_table(
        _find(raw_path, f"question_metadata_task_{task}.csv"), ["QuestionId", "SubjectId"]
    )
    subjects = read_table(_find(raw_path, "subject_metadata.csv"), ["SubjectId", "Level"])
    level = subjects.numbers("Level")
    level3 = set(subjects.numbers("SubjectId")[level == 3].astype(int).tolist())
    skills = {
        q: "_".join(str(s) for s in sorted(set(ids) & level3))
        for q, ids in _subjects(questions).items()
    }
    when = answers.times("DateAnswered", _TIME_FORMATS)
    answer_time = dict(zip(answers.frame["AnswerId"], when, strict=True))
    f = table.frame
    drops = Drops()
    kept = drops.missing(f, ["UserId", "QuestionId", "IsCorrect"])
    time = f["AnswerId"].map(answer_time).astype(float)
    kept = drops.apply(kept, time.loc[kept.index].isna(), "no DateAnswered for the AnswerId")
    skill = f["QuestionId"].map(skills)
    kept = drops.apply(kept, skill.loc[kept.index].fillna("") == "", "no level-3 subject")
    correct = table.numbers("IsCorrect")
    kept = binary(kept, drops, "IsCorrect", correct)
    cols = {
        "user": f["UserId"],
        "problem": f["QuestionId"],
        "skill": skill,
        "response": correct.fillna(-1).astype(np.int64),
        "time": time,
        "timestamp": time,
    }
    choices = {
        "columns": {
            "student": "UserId",
            "problem": "QuestionId",
            "skill": "level-3 SubjectId of the question",
            "response": "IsCorrect",
            "order": "DateAnswered of answer_metadata",
        },
        "dropped rows": "missing UserId/QuestionId/IsCorrect, no DateAnswered, no level-3 "
        "subject, then IsCorrect not 0/1",
        "task": task,
    }
    log = make_log(table, kept, cols, drops, choices, skill_sep="_", skill_order="ascending id")
    log.inputs += [table_input(t) for t in (answers, questions, subjects)]
    return log
