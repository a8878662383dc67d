"""From a cleaned interaction log to per-student sequences, ids and the pykt split.

What every dataset shares (pykt-toolkit's `split_datasets.py` choices, read from its source):
- students appear in the order of their first row in the raw file (Statics2011: sorted by id);
- each student's rows are ordered by the dataset's time key, ties by the row's place in the file;
- a student with fewer than `min_seq_len` rows (default 3) is dropped;
- a row tagged with several skills becomes consecutive interactions, one per skill, that share
  the problem and the response (`is_repeat` = 1 on the copies);
- raw problem, skill and student ids map to 0-based indices by first appearance;
- `test_frac` (0.2) of the students, `int(n * test_frac)` of them, are the test split, the others
  fall into `n_folds` (5) folds of near-equal size; both shuffles are `RandomState(seed)`
  permutations (pykt's `DataFrame.sample(frac=1, random_state=1024)`), so seed 1024 puts the same
  students in the same folds as pykt given the same students in the same order;
- a dataset whose responses are derived from statistics of the data (EdNet's ordinal option) sets
  `RawLog.relabel`, called after the split with the rows of the train/valid students marked, so
  that no test student moves a training label.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

LOG_COLUMNS = ("user", "skill", "response", "time")  # required; optional: problem, timestamp,
# usetime. `time` sorts a student's rows; `timestamp`/`usetime` (ms) go to the pykt CSV.


@dataclass
class RawInput:
    """One raw file that was read: where, its digest, size and text encoding."""

    path: str
    sha256: str
    bytes: int
    encoding: str = ""


@dataclass
class RawLog:
    """What a dataset reader hands to `build`: one row per kept raw row, indexed by file row."""

    frame: pd.DataFrame  # LOG_COLUMNS (+ problem, timestamp, usetime); user/skill/problem: text
    rows_read: int
    dropped: dict[str, int]
    inputs: list[RawInput]
    choices: dict[str, Any]  # the dataset's own choices, in words, for prepare.json
    skill_sep: str | None = None  # separator of several skills in one `skill` cell
    K: int = 2
    user_order: str = "first"  # "first": first row in the file; "sorted": by raw id
    skill_order: str = "appearance"  # how the skills of one cell are ordered (for the record)
    # responses set after the split: (kept rows, True on train/valid students' rows) -> responses
    relabel: Callable[[pd.DataFrame, np.ndarray], np.ndarray] | None = None


@dataclass
class Sequences:
    """Students' sequences after filtering and id mapping, plus the split."""

    uid: list[str]  # raw student ids, in student order
    q: list[np.ndarray]
    r: list[np.ndarray]
    pid: list[np.ndarray] | None
    is_repeat: list[np.ndarray]
    extra: dict[str, list[np.ndarray]]  # timestamps / usetimes (ms), where the data has them
    skills: list[str]  # raw skill of each 0-based index
    problems: list[str]
    fold: np.ndarray  # [n students] 0..n_folds-1, -1: test
    order: np.ndarray  # train_valid students in pykt's shuffled order, then the test students
    counts: dict[str, int] = field(default_factory=dict)
    max_concepts: int = 1


def _user_codes(users: pd.Series, order: str) -> tuple[np.ndarray, np.ndarray]:
    if order not in ("first", "sorted"):
        raise ValueError(f"user_order must be 'first' or 'sorted', got {order!r}")
    return pd.factorize(users, sort=order == "sorted")


def split_folds(n: int, seed: int, test_frac: float, n_folds: int) -> tuple[np.ndarray, np.ndarray]:
    """(fold of each student, written order): pykt's hold-out then k-fold, both seeded shuffles."""
    if not 0 < test_frac < 1:
        raise ValueError(f"test_frac must be in (0, 1), got {test_frac}")
    n_test = int(n * test_frac)
    perm = np.random.RandomState(seed).permutation(n)
    train, test = perm[: n - n_test], perm[n - n_test :]
    if n_test < 1 or len(train) < n_folds or n_folds < 2:
        raise ValueError(
            f"{n} students give {n_test} test students and {len(train)} for {n_folds} folds; "
            "need a test student, n_folds >= 2 and a student per fold (lower min_seq_len or "
            "n_folds, raise test_frac, or add data)"
        )
    train = train[np.random.RandomState(seed).permutation(len(train))]
    base, rest = int(len(train) * (1 / n_folds)), len(train) % n_folds
    sizes = [base + (i < rest) for i in range(n_folds)]
    fold = np.full(n, -1, dtype=np.int64)
    fold[train] = np.repeat(np.arange(n_folds), sizes)
    return fold, np.concatenate([train, test])


def build(log: RawLog, min_seq_len: int, seed: int, test_frac: float, n_folds: int) -> Sequences:
    """Order, filter, expand, map ids and split a dataset's log (module doc)."""
    df = log.frame
    if missing := [c for c in LOG_COLUMNS if c not in df.columns]:
        raise ValueError(f"a dataset reader left out log column(s) {missing}")
    if not len(df):
        raise ValueError("no interaction is left after dropping rows (see the drop counts)")
    ucode, users = _user_codes(df["user"], log.user_order)
    idx = np.lexsort((np.arange(len(df)), df["time"].to_numpy(), ucode))
    df, ucode = df.iloc[idx], ucode[idx]
    lengths = np.bincount(ucode, minlength=len(users))
    short = lengths < min_seq_len
    keep_users = np.flatnonzero(~short)
    counts = {
        "students_before_min_len": len(users),
        "dropped_students_short": int(short.sum()),
        "dropped_rows_short": int(lengths[short].sum()),
    }
    if not len(keep_users):
        raise ValueError(f"every student has fewer than min_seq_len={min_seq_len} interactions")
    remap = np.full(len(users), -1)
    remap[keep_users] = np.arange(len(keep_users))
    sel = remap[ucode] >= 0
    df, ucode = df[sel], remap[ucode[sel]]
    counts["rows"] = len(df)
    fold, order = split_folds(len(keep_users), seed, test_frac, n_folds)
    if log.relabel is not None:
        df = df.assign(response=log.relabel(df, fold[ucode] >= 0))
    skills = df["skill"].astype(str)
    rows = np.arange(len(df))
    if log.skill_sep:
        parts = skills.str.split(log.skill_sep, regex=False)
        counts["multi_skill_rows"] = int((parts.str.len() > 1).sum())
        exploded = parts.explode()
        rows = np.repeat(rows, parts.str.len().to_numpy())
        skills = exploded
    else:
        counts["multi_skill_rows"] = 0
    is_repeat = np.r_[0, (rows[1:] == rows[:-1]).astype(np.int64)] if len(rows) else rows
    q_code, skill_names = pd.factorize(skills.to_numpy(), sort=False)
    pid, problem_names = None, []
    if "problem" in df.columns:
        p_code, problem_names = pd.factorize(df["problem"].astype(str).to_numpy()[rows])
    r = df["response"].to_numpy(dtype=np.int64)[rows]
    cut = np.cumsum(np.bincount(ucode[rows], minlength=len(keep_users)))[:-1]
    extra = {
        name: np.split(df[col].to_numpy(dtype=np.int64)[rows], cut)
        for col, name in (("timestamp", "timestamps"), ("usetime", "usetimes"))
        if col in df.columns
    }
    if "problem" in df.columns:
        pid = np.split(p_code.astype(np.int64), cut)
    per_row = np.bincount(rows, minlength=len(df)) if len(rows) else np.zeros(0, int)
    counts.update(
        students=len(keep_users),
        interactions=len(rows),
        skills=len(skill_names),
        problems=len(problem_names),
        train_valid_students=int((fold >= 0).sum()),
        test_students=int((fold < 0).sum()),
        response_counts=np.bincount(r, minlength=log.K).tolist(),  # interactions per response
    )
    return Sequences(
        uid=[str(u) for u in users[keep_users]],
        q=np.split(q_code.astype(np.int64), cut),
        r=np.split(r, cut),
        pid=pid,
        is_repeat=np.split(is_repeat, cut),
        extra=extra,
        skills=[str(s) for s in skill_names],
        problems=[str(p) for p in problem_names],
        fold=fold,
        order=order,
        counts=counts,
        max_concepts=int(per_row.max()) if len(per_row) else 1,
    )
