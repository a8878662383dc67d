"""Interaction logs: one row per interaction (user, concept, response, optional order columns)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..dataset import KTDataset
from .tokens import (
    PathLike,
    _check_K,
    _check_responses,
    _int_column,
    _parse_ints,
    _read_csv,
    _students,
    _Where,
)


def _labels(col: pd.Series, where: _Where, name: str) -> pd.Series | np.ndarray:
    """Raw ids of a log column: integers if every cell is one (so 2 sorts before 10), else text.
    Two cells that differ as text but not as integers ('007' and '7') are refused, not merged."""
    ints = _parse_ints(col.tolist())
    if ints is None:
        return col
    text = col.astype(str).to_numpy()
    first = pd.Series(text).groupby(ints).transform("first").to_numpy()  # each int's first text
    if (clash := first != text).any():
        i = int(np.argmax(clash))
        j = int(np.argmax((ints == ints[i]) & (text == first[i])))
        raise where.error(
            i, f"{name} {text[i]!r} is the id {text[j]!r} of line {where.lines[j]} as an integer, "
            "not as text: write each id one way"
        )  # fmt: skip
    return ints


def _order_key(col: pd.Series, where: _Where, name: str) -> np.ndarray:
    """Sort key of the order column: all numbers, else all dates, else the first bad cell."""
    best = pd.to_numeric(col, errors="coerce")
    if best.notna().all():
        return best.to_numpy(dtype=float)
    for fmt in (None, "ISO8601"):  # one inferred format, else ISO 8601 of any precision
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "could not infer format"
            dates = pd.to_datetime(col, errors="coerce", utc=True, format=fmt)
        if dates.notna().all():
            return dates.astype("int64").to_numpy()
        if dates.notna().sum() > best.notna().sum():
            best = dates
    i = int(np.argmax(best.isna().to_numpy()))
    raise where.error(
        i, f"{name} {col.iloc[i]!r} is neither a number nor a date (all of one kind are needed)"
    )


AUTO = "auto"
# each role's accepted column names, compared lower-case without spaces, '_' or '-'
SYNONYMS: dict[str, tuple[str, ...]] = {
    "user": ("user", "student", "user_id", "student_id", "uid", "anon_student_id", "learner"),
    "skill": ("skill", "concept", "kc", "skill_id", "concept_id", "kc_id", "skill_name"),
    "problem": ("problem", "question", "item", "problem_id", "question_id", "item_id", "exercise"),
    "correct": ("correct", "response", "score", "is_correct", "answer_correct", "outcome"),
    "order": ("order", "timestamp", "time", "order_id", "date", "start_time", "datetime"),
}
OPTIONAL = ("problem", "order")  # roles a log may lack (no problem ids; file order)


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def resolve_columns(header: list[str], given: dict[str, str | None], path: Path) -> dict:
    """Role -> column of `header`: a name given explicitly must exist; `auto` takes the first
    synonym present (`SYNONYMS`), or None for an optional role. A required role found nowhere is
    an error listing the header and the flag that maps columns."""
    by_norm = {_norm(h): h for h in header}
    out, missing = {}, []
    for role, want in given.items():
        if want is None:
            out[role] = None
        elif want != AUTO:
            if want not in header:
                missing.append(f"{role}={want!r}")
            out[role] = want
        else:
            hit = next((by_norm[_norm(s)] for s in SYNONYMS[role] if _norm(s) in by_norm), None)
            if hit is None and role not in OPTIONAL:
                missing.append(f"{role} (any of {', '.join(SYNONYMS[role])})")
            out[role] = hit
    if missing:
        raise ValueError(
            f"{path} line 1: no column for {'; '.join(missing)}; the header has {header}. Map "
            "them with --columns user=COL,skill=COL,correct=COL[,problem=COL,order=COL] "
            "(read_log(..., user=..., skill=...) in Python)"
        )
    return out


def read_log(
    path: PathLike,
    user: str = AUTO,
    skill: str = AUTO,
    problem: str | None = AUTO,
    correct: str = AUTO,
    order: str | None = AUTO,
    K: int = 2,
    uid_offset: int = 0,
    name: str | None = None,
) -> KTDataset:
    """Read an interaction log CSV (one row per interaction); raw ids map to sorted 0-based indices.

    Columns: each role (`user`, `skill`, `problem`, `correct`, `order`) names its column, or is
    `auto`: the first of the role's usual names present (`SYNONYMS`: student, user_id, concept,
    kc, question, item, response, score, timestamp, ...); `problem` and `order` may be absent
    (None: no problem ids / file order). `meta["columns"]` says which column each role read.
    `meta` also holds the mappings: `skill_ids[q]` / `problem_ids[pid]` are raw ids,
    `raw_uid[uid]` the raw user. Ordinal responses need `K`. `order` (numbers or dates) sorts
    each student's rows; ties keep the file order.
    """
    _check_K(K)
    path = Path(path)
    df, lines = _read_csv(path, [], "interaction rows")
    roles = resolve_columns(
        list(df.columns),
        dict(user=user, skill=skill, problem=problem, correct=correct, order=order),
        path,
    )
    user, skill, problem, correct, order = (roles[k] for k in SYNONYMS)
    cols = [c for c in (user, skill, problem, correct, order) if c is not None]
    where = _Where(path, lines)
    for c in cols:
        if (empty := (df[c].str.strip() == "").to_numpy()).any():
            raise where.error(int(np.argmax(empty)), f"empty value in column {c!r}")
    r = _int_column(df, correct, where)
    _check_responses(r, where, K, what=correct)
    u_code, users = pd.factorize(_labels(df[user], where, user), sort=True)
    keys = (_order_key(df[order], where, order), u_code) if order else (u_code,)
    idx = np.lexsort(keys)  # stable: ties in order keep the file order
    q_code, skills = pd.factorize(_labels(df[skill], where, skill), sort=True)
    bounds = np.concatenate([[0], np.cumsum(np.bincount(u_code, minlength=len(users)))])
    cut = bounds[1:-1]
    meta = {
        "raw_uid": {uid_offset + i: u for i, u in enumerate(users.tolist())},
        "skill_ids": skills.tolist(),
        "columns": roles,
    }
    pid = None
    if problem:
        p_code, problems = pd.factorize(_labels(df[problem], where, problem), sort=True)
        pid = np.split(p_code[idx].astype(np.int64), cut)
        meta["problem_ids"] = problems.tolist()
    q, rs = np.split(q_code[idx].astype(np.int64), cut), np.split(r[idx], cut)
    students = _students(np.arange(len(users)), uid_offset, q, rs, pid)  # every user has a row
    return KTDataset(
        students,
        num_c=len(skills),
        num_pid=len(meta.get("problem_ids", ())),
        K=K,
        name=name or path.stem,
        source=str(path),
        meta=meta,
    )
