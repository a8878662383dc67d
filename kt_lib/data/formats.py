"""Readers and writers for KT data files (DKVMN 3-line, AKT 4-line, pykt CSV, interaction logs).

Every reader returns a `KTDataset` with 0-based ids (conventions in dataset.py). Malformed input
raises `ValueError` naming the file, the 1-based line and the offending value. Parsing is
vectorised: all tokens of a field go through one numpy conversion and one range check, and only
when that fails is the file walked again to point at the first bad token.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from .dataset import KTDataset, StudentSeq
from .splits import kfold, split_students

PathLike = str | os.PathLike


def _allowed(K: int) -> str:
    """The response set as printed in messages: `{0, 1}` or `{0, ..., 9}`."""
    return "{" + (", ".join(map(str, range(K))) if K <= 5 else f"0, ..., {K - 1}") + "}"


def _to_ints(tokens: list[str], offsets: np.ndarray, lines: np.ndarray, path, what: str):
    """All tokens of one field -> int64 in one call; on failure report the first bad token."""
    try:
        return np.array(tokens, dtype=np.int64)
    except (ValueError, OverflowError):
        pass
    for k, tok in enumerate(tokens):
        try:
            int(tok)
        except (ValueError, OverflowError):
            rec = int(np.searchsorted(offsets, k, side="right") - 1)
            raise ValueError(
                f"{path} line {lines[rec]}: {what} {tok!r} is not an integer "
                f"(field {k - offsets[rec] + 1})"
            ) from None
    raise AssertionError("unreachable: numpy rejected tokens that int() accepts")


def _raise_first(bad: np.ndarray, values, offsets, lines, path, message: str) -> None:
    """Raise for the first True in `bad`: `path line L: <message, "{v}" -> value> (field F)`."""
    if not bad.any():
        return
    k = int(np.argmax(bad))
    rec = int(np.searchsorted(offsets, k, side="right") - 1)
    text = message.replace("{v}", str(values[k]))
    raise ValueError(f"{path} line {lines[rec]}: {text} (field {k - offsets[rec] + 1})")


def _check_ids(v, offsets, lines, path, what: str, base: int, vocab: int | None, vocab_name: str):
    """Ids must be >= base and, with a declared vocabulary, < vocab + base."""
    where = (v, offsets, lines, path)
    _raise_first(v < base, *where, f"{what} '{{v}}' is below {base} (ids are {base}-based)")
    if vocab is not None:
        msg = f"{what} '{{v}}' is beyond the declared vocabulary {vocab_name}"
        _raise_first(v >= vocab + base, *where, msg)


def _check_responses(r, offsets, lines, path, K: int) -> None:
    """Responses must lie in {0, ..., K-1}."""
    msg = f"response '{{v}}' not in {_allowed(K)}"
    _raise_first((r < 0) | (r >= K), r, offsets, lines, path, msg)


def _check_K(K: int) -> None:
    if K < 2:
        raise ValueError(f"K (response categories) must be >= 2, got {K}")


class _Records(NamedTuple):
    """Records of a multi-line file, each field flattened over all students."""

    path: Path
    extras: list[str]  # text after the first comma of each header line
    flat: list[np.ndarray]  # one int64 array per field
    offsets: np.ndarray  # [n_records + 1] start of each record in the flat arrays
    header_lines: np.ndarray  # [n_records] 1-based line of each header

    def check(self, j: int, what: str, base: int, vocab: int | None, vocab_name: str) -> None:
        lines = self.header_lines + 1 + j
        _check_ids(self.flat[j], self.offsets, lines, self.path, what, base, vocab, vocab_name)

    def check_responses(self, j: int, K: int) -> None:
        _check_responses(self.flat[j], self.offsets, self.header_lines + 1 + j, self.path, K)

    def split(self, j: int) -> list[np.ndarray]:
        return np.split(self.flat[j], self.offsets[1:-1])


def _read_records(path: PathLike, fields: Sequence[str]) -> _Records:
    """Parse records of one header line `n[,...]` followed by one line of `n` ints per field."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    while lines and not lines[-1].strip():  # trailing blank lines are harmless
        lines.pop()
    R = 1 + len(fields)
    if not lines:
        raise ValueError(f"{path} line 1: empty file, expected records of {R} lines")
    if len(lines) % R:
        start = len(lines) - len(lines) % R + 1
        raise ValueError(
            f"{path} line {start}: truncated record: the file ends after {len(lines) % R} of "
            f"{R} lines (header {lines[start - 1]!r})"
        )
    n_rec = len(lines) // R
    extras: list[str] = []
    counts = np.empty(n_rec, dtype=np.int64)
    tokens: list[list[str]] = [[] for _ in fields]
    for i in range(n_rec):
        head, _, extra = lines[i * R].partition(",")
        try:
            n = int(head)
        except ValueError:
            raise ValueError(
                f"{path} line {i * R + 1}: sequence length {head!r} is not an integer"
            ) from None
        if n < 0:
            raise ValueError(f"{path} line {i * R + 1}: sequence length '{n}' is negative")
        counts[i] = n
        extras.append(extra.strip().rstrip(",").strip())
        for j, what in enumerate(fields):
            s = lines[i * R + 1 + j].strip()
            s = s.removesuffix(",")
            toks = s.split(",") if s else []
            if len(toks) != n:
                raise ValueError(
                    f"{path} line {i * R + 2 + j}: found {len(toks)} {what}s, but header line "
                    f"{i * R + 1} says n={n}"
                )
            tokens[j].extend(toks)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    header_lines = np.arange(n_rec, dtype=np.int64) * R + 1
    flat = [
        _to_ints(tokens[j], offsets, header_lines + 1 + j, path, what)
        for j, what in enumerate(fields)
    ]
    return _Records(path, extras, flat, offsets, header_lines)


def _vocab(declared: int | None, ids: np.ndarray) -> int:
    """Declared vocabulary size, else max 0-based id + 1."""
    if declared is not None:
        return int(declared)
    return int(ids.max()) + 1 if len(ids) else 0


def read_line3(
    path: PathLike,
    num_c: int | None = None,
    K: int = 2,
    one_based: bool = True,
    uid_offset: int = 0,
    name: str | None = None,
) -> KTDataset:
    """Read the DKVMN 3-line format (n / question ids / responses per student)."""
    _check_K(K)
    rec = _read_records(path, ("question id", "response"))
    base = int(one_based)
    rec.check(0, "question id", base, num_c, f"num_c={num_c}")
    rec.check_responses(1, K)
    q = rec.flat[0] - base
    students = [
        StudentSeq(uid=uid_offset + i, q=qs, r=rs)
        for i, (qs, rs) in enumerate(zip(np.split(q, rec.offsets[1:-1]), rec.split(1), strict=True))
    ]
    return KTDataset(
        students, num_c=_vocab(num_c, q), K=K, name=name or rec.path.stem, source=str(rec.path)
    )


def read_line4(
    path: PathLike,
    num_c: int | None = None,
    num_pid: int | None = None,
    K: int = 2,
    one_based: bool = True,
    uid_offset: int = 0,
    name: str | None = None,
) -> KTDataset:
    """Read the AKT 4-line format (`n[,user_id]` / problem ids / skill ids / responses)."""
    _check_K(K)
    rec = _read_records(path, ("problem id", "skill id", "response"))
    base = int(one_based)
    rec.check(0, "problem id", base, num_pid, f"num_pid={num_pid}")
    rec.check(1, "skill id", base, num_c, f"num_c={num_c}")
    rec.check_responses(2, K)
    pid, q = rec.flat[0] - base, rec.flat[1] - base
    split = rec.offsets[1:-1]
    students = [
        StudentSeq(uid=uid_offset + i, q=qs, r=rs, pid=ps)
        for i, (ps, qs, rs) in enumerate(
            zip(np.split(pid, split), np.split(q, split), rec.split(2), strict=True)
        )
    ]
    meta = {}
    if any(rec.extras):
        meta["raw_uid"] = {uid_offset + i: e for i, e in enumerate(rec.extras)}
    return KTDataset(
        students,
        num_c=_vocab(num_c, q),
        num_pid=_vocab(num_pid, pid),
        K=K,
        name=name or rec.path.stem,
        source=str(rec.path),
        meta=meta,
    )


def _atomic_write(path: PathLike, text: str) -> None:
    """Write a temp file in the same directory, then os.replace: readers never see half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; data files are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _join(a: np.ndarray) -> str:
    return ",".join(map(str, a.tolist()))


def write_line3(dataset: KTDataset, path: PathLike) -> None:
    """Write the 3-line format with 1-based question ids (atomic)."""
    out = []
    for s in dataset.students:
        out += [str(len(s)), _join(s.q + 1), _join(s.r)]
    _atomic_write(path, "\n".join(out) + "\n")


def write_line4(dataset: KTDataset, path: PathLike) -> None:
    """Write the 4-line format `n,user_id` / pids / skills / responses, 1-based ids (atomic)."""
    if not dataset.has_pid:
        raise ValueError(f"{dataset.name}: the 4-line format needs problem ids on every student")
    raw = dataset.meta.get("raw_uid", {})
    out = []
    for s in dataset.students:
        out += [f"{len(s)},{raw.get(s.uid, s.uid)}", _join(s.pid + 1), _join(s.q + 1), _join(s.r)]
    _atomic_write(path, "\n".join(out) + "\n")


_PYKT_INTS = ("concepts", "responses", "questions", "selectmasks")  # list columns parsed as ints
_PYKT_LISTS = _PYKT_INTS + ("timestamps", "usetimes")  # list columns whose lengths must agree


def read_pykt(
    data_dir: PathLike,
    which: str = "train_valid",
    num_c: int | None = None,
    num_pid: int | None = None,
    K: int = 2,
    uid_offset: int = 0,
    name: str | None = None,
) -> KTDataset:
    """Read a pykt CSV (`train_valid.csv` / `test.csv`, 0-based ids, -1 padding dropped)."""
    _check_K(K)
    data_dir = Path(data_dir)
    path = data_dir if data_dir.is_file() else data_dir / f"{which.removesuffix('.csv')}.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{data_dir}: no pykt file {path.name!r} (which={which!r})")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise ValueError(
            f"{path} line 1: empty file, expected a header with concepts,responses"
        ) from None
    missing = [c for c in ("concepts", "responses") if c not in df.columns]
    if missing:
        raise ValueError(f"{path} line 1: missing column(s) {missing}; header: {list(df.columns)}")
    if not len(df):
        raise ValueError(f"{path} line 2: no student rows after the header")
    lines = np.arange(len(df), dtype=np.int64) + 2  # CSV line of each row (header is line 1)
    toks, counts = {}, {}
    for c in (c for c in _PYKT_LISTS if c in df.columns):
        rows = [s.strip().removesuffix(",").split(",") if s.strip() else [] for s in df[c]]
        toks[c], counts[c] = rows, np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        if (bad := counts[c] != counts["concepts"]).any():
            i = int(np.argmax(bad))
            n_c = counts["concepts"][i]
            raise ValueError(
                f"{path} line {lines[i]}: found {counts[c][i]} {c}, but {n_c} concepts"
            )
    offsets = np.concatenate([[0], np.cumsum(counts["concepts"])])
    v = {
        c: _to_ints(list(itertools.chain.from_iterable(toks[c])), offsets, lines, path, c)
        for c in _PYKT_INTS
        if c in toks
    }
    # pykt pads chunked sequences with -1 (and selectmask -1): padding, not data.
    keep = v["concepts"] != -1
    if "selectmasks" in v:
        keep &= v["selectmasks"] != -1
    key_path = path.parent / "keyid2idx.json"
    keys = json.loads(key_path.read_text(encoding="utf-8")) if key_path.is_file() else {}
    vocab = {}
    for c, declared, key in (("concepts", num_c, "num_c"), ("questions", num_pid, "num_pid")):
        if c not in v:
            continue
        if declared is None and isinstance(keys.get(c), dict):
            declared, src = len(keys[c]), f"{key}={len(keys[c])} (from {key_path.name})"
        else:
            src = f"{key}={declared}"
        ids = np.where(keep, v[c], 0)
        _check_ids(ids, offsets, lines, path, c.removesuffix("s") + " id", 0, declared, src)
        vocab[c] = _vocab(declared, ids)
    _check_responses(np.where(keep, v["responses"], 0), offsets, lines, path, K)
    new_offsets = np.concatenate([[0], np.cumsum(keep)])[offsets]
    cut = new_offsets[1:-1]
    q, r = np.split(v["concepts"][keep], cut), np.split(v["responses"][keep], cut)
    pid = np.split(v["questions"][keep], cut) if "questions" in v else [None] * len(df)
    folds = _int_column(df, "fold", path, lines) if "fold" in df.columns else np.full(len(df), -1)
    students = [
        StudentSeq(uid=uid_offset + i, q=q[i], r=r[i], pid=pid[i], fold=int(folds[i]))
        for i in range(len(df))
    ]
    meta = {"raw_uid": dict(enumerate(df["uid"], start=uid_offset))} if "uid" in df.columns else {}
    return KTDataset(
        students,
        num_c=vocab["concepts"],
        num_pid=vocab.get("questions", 0),
        K=K,
        name=name or f"{path.parent.name}/{path.stem}",
        source=str(path),
        meta=meta,
    )


def _int_column(df: pd.DataFrame, col: str, path: Path, lines: np.ndarray) -> np.ndarray:
    """An integer column, or an error naming the first non-integer cell."""
    num = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(num) | (num != np.round(num))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{path} line {lines[i]}: {col} '{df[col].iloc[i]}' is not an integer")
    return num.astype(np.int64)


def read_log(
    path: PathLike,
    user: str = "user",
    skill: str = "skill",
    problem: str | None = None,
    correct: str = "correct",
    order: str | None = "order",
    K: int | None = None,
    uid_offset: int = 0,
    name: str | None = None,
) -> KTDataset:
    """Read an interaction log CSV (one row per interaction); raw ids map to sorted 0-based indices.

    `meta` holds the mappings: `skill_ids[q]` / `problem_ids[pid]` are raw ids, `raw_uid[uid]`
    the raw user. `order=None` keeps the file order inside each student.
    """
    path = Path(path)
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ValueError(
            f"{path} line 1: empty file, expected a header naming the columns"
        ) from None
    cols = [c for c in (user, skill, problem, correct, order) if c is not None]
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{path} line 1: missing column(s) {missing}; header: {list(df.columns)}")
    if not len(df):
        raise ValueError(f"{path} line 2: no interaction rows after the header")
    lines = np.arange(len(df), dtype=np.int64) + 2
    for c in cols:
        if (na := df[c].isna().to_numpy()).any():
            raise ValueError(f"{path} line {lines[np.argmax(na)]}: empty value in column {c!r}")
    r = _int_column(df, correct, path, lines)
    K = max(2, int(r.max()) + 1) if K is None else K
    _check_K(K)
    if (bad := (r < 0) | (r >= K)).any():
        i = int(np.argmax(bad))
        raise ValueError(f"{path} line {lines[i]}: {correct} '{r[i]}' not in {_allowed(K)}")
    u_code, users = pd.factorize(df[user], sort=True)
    keys = (pd.factorize(df[order], sort=True)[0], u_code) if order else (u_code,)
    idx = np.lexsort(keys)  # stable: ties in order keep the file order
    q_code, skills = pd.factorize(df[skill], sort=True)
    bounds = np.concatenate([[0], np.cumsum(np.bincount(u_code, minlength=len(users)))])
    cut = bounds[1:-1]
    meta = {
        "raw_uid": {uid_offset + i: u for i, u in enumerate(users.tolist())},
        "skill_ids": skills.tolist(),
    }
    pid = [None] * len(users)
    if problem:
        p_code, problems = pd.factorize(df[problem], sort=True)
        pid = np.split(p_code[idx].astype(np.int64), cut)
        meta["problem_ids"] = problems.tolist()
    q, rs = np.split(q_code[idx].astype(np.int64), cut), np.split(r[idx], cut)
    students = [
        StudentSeq(uid=uid_offset + i, q=q[i], r=rs[i], pid=pid[i]) for i in range(len(users))
    ]
    return KTDataset(
        students,
        num_c=len(skills),
        num_pid=len(meta.get("problem_ids", ())),
        K=K,
        name=name or path.stem,
        source=str(path),
        meta=meta,
    )


@dataclass
class Bundle:
    """Train/valid/test sharing one vocabulary and one uid space, plus how they were split."""

    train: KTDataset
    valid: KTDataset
    test: KTDataset
    name: str
    protocol: str  # human-readable description of the split
    data_dir: str | None = None
    data_format: str = "synthetic"
    fold: int | None = None
    seed: int = 0
    truth: Any = None  # simulator ground truth (synthetic data only)

    @property
    def num_c(self) -> int:
        return self.train.num_c

    @property
    def num_pid(self) -> int:
        return self.train.num_pid

    @property
    def K(self) -> int:
        return self.train.K

    def stats(self) -> pd.DataFrame:
        """One row of `KTDataset.stats()` per split."""
        return pd.DataFrame([d.stats() for d in (self.train, self.valid, self.test)])

    def students_frame(self) -> pd.DataFrame:
        """Per-student table (uid, split, length, mean response) with the simulator's truth.

        Simulator uids index the truth arrays (archetype, theta), so rows carry them when known.
        """
        rows = []
        for split, d in (("train", self.train), ("valid", self.valid), ("test", self.test)):
            scale = max(d.K - 1, 1)
            rows += [(s.uid, split, len(s), s.r.mean() / scale) for s in d.students]
        frame = pd.DataFrame(rows, columns=["uid", "split", "length", "mean_response"])
        t = self.truth
        if t is not None:
            frame["archetype"] = t.archetype[frame["uid"]]
            frame["arch_name"] = np.asarray(t.arch_names)[frame["archetype"]]
            frame["theta"] = t.theta[frame["uid"]]
        return frame


def _find(d: Path, pattern: str) -> Path:
    """The single file of `d` matching `pattern`, or an error saying what was looked for."""
    hits = sorted(d.glob(pattern))
    if not hits:
        raise FileNotFoundError(
            f"{d}: no file matching {pattern!r} (a 3/4-line folder holds *_train.csv, *_test.csv "
            "and optionally *_train{k}.csv / *_valid{k}.csv)"
        )
    if len(hits) > 1:
        raise ValueError(
            f"{d}: several files match {pattern!r}: {[h.name for h in hits]}; pass prefix="
        )
    return hits[0]


def _holdout(ds: KTDataset, fractions, fold: int | None, seed: int, n_folds: int = 5):
    """(train, valid, test, how): seeded split, or a fixed test part + fold k of the rest."""
    if len(fractions) != 3:
        raise ValueError(f"fractions must be (train, valid, test), got {fractions}")
    if fold is None:
        return (*split_students(ds, fractions, seed), f"seeded student split {tuple(fractions)}")
    if not 0 <= fold < n_folds:
        raise ValueError(f"fold must be in [0, {n_folds}) for this format, got {fold}")
    rest, test = split_students(ds, (1 - fractions[-1], fractions[-1]), seed)
    how = f"seeded {fractions[-1]:.0%} test students, fold {fold}/{n_folds} of the rest as valid"
    return (*kfold(rest, n_folds, seed)[fold], test, how)


def _load_synthetic(d, fold, valid_frac, seed, kw):
    """Simulated students (kt_lib.data.synthetic), seeded 70/10/20 split."""
    try:
        from .synthetic import simulate
    except ImportError as e:
        raise ImportError("data_format='synthetic' needs kt_lib.data.synthetic.simulate") from e
    if "seed" not in kw and "seed" in inspect.signature(simulate).parameters:
        kw["seed"] = seed  # one seed drives both the simulation and the split
    result = simulate(**kw)
    train, valid, test, how = _holdout(result.data, (0.7, 0.1, 0.2), fold, seed)
    return train, valid, test, result.data.name or "synthetic", how, result.truth


def _load_lines(d, fold, valid_frac, seed, kw, reader):
    """A DKVMN/AKT folder: `*_train.csv` minus a seeded valid part, or the files' fold k."""
    prefix = kw.pop("prefix", "*")
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: not a directory (3/4-line data is a folder of CSV files)")
    test_f = _find(d, f"{prefix}_test.csv")
    if fold is None:
        if not 0 < valid_frac < 1:
            raise ValueError(f"valid_frac must be in (0, 1), got {valid_frac}")
        train_f = _find(d, f"{prefix}_train.csv")
        full = reader(train_f, uid_offset=0, **kw)
        train, valid = split_students(full, (1 - valid_frac, valid_frac), seed)
        how = f"train = {train_f.name} minus a seeded {valid_frac:.0%} of its students as valid"
    else:
        train_f = _find(d, f"{prefix}_train{fold}.csv")
        valid_f = _find(d, f"{prefix}_valid{fold}.csv")
        train = reader(train_f, uid_offset=0, **kw)
        valid = reader(valid_f, uid_offset=len(train), **kw)
        how = f"train = {train_f.name}, valid = {valid_f.name} (the files' fold {fold})"
    test = reader(test_f, uid_offset=len(train) + len(valid), **kw)
    return train, valid, test, d.name, f"{how}; test = {test_f.name}", None


def _load_pykt(d, fold, valid_frac, seed, kw):
    """pykt folder: fold k (default 0) of train_valid.csv is valid, the other folds train."""
    fold = 0 if fold is None else fold
    tv = read_pykt(d, "train_valid", uid_offset=0, **kw)
    test = read_pykt(d, "test", uid_offset=len(tv), **kw)
    folds = np.array([s.fold for s in tv.students])
    if fold not in set(folds.tolist()):
        raise ValueError(f"{d}/train_valid.csv has no fold {fold}; folds: {sorted(set(folds))}")
    train = tv.subset(np.flatnonzero(folds != fold))
    valid = tv.subset(np.flatnonzero(folds == fold))
    how = f"fold {fold} of train_valid.csv as valid, its other folds train; test = test.csv"
    return train, valid, test, d.name, how, None


def _load_log(d, fold, valid_frac, seed, kw):
    """One interaction-log CSV, seeded student split (`fractions=`, default 70/10/20)."""
    path = _find(d, "*.csv") if d.is_dir() else d
    fractions = kw.pop("fractions", (0.7, 0.1, 0.2))
    train, valid, test, how = _holdout(read_log(path, **kw), fractions, fold, seed)
    return train, valid, test, path.stem, f"{path.name}: {how}", None


_LOADERS = {
    "synthetic": _load_synthetic,
    "line3": lambda *a: _load_lines(*a, reader=read_line3),
    "line4": lambda *a: _load_lines(*a, reader=read_line4),
    "pykt": _load_pykt,
    "log": _load_log,
}


def load_bundle(
    data_dir: PathLike | None = None,
    data_format: str = "synthetic",
    fold: int | None = None,
    valid_frac: float = 0.2,
    seed: int = 0,
    **kw: Any,
) -> Bundle:
    """Train/valid/test by the format's protocol; `kw` go to the reader (or to `simulate`).

    line3/line4: fold=None holds out a seeded `valid_frac` of `*_train.csv`, fold=k (1..5) uses
    the files' `*_train{k}`/`*_valid{k}`; test is `*_test.csv`. pykt: fold k (0..4, default 0) of
    train_valid.csv is valid, test.csv test. log/synthetic: seeded 70/10/20 (`fractions=` for
    log), or with fold=k (0..4) that test part and fold k of a 5-fold split of the rest.
    """
    if data_format not in _LOADERS:
        raise ValueError(f"unknown data_format {data_format!r}; expected one of {list(_LOADERS)}")
    if data_dir is None and data_format != "synthetic":
        raise ValueError(f"data_format={data_format!r} needs data_dir")
    d = None if data_dir is None else Path(data_dir)
    train, valid, test, name, how, truth = _LOADERS[data_format](
        d, fold, valid_frac, seed, dict(kw)
    )
    # One vocabulary for the three splits: the max over them (or the declared sizes).
    shared = {
        k: max(getattr(x, k) for x in (train, valid, test)) for k in ("num_c", "num_pid", "K")
    }
    train, valid, test = (
        replace(x, name=f"{name}/{split}", **shared)
        for x, split in ((train, "train"), (valid, "valid"), (test, "test"))
    )
    protocol = f"{name} ({data_format}, seed {seed}): {how}"
    data_dir = None if d is None else str(d)
    return Bundle(train, valid, test, name, protocol, data_dir, data_format, fold, seed, truth)
