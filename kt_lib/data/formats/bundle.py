"""`Bundle` (train/valid/test sharing one vocabulary) and `load_bundle`: each layout's folder
protocol (seeded holdout, file folds, pykt folds), after `detect` when the format is auto."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from ..dataset import KTDataset
from ..splits import kfold, split_students
from ..synthetic import simulate
from .detect import (
    _datasets_toml,
    _detect,
    _glob_split,
    _line_files,
    _toml_format,
    _toml_sizes,
)
from .lines import _LINE_FIELDS, _id_base, _line_dataset, _read_records
from .log import read_log
from .pykt import read_pykt
from .tokens import PathLike


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
    def seeded(self) -> bool:
        """Whether `seed` chose the split: pykt's folds and a line folder's fold files are fixed."""
        fixed = self.data_format == "pykt" or self.fold is not None
        return self.data_format in ("synthetic", "log") or not fixed

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


class _Loaded(NamedTuple):
    """What a format's loader returns to `load_bundle`."""

    train: KTDataset
    valid: KTDataset
    test: KTDataset
    name: str
    how: str  # which files / split, for the protocol
    truth: Any = None
    details: Sequence[str] = ()  # what was read or detected (header lines, id base, ...)


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
    if "seed" not in kw and "seed" in inspect.signature(simulate).parameters:
        kw["seed"] = seed  # one seed drives both the simulation and the split
    result = simulate(**kw)
    train, valid, test, how = _holdout(result.data, (0.7, 0.1, 0.2), fold, seed)
    return _Loaded(train, valid, test, result.data.name or "synthetic", how, result.truth)


def _load_lines(d, fold, valid_frac, seed, kw, fmt):
    """A DKVMN/AKT/DTransformer folder: `*_train` minus a seeded valid part, or the files' fold k.

    Every file detects its header lines (`header=`); the id base (`one_based=`) is detected over
    all files of the bundle together; `datasets.toml` declares the vocabulary where present.
    """
    prefix = kw.pop("prefix", "*")
    header = kw.pop("header", "auto")
    one_based = kw.pop("one_based", None)
    if fold is None and not 0 < valid_frac < 1:
        raise ValueError(f"valid_frac must be in (0, 1), got {valid_frac}")
    files = _line_files(d, prefix, fold)
    details = []
    notes = {}
    if toml := _datasets_toml(d, list(files.named().values())):
        if (declared := _toml_format(toml)) not in (None, fmt):
            raise ValueError(
                f"{toml.path} [{toml.section}]: inputs {toml.table['inputs']} describe "
                f"{declared} records, but data_format={fmt!r}"
            )
        for key, v in _toml_sizes(toml, fmt).items():
            if key not in kw:
                kw[key] = v
                notes[key] = f" (from {toml.path.name} [{toml.section}])"
        if notes:
            details.append(f"sizes from {toml.path.name} [{toml.section}]")
    recs = {k: _read_records(f, _LINE_FIELDS[fmt], header) for k, f in files.named().items()}
    base = _id_base(one_based, list(recs.values()))
    if (
        base == 1
        and one_based is None
        and _zero_elsewhere(d, prefix, files.named().values(), fmt, header)
    ):
        base = 0
    if fold is None:
        full = _line_dataset(recs["train"], base, 0, notes=notes, **kw)
        train, valid = split_students(full, (1 - valid_frac, valid_frac), seed)
        how = f"train = {files.train.name} minus a seeded {valid_frac:.0%} of its students as valid"
    else:
        train = _line_dataset(recs["train"], base, 0, notes=notes, **kw)
        valid = _line_dataset(recs["valid"], base, len(train), notes=notes, **kw)
        how = f"train = {files.train.name}, valid = {files.valid.name} (the files' fold {fold})"
    test = _line_dataset(recs["test"], base, len(train) + len(valid), notes=notes, **kw)
    modes = {k: r.header for k, r in recs.items()}
    if len(set(modes.values())) == 1:
        heads = f"{recs['train'].header} header lines"
    else:
        heads = "header lines " + ", ".join(f"{k}: {m}" for k, m in modes.items())
    per_fold = fold is not None and files.test.stem.endswith(f"test{fold}")
    tests = "per-fold test files" if per_fold else "single test file"
    details = [heads, f"{base}-based", tests, *details]
    return _Loaded(train, valid, test, d.name, f"{how}; test = {files.test.name}", details=details)


_SPLIT_NAME = re.compile(r"(.+_)?(train|valid|test)\d*\.(csv|txt)")


def _zero_elsewhere(d: Path, prefix: str, loaded, fmt: str, header) -> bool:
    """Whether an id of the folder's other split files (whole train, test, every fold's
    train/valid/test) is 0, so that the id base (0 when any id is 0) is the same under every
    fold and without one: a 0 in one fold's valid file would otherwise shift every id of the
    other folds' reads. Each file is read once per process (cached by path, size and mtime)."""
    loaded = list(loaded)
    head = _SPLIT_NAME.fullmatch(loaded[0].name)  # the train file's: its name prefix
    if head is None:
        return False
    same = re.compile(re.escape(head.group(1) or "") + r"(train|valid|test)\d*\.(csv|txt)")
    found = {h for split in ("train*", "valid*", "test*") for h in _glob_split(d, prefix, split)}
    found = {h for h in found if same.fullmatch(h.name)}  # the same prefix: not pykt's train_valid
    stats = ((f, f.stat()) for f in sorted(found - set(loaded)))
    return any(_has_zero_id(str(f), s.st_size, s.st_mtime_ns, fmt, header) for f, s in stats)


@functools.lru_cache(maxsize=256)
def _has_zero_id(path: str, size: int, mtime_ns: int, fmt: str, header) -> bool:
    return _read_records(Path(path), _LINE_FIELDS[fmt], header).has_zero_id()


def _load_pykt(d, fold, valid_frac, seed, kw):
    """pykt folder: fold k (default 0) of train_valid.csv is valid, the other folds train."""
    fold = 0 if fold is None else fold
    tv = read_pykt(d, "train_valid", uid_offset=0, **kw)
    test = read_pykt(d, "test", uid_offset=len(tv), **kw)
    if bool(tv.num_pid) != bool(test.num_pid):  # a model would train on ids it is tested without
        has, lacks = (
            ("train_valid.csv", "test.csv") if tv.num_pid else ("test.csv", "train_valid.csv")
        )
        raise ValueError(f"{d}: {has} has a 'questions' column (problem ids) and {lacks} has none")
    folds = np.array([s.fold for s in tv.students])
    if fold not in set(folds.tolist()):
        raise ValueError(f"{d}/train_valid.csv has no fold {fold}; folds: {sorted(set(folds))}")
    train = tv.subset(np.flatnonzero(folds != fold))
    valid = tv.subset(np.flatnonzero(folds == fold))
    if not len(train):
        raise ValueError(f"{d}/train_valid.csv: all {len(tv)} students are in fold {fold}")
    how = f"fold {fold} of train_valid.csv as valid, its other folds train; test = test.csv"
    return _Loaded(train, valid, test, d.name, how)


def _load_log(d, fold, valid_frac, seed, kw):
    """One interaction-log CSV, seeded student split (`fractions=`, default 70/10/20)."""
    path = _find(d, "*.csv") if d.is_dir() else d
    fractions = kw.pop("fractions", (0.7, 0.1, 0.2))
    log = read_log(path, **kw)
    train, valid, test, how = _holdout(log, fractions, fold, seed)
    cols = ", ".join(f"{k}={v}" for k, v in log.meta["columns"].items() if v is not None)
    return _Loaded(train, valid, test, path.stem, f"{path.name} (columns {cols}): {how}")


_LOADERS = {
    "synthetic": _load_synthetic,
    "line3": partial(_load_lines, fmt="line3"),
    "line4": partial(_load_lines, fmt="line4"),
    "pykt": _load_pykt,
    "log": _load_log,
}
_FOLDER_FORMATS = ("line3", "line4", "pykt")  # formats whose data_dir is a folder of files


LOG_COLUMNS = {"user", "skill", "problem", "correct", "order"}  # roles of a log file's columns


def load_bundle(
    data_dir: PathLike | None = None,
    data_format: str = "synthetic",
    fold: int | None = None,
    valid_frac: float = 0.2,
    seed: int = 0,
    **kw: Any,
) -> Bundle:
    """Train/valid/test by the format's protocol; `kw` go to the reader (or to `simulate`).

    line3/line4: fold=None holds out a seeded `valid_frac` of `*_train`, fold=k uses the files'
    `*_train{k}`/`*_valid{k}`; test is `*_test{k}` where the folder has one per fold (AKT), else
    `*_test`. Names end in .csv or .txt; DTransformer's `train.txt`/`test.txt` need no prefix.
    `header="auto"|"length"|"id"` says how a record's first line reads (detected per file),
    `one_based=None|True|False` the id base (None: 0-based when some id of the bundle's files is
    0), `prefix=` picks one dataset of a folder; a `datasets.toml` (DTransformer) in the folder or
    its parent declares `num_c`/`num_pid`. pykt: fold k (0..4, default 0) of train_valid.csv is
    valid, test.csv test. log/synthetic: seeded 70/10/20 (`fractions=` for log), or with fold=k
    (0..4) that test part and fold k of a 5-fold split of the rest. auto: the layout of
    `data_dir` (pykt folder, 3/4-line folder by record structure, one log CSV; a folder of
    layouts such as `kt prepare`'s output reads its pykt/ subfolder, and several pykt
    subfolders are an error naming them); the protocol says what was detected and
    `Bundle.data_format` holds the concrete format.
    """
    formats = ["auto", *_LOADERS]
    if data_format not in formats:
        raise ValueError(f"unknown data_format {data_format!r}; expected one of {formats}")
    if data_dir is None and data_format != "synthetic":
        raise ValueError(f"data_format={data_format!r} needs data_dir")
    if data_dir is not None and data_format == "synthetic":
        raise ValueError(
            f"data_dir={str(data_dir)!r} with data_format='synthetic': the simulator would ignore "
            "the folder; pass data_dir=None for simulated data, or the folder's format (auto, "
            "line3, line4, pykt, log)"
        )
    d = None if data_dir is None else Path(data_dir)
    auto = data_format == "auto"
    name = None
    if auto:
        data_format, why, found = _detect(d, kw)
        if found != d:  # the pykt subfolder of a folder of layouts: named like the folder
            name, d = f"{d.name}/{found.name}", found
    roles = sorted(set(kw) & LOG_COLUMNS)
    if roles and data_format != "log":  # another reader would fail on an unknown keyword
        raise ValueError(
            f"column names {roles} are read from a log file (data_format='log'); {d} reads as "
            f"{data_format}"
        )
    if data_format in _FOLDER_FORMATS and not d.is_dir():
        if d.is_file():
            raise ValueError(
                f"{d}: data_format={data_format!r} reads a folder of files, not one file "
                f"(pass its folder {d.parent})"
            )
        raise FileNotFoundError(f"{d}: no such folder (data_format={data_format!r})")
    got = _LOADERS[data_format](d, fold, valid_frac, seed, dict(kw))
    got = got._replace(name=name or got.name)
    # One vocabulary for the three splits: the max over them (or the declared sizes).
    shared = {
        k: max(getattr(x, k) for x in (got.train, got.valid, got.test))
        for k in ("num_c", "num_pid", "K")
    }
    train, valid, test = (
        replace(x, name=f"{got.name}/{split}", **shared)
        for x, split in ((got.train, "train"), (got.valid, "valid"), (got.test, "test"))
    )
    details = list(got.details) or ([why] if auto else [])
    fmt = data_format + (f" ({', '.join(details)})" if details else "")
    protocol = f"{got.name} ({'auto -> ' if auto else ''}{fmt}, seed {seed}): {got.how}"
    data_dir = None if d is None else str(d)
    return Bundle(
        train, valid, test, got.name, protocol, data_dir, data_format, fold, seed, got.truth
    )
