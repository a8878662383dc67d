"""Which layout a data folder holds: split files, DTransformer's datasets.toml, line3 vs line4."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .lines import _LINE_FIELDS, _content_end, _header_kind, _heads
from .tokens import _read_lines, _read_text

_EXTS = (".csv", ".txt")  # DKVMN/AKT folders use .csv, DTransformer's .txt
_FOLDER_HELP = (
    "a 3/4-line folder holds *_train.csv and *_test.csv, optionally *_train{k}.csv / "
    "*_valid{k}.csv / *_test{k}.csv (.txt names too, and DTransformer's train.txt / test.txt)"
)


def _split_patterns(prefix: str, split: str) -> list[str]:
    """File names of one split: `{prefix}_{split}.csv|.txt`, plus `{split}.txt|.csv` (no prefix,
    DTransformer) when any prefix is allowed."""
    pats = [f"{prefix}_{split}{ext}" for ext in _EXTS]
    return pats + ([f"{split}{ext}" for ext in _EXTS] if prefix == "*" else [])


def _glob_split(d: Path, prefix: str, split: str) -> list[Path]:
    return sorted({h for p in _split_patterns(prefix, split) for h in d.glob(p) if h.is_file()})


def split_files(d: str | Path, split: str) -> list[Path]:
    """The files of one split (`train1`, `test`, ...) in folder `d`, under every name and
    extension a 3/4-line folder may use (what `load_bundle` reads)."""
    return _glob_split(Path(d), "*", split)


def _find_split(d: Path, splits: Sequence[str], prefix: str, fold: int | None = None) -> Path:
    """The one file of the first split name (e.g. `test3`, then `test`) that `d` holds."""
    for split in splits:
        if hits := _glob_split(d, prefix, split):
            if len(hits) > 1:
                raise ValueError(
                    f"{d}: several files match split {split!r}: {[h.name for h in hits]}; "
                    "pass prefix="
                )
            return hits[0]
    pats = " or ".join(repr(p) for split in splits for p in _split_patterns(prefix, split))
    msg = f"{d}: no file matching {pats} ({_FOLDER_HELP})"
    if fold is None and (per_fold := _glob_split(d, prefix, f"{splits[0]}[0-9]*")):
        msg += f"; the folder has per-fold files ({per_fold[0].name}, ...): pass fold=k"
    raise FileNotFoundError(msg)


class _LineFiles(NamedTuple):
    """The files one bundle of a 3/4-line folder reads."""

    train: Path
    valid: Path | None  # None: a seeded part of train is the valid set
    test: Path

    def named(self) -> dict[str, Path]:
        return {k: v for k, v in self._asdict().items() if v is not None}


def _line_files(d: Path, prefix: str, fold: int | None) -> _LineFiles:
    """fold=None: `*_train` and `*_test`; fold=k: `*_train{k}`, `*_valid{k}` and `*_test{k}`
    (AKT: one test file per fold), else the single `*_test`."""
    if fold is None:
        return _LineFiles(_find_split(d, ["train"], prefix), None, _find_split(d, ["test"], prefix))
    return _LineFiles(
        _find_split(d, [f"train{fold}"], prefix, fold),
        _find_split(d, [f"valid{fold}"], prefix, fold),
        _find_split(d, [f"test{fold}", "test"], prefix, fold),
    )


class _Toml(NamedTuple):
    """The DTransformer `datasets.toml` entry of a folder."""

    path: Path
    section: str
    table: dict


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(_read_text(path))
    except tomllib.TOMLDecodeError as e:
        at = re.search(r"\(at line (\d+), column \d+\)", str(e))
        raise ValueError(f"{path} line {at.group(1) if at else 1}: {e}") from None


def _datasets_toml(d: Path, files: Sequence[Path]) -> _Toml | None:
    """The entry of `datasets.toml` (in `d` or its parent) whose train/test path is one of
    `files`, else the one named like the folder, else the only one of a toml inside `d`."""
    mine = {f.resolve() for f in files}
    for path in (d / "datasets.toml", d.parent / "datasets.toml"):
        if not path.is_file():
            continue
        tables = {k: v for k, v in _read_toml(path).items() if isinstance(v, dict)}
        for name, t in tables.items():
            paths = [t[k] for k in ("train", "valid", "test") if isinstance(t.get(k), str)]
            if any((path.parent / p).resolve() in mine for p in paths):
                return _Toml(path, name, t)
        for name, t in tables.items():
            if name.lower() == d.name.lower():
                return _Toml(path, name, t)
        if path.parent == d and len(tables) == 1:
            return _Toml(path, *next(iter(tables.items())))
    return None


_TOML_INPUTS = {"line3": ["q", "s"], "line4": ["pid", "q", "s"]}  # DTransformer's field names
_TOML_SIZES = {"num_c": "n_questions", "num_pid": "n_pid"}


def _toml_format(toml: _Toml) -> str | None:
    """line3/line4 from the entry's `inputs`, None without; other layouts are refused."""
    inputs = toml.table.get("inputs")
    if inputs is None:
        return None
    for fmt, want in _TOML_INPUTS.items():
        if inputs == want:
            return fmt
    raise ValueError(
        f"{toml.path} [{toml.section}]: inputs {inputs} is a layout these readers do not know "
        f"({', '.join(f'{k}: {v}' for k, v in _TOML_INPUTS.items())})"
    )


def _toml_sizes(toml: _Toml, fmt: str) -> dict[str, int]:
    """Vocabulary sizes the entry declares (`n_pid = 0`: no problem ids)."""
    sizes = {}
    for key, field in _TOML_SIZES.items():
        v = toml.table.get(field)
        if v is None or (key == "num_pid" and (fmt == "line3" or v == 0)):
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(
                f"{toml.path} [{toml.section}]: {field} = {v!r} is not a non-negative integer"
            )
        sizes[key] = v
    return sizes


def _sniff_lines(path: Path) -> str:
    """line3 or line4: the record length under which the file reads consistently.

    A record is consistent when its value lines hold equally many values and its header is
    their length or an identifier line. When neither reads the whole file, the one that reads
    more leading records wins, so that its reader names the first bad line.
    """
    lines = _read_lines(path)
    lines = lines[: _content_end(lines)]
    if not lines:
        raise ValueError(f"{path} line 1: empty file, expected 3- or 4-line records")
    fits, reach = [], {}
    for fmt, fields in _LINE_FIELDS.items():
        R = 1 + len(fields)
        h = _heads(lines, R)
        ok = h.even & (h.is_len | h.id_like)
        reach[fmt] = len(ok) if ok.all() else int(np.argmin(ok))
        if ok.all() and _header_kind(h) is not None:
            fits.append(fmt)
    if len(fits) > 1:  # only tiny files; whole records settle it
        fits = [f for f in fits if len(lines) % (1 + len(_LINE_FIELDS[f])) == 0] or fits
    if len(fits) > 1:
        raise ValueError(
            f"{path}: the records read as 3-line and as 4-line alike; pass data_format='line3' "
            "or 'line4'"
        )
    return fits[0] if fits else max(reach, key=reach.get)


def _detect(d: Path, kw: dict) -> tuple[str, str, Path]:
    """(format, why, folder or file it reads) of `data_dir` for data_format='auto'; a folder of
    layouts (`kt prepare`'s output) reads its pykt subfolder."""
    if d.is_file():
        return "log", "one CSV file", d
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such file or folder (data_format='auto')")
    if (d / "train_valid.csv").is_file():
        return "pykt", "train_valid.csv", d
    prefix = kw.get("prefix", "*")
    split_files = _glob_split(d, prefix, "train*") + _glob_split(d, prefix, "test*")
    if split_files:
        if (toml := _datasets_toml(d, split_files)) and (fmt := _toml_format(toml)):
            return fmt, f"inputs in {toml.path.name} [{toml.section}]", d
        return _sniff_lines(split_files[0]), f"records of {split_files[0].name}", d
    if len(csvs := sorted(d.glob("*.csv"))) == 1:
        return "log", f"one CSV file, {csvs[0].name}", d
    if subs := _layout_subfolders(d, prefix):
        pykt = [s for s, fmt in subs.items() if fmt == "pykt"]
        found = ", ".join(f"{s}/ ({fmt})" for s, fmt in subs.items())
        if len(pykt) != 1:
            raise ValueError(
                f"{d}: data_format='auto' found no layout in the folder itself but subfolders "
                f"holding layouts: {found}; pass one of them as data_dir"
            )
        return "pykt", f"subfolder {pykt[0]}/ of a folder of layouts: {found}", d / pykt[0]
    raise FileNotFoundError(
        f"{d}: data_format='auto' found no layout it knows: no train_valid.csv (pykt), no "
        f"train/test files ({_FOLDER_HELP}), not one *.csv (interaction log)"
    )


def _layout_subfolders(d: Path, prefix: str) -> dict[str, str]:
    """Subfolder name -> "pykt" or "3/4-line" for each subfolder that holds a layout (the
    folder `kt prepare` writes holds pykt/ and line3/ or line4/)."""
    out = {}
    for sub in sorted(p for p in d.iterdir() if p.is_dir()):
        if (sub / "train_valid.csv").is_file():
            out[sub.name] = "pykt"
        elif _glob_split(sub, prefix, "train*") and _glob_split(sub, prefix, "test*"):
            out[sub.name] = "3/4-line"
    return out


def detect_format(data_dir: str | Path, **kw) -> str:
    """The layout `data_format='auto'` reads in `data_dir`: line3, line4, pykt or log."""
    return _detect(Path(data_dir), dict(kw))[0]
