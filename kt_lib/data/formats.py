"""Readers and writers for KT data files (DKVMN 3-line, AKT/DTransformer 4-line, pykt CSV, logs).

The published 3/4-line layouts differ in small ways that each reader tells apart: a record's first
line is its length or (AKT's folds) an identifier line; ids are 1-based or (DTransformer)
0-based; files end in .csv or .txt, with one test file or one per fold. `load_bundle(...,
"auto")` detects the layout of a folder and says what it found in the bundle's protocol.

Every reader returns a `KTDataset` with 0-based ids (conventions in dataset.py). Malformed input
raises `ValueError` naming the file, the 1-based line and the offending value. Parsing is
vectorised: all tokens of a field go through one numpy conversion and one range check, and only
when that fails is the file walked again to point at the first bad token.

Rules every reader shares: text is UTF-8; an integer is an optional sign and ASCII digits that fit
in int64 (no `1_0`, no `1.0`); blank lines keep their place in the line count; responses lie in
{0, ..., K-1} with K=2 unless declared; a student without interactions is dropped with a warning
(it carries no evidence and breaks models that attend over the past).
"""

from __future__ import annotations

import contextlib
import csv
import inspect
import io
import itertools
import json
import os
import re
import tempfile
import tomllib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from .dataset import KTDataset, StudentSeq
from .splits import kfold, split_students

PathLike = str | os.PathLike

_INT = re.compile(r"\s*[+-]?[0-9]+\s*")  # the integer syntax of every file: sign and ASCII digits
_NOT_INT_CHAR = re.compile(r"[^0-9+\-\s]")  # int() and numpy also take `1_0` and non-ASCII digits
_INT64 = np.iinfo(np.int64)


def _allowed(K: int) -> str:
    """The response set as printed in messages: `{0, 1}` or `{0, ..., 9}`."""
    return "{" + (", ".join(map(str, range(K))) if K <= 5 else f"0, ..., {K - 1}") + "}"


def _read_text(path: Path) -> str:
    """The file decoded as UTF-8 (a BOM is dropped), or an error naming the line and bad bytes."""
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = e.object.count(b"\n", 0, e.start) + 1
        bad = e.object[e.start : e.end]
        raise ValueError(f"{path} line {line}: bytes {bad!r} are not valid UTF-8") from None


def _read_lines(path: Path) -> list[str]:
    """Lines as an editor numbers them (`\\n`, `\\r\\n` or `\\r` ends one), without terminators."""
    return [s.rstrip("\r\n") for s in io.StringIO(_read_text(path), newline="")]


class _Where(NamedTuple):
    """Where flat values come from, so that an error can name the file, line and field."""

    path: Path
    lines: np.ndarray  # [n_records] 1-based line of each record
    offsets: np.ndarray | None = None  # [n_records + 1] record starts; None: one value per record

    def error(self, k: int, text: str) -> ValueError:
        """`path line L: text (field F)` for flat value `k`."""
        if self.offsets is None:
            return ValueError(f"{self.path} line {self.lines[k]}: {text}")
        rec = int(np.searchsorted(self.offsets, k, side="right") - 1)
        field = k - self.offsets[rec] + 1
        return ValueError(f"{self.path} line {self.lines[rec]}: {text} (field {field})")

    def first(self, bad: np.ndarray, values, message: str) -> None:
        """Raise for the first True in `bad`; `{v}` in `message` becomes the value."""
        if bad.any():
            k = int(np.argmax(bad))
            raise self.error(k, message.replace("{v}", str(values[k])))


def _int_problem(tok: str) -> str | None:
    """Why `tok` is not an int64 of the file syntax, or None."""
    if not _INT.fullmatch(tok):
        return "is not an integer"
    if not _INT64.min <= int(tok) <= _INT64.max:
        return "does not fit in 64 bits"
    return None


def _parse_ints(tokens: list[str]) -> np.ndarray | None:
    """int64 of the tokens in one numpy call, or None when one of them is not an integer."""
    if _NOT_INT_CHAR.search("".join(tokens)):
        return None
    try:
        return np.array(tokens, dtype=np.int64)
    except (ValueError, OverflowError):
        return None


def _to_ints(tokens: list[str], where: _Where, what: str) -> np.ndarray:
    """All tokens of one field -> int64; on failure report the first bad token."""
    v = _parse_ints(tokens)
    if v is not None:
        return v
    for k, tok in enumerate(tokens):
        if problem := _int_problem(tok):
            raise where.error(k, f"{what} {tok!r} {problem}")
    return np.array(tokens, dtype=np.int64)  # not reached: some token above has a problem


def _check_ids(v, where: _Where, what: str, base: int, vocab: int | None, vocab_name: str):
    """Ids must be >= base and, with a declared vocabulary, < vocab + base."""
    why = "1-based; 0-based files need one_based=False or None" if base == 1 else "0-based"
    where.first(v < base, v, f"{what} '{{v}}' is below {base} (ids are {why})")
    if vocab is not None:
        msg = f"{what} '{{v}}' is beyond the declared vocabulary {vocab_name}"
        where.first(v >= vocab + base, v, msg)


def _check_responses(r, where: _Where, K: int, what: str = "response") -> None:
    """Responses must lie in {0, ..., K-1}."""
    msg = f"{what} '{{v}}' not in {_allowed(K)} (K={K}; ordinal data must declare its K)"
    where.first((r < 0) | (r >= K), r, msg)


def _check_K(K: int) -> None:
    if K < 2:
        raise ValueError(f"K (response categories) must be >= 2, got {K}")


def _nonempty(path: Path, lengths: np.ndarray, lines: np.ndarray) -> np.ndarray:
    """Indices of the students with interactions; the others are dropped with one warning."""
    empty = lengths == 0
    if empty.any():
        warnings.warn(
            f"{path}: dropped {int(empty.sum())} student(s) without interactions "
            f"(the first at line {lines[np.argmax(empty)]})",
            stacklevel=3,
        )
    return np.flatnonzero(~empty)


def _students(keep, uid_offset: int, q, r, pid=None, fold=None) -> list[StudentSeq]:
    """StudentSeq of the kept records, numbered `uid_offset, uid_offset + 1, ...`."""
    return [
        StudentSeq(
            uid=uid_offset + j,
            q=q[i],
            r=r[i],
            pid=None if pid is None else pid[i],
            fold=-1 if fold is None else int(fold[i]),
        )
        for j, i in enumerate(keep.tolist())
    ]


_HEADERS = ("auto", "length", "id")  # how the first line of a record reads


def _count_fields(s: str) -> int:
    """Number of comma-separated values on a line (a trailing comma adds none; blank: 0)."""
    s = s.strip().removesuffix(",")
    return s.count(",") + 1 if s else 0


class _Heads(NamedTuple):
    """The header line of each R-line record, as the header detection sees it."""

    is_len: np.ndarray  # [m] bool: its first field is the number of values on the next line
    id_like: np.ndarray  # [m] bool: it is a list of >= 2 integers (AKT's `index,student_id`)
    even: np.ndarray  # [m] bool: the record's value lines hold equally many values


def _heads(lines: list[str], R: int) -> _Heads:
    """Per-record header facts of `lines` cut into records of R lines (missing lines: empty)."""
    m = -(-len(lines) // R)
    counts = np.zeros(m * R, dtype=np.int64)
    counts[: len(lines)] = [_count_fields(s) for s in lines]
    counts = counts.reshape(m, R)  # [m, R]
    heads = [h.strip().removesuffix(",").split(",") for h in lines[::R]]
    is_len = [
        _INT.fullmatch(h[0]) is not None and int(h[0]) == c
        for h, c in zip(heads, counts[:, 1].tolist(), strict=True)
    ]
    id_like = [len(h) >= 2 and all(_INT.fullmatch(x) for x in h) for h in heads]
    even = (counts[:, 1:] == counts[:, 1:2]).all(axis=1)
    return _Heads(np.array(is_len, dtype=bool), np.array(id_like, dtype=bool), even)


def _header_kind(h: _Heads) -> str | None:
    """'length' if every header starts with its record's length; 'id' if every header is a list
    of integers and fewer than half start with that length (a few may by chance); else None."""
    if h.is_len.all():
        return "length"
    if h.id_like.all() and 2 * int(h.is_len.sum()) < len(h.is_len):
        return "id"
    return None


def _header_mode(lines: list[str], R: int, header: str) -> str:
    """'length' or 'id' for one file; auto falls back to 'length' so that the reader names the
    first record whose header disagrees with its values."""
    if header not in _HEADERS:
        raise ValueError(f"header must be one of {list(_HEADERS)}, got {header!r}")
    if header != "auto":
        return header
    return _header_kind(_heads(lines, R)) or "length"


def _content_end(lines: list[str]) -> int:
    """Number of lines before the trailing blank ones (which are harmless)."""
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return end


class _Records(NamedTuple):
    """Records of a multi-line file, each field flattened over all students."""

    path: Path
    header: str  # "length" or "id": how the first line of each record was read
    raw_uid: list[str]  # id line: the whole line; length line: the fields after n
    flat: list[np.ndarray]  # one int64 array per field; all but the last are ids
    offsets: np.ndarray  # [n_records + 1] start of each record in the flat arrays
    header_lines: np.ndarray  # [n_records] 1-based line of each header

    def where(self, j: int) -> _Where:
        return _Where(self.path, self.header_lines + 1 + j, self.offsets)

    def check(self, j: int, what: str, base: int, vocab: int | None, vocab_name: str) -> None:
        _check_ids(self.flat[j], self.where(j), what, base, vocab, vocab_name)

    def check_responses(self, j: int, K: int) -> None:
        _check_responses(self.flat[j], self.where(j), K)

    def split(self, j: int, base: int = 0) -> list[np.ndarray]:
        return np.split(self.flat[j] - base, self.offsets[1:-1])

    def nonempty(self) -> np.ndarray:
        return _nonempty(self.path, np.diff(self.offsets), self.header_lines)

    def has_zero_id(self) -> bool:
        return any((v == 0).any() for v in self.flat[:-1])

    def meta(self, keep: np.ndarray, uid_offset: int) -> dict:
        """`raw_uid` of the kept students when the headers carry one."""
        if not any(self.raw_uid):
            return {}
        return {"raw_uid": {uid_offset + j: self.raw_uid[i] for j, i in enumerate(keep.tolist())}}


def _read_records(path: PathLike, fields: Sequence[str], header: str = "length") -> _Records:
    """Parse records of one header line followed by one line of `n` ints per field.

    The header is the length `n[,...]` or an identifier line (then `n` is the count of the next
    line); `header="auto"` tells them apart for the whole file (`_header_kind`). A record with
    n=0 has empty field lines; at the end of the file they may be missing.
    """
    path = Path(path)
    lines = _read_lines(path)
    R = 1 + len(fields)
    end = _content_end(lines)
    if not end:
        raise ValueError(f"{path} line 1: empty file, expected records of {R} lines")
    mode = _header_mode(lines[:end], R, header)
    hint = ""
    if header == "auto" and mode == "length":
        hint = " (if each record starts with an identifier line, not its length, pass header='id')"
    raw: list[str] = []
    counts: list[int] = []
    tokens: list[list[str]] = [[] for _ in fields]
    for h in range(0, end, R):  # h: index of a header line
        if not lines[h].strip():
            what = "the length n" if mode == "length" else "an identifier line"
            raise ValueError(
                f"{path} line {h + 1}: blank line where a record header ({what}) belongs"
            )
        body = lines[h + 1 : h + R]
        if mode == "id":
            n = _count_fields(body[0]) if body else 0
            raw.append(lines[h].strip().rstrip(",").strip())
            says = f"line {h + 2} has {n} {fields[0]}s"
        else:
            head, _, extra = lines[h].partition(",")
            if problem := _int_problem(head):
                raise ValueError(f"{path} line {h + 1}: sequence length {head!r} {problem}")
            n = int(head)
            if n < 0:
                raise ValueError(f"{path} line {h + 1}: sequence length '{n}' is negative")
            raw.append(extra.strip().rstrip(",").strip())
            says = f"header line {h + 1} says n={n}{hint}"
        if len(body) < R - 1 and n:
            raise ValueError(
                f"{path} line {h + 1}: truncated record: the file ends after {1 + len(body)} of "
                f"{R} lines (header {lines[h]!r})"
            )
        body += [""] * (R - 1 - len(body))
        for j, what in enumerate(fields):
            s = body[j].strip().removesuffix(",")
            toks = s.split(",") if s else []
            if len(toks) != n:
                raise ValueError(f"{path} line {h + 2 + j}: found {len(toks)} {what}s, but {says}")
            tokens[j].extend(toks)
        counts.append(n)
    offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    header_lines = np.arange(len(counts), dtype=np.int64) * R + 1
    flat = [
        _to_ints(tokens[j], _Where(path, header_lines + 1 + j, offsets), what)
        for j, what in enumerate(fields)
    ]
    return _Records(path, mode, raw, flat, offsets, header_lines)


def _vocab(declared: int | None, ids: np.ndarray) -> int:
    """Declared vocabulary size, else max 0-based id + 1."""
    if declared is not None:
        return int(declared)
    return int(ids.max()) + 1 if len(ids) else 0


def _id_base(one_based: bool | None, recs: Sequence[_Records]) -> int:
    """1 or 0: the declared base, else 0 when some id of the files (all together) is 0."""
    if one_based is not None:
        return int(bool(one_based))
    return 0 if any(r.has_zero_id() for r in recs) else 1


_LINE_FIELDS = {
    "line3": ("question id", "response"),
    "line4": ("problem id", "skill id", "response"),
}


def _line_dataset(
    rec: _Records,
    base: int,
    uid_offset: int = 0,
    num_c: int | None = None,
    num_pid: int | None = None,
    K: int = 2,
    name: str | None = None,
    notes: dict[str, str] | None = None,
) -> KTDataset:
    """A 3-line (question ids, responses) or 4-line (problem ids, skill ids, responses) file's
    records as a dataset; `notes` say where a declared size came from."""
    _check_K(K)
    notes = notes or {}
    has_pid = len(rec.flat) == 3
    if not has_pid and num_pid is not None:
        raise TypeError(f"{rec.path}: num_pid is for 4-line files (problem ids); this has none")
    q = 1 if has_pid else 0  # field of the skill/question ids
    if has_pid:
        rec.check(0, "problem id", base, num_pid, f"num_pid={num_pid}{notes.get('num_pid', '')}")
    what = "skill id" if has_pid else "question id"
    rec.check(q, what, base, num_c, f"num_c={num_c}{notes.get('num_c', '')}")
    rec.check_responses(q + 1, K)
    keep = rec.nonempty()
    pid = rec.split(0, base) if has_pid else None
    return KTDataset(
        _students(keep, uid_offset, rec.split(q, base), rec.split(q + 1), pid),
        num_c=_vocab(num_c, rec.flat[q] - base),
        num_pid=_vocab(num_pid, rec.flat[0] - base) if has_pid else 0,
        K=K,
        name=name or rec.path.stem,
        source=str(rec.path),
        meta=rec.meta(keep, uid_offset),
    )


def read_line3(
    path: PathLike,
    num_c: int | None = None,
    K: int = 2,
    one_based: bool | None = True,
    uid_offset: int = 0,
    name: str | None = None,
    header: str = "auto",
) -> KTDataset:
    """Read the DKVMN 3-line format (n / question ids / responses per student).

    `header`: "length" (the first line of a record is `n[,...]`), "id" (an identifier line, kept
    in `meta["raw_uid"]`) or "auto" (told apart for the file). `one_based=None`: 0-based when
    some id is 0, else 1-based.
    """
    _check_K(K)
    rec = _read_records(path, _LINE_FIELDS["line3"], header)
    return _line_dataset(rec, _id_base(one_based, [rec]), uid_offset, num_c, None, K, name)


def read_line4(
    path: PathLike,
    num_c: int | None = None,
    num_pid: int | None = None,
    K: int = 2,
    one_based: bool | None = True,
    uid_offset: int = 0,
    name: str | None = None,
    header: str = "auto",
) -> KTDataset:
    """Read the AKT/DTransformer 4-line format (header / problem ids / skill ids / responses).

    The header is `n[,user_id]` or, in AKT's published folds, an identifier line `index,user_id`
    (`header` and `one_based` as in `read_line3`); the raw id is kept in `meta["raw_uid"]`.
    """
    _check_K(K)
    rec = _read_records(path, _LINE_FIELDS["line4"], header)
    return _line_dataset(rec, _id_base(one_based, [rec]), uid_offset, num_c, num_pid, K, name)


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


def write_line3(dataset: KTDataset, path: PathLike, one_based: bool = True) -> None:
    """Write the 3-line format, 1-based question ids unless `one_based=False` (atomic)."""
    b = int(one_based)
    out = []
    for s in dataset.students:
        out += [str(len(s)), _join(s.q + b), _join(s.r)]
    _atomic_write(path, "\n".join(out) + "\n")


def write_line4(dataset: KTDataset, path: PathLike, one_based: bool = True) -> None:
    """Write the 4-line format `n,user_id` / pids / skills / responses, 1-based ids unless
    `one_based=False` (atomic)."""
    if not dataset.has_pid:
        raise ValueError(f"{dataset.name}: the 4-line format needs problem ids on every student")
    raw = dataset.meta.get("raw_uid", {})
    b = int(one_based)
    out = []
    for s in dataset.students:
        out += [f"{len(s)},{raw.get(s.uid, s.uid)}", _join(s.pid + b), _join(s.q + b), _join(s.r)]
    _atomic_write(path, "\n".join(out) + "\n")


def _read_csv(
    path: Path, required: Sequence[str], rows_are: str
) -> tuple[pd.DataFrame, np.ndarray]:
    """A CSV as a frame of strings plus the 1-based line of each row (blank lines skipped).

    Parsed with the csv module so that every row keeps its real line number and a row whose field
    count differs from the header's is refused: pandas would shift a row with extra fields into
    the index, or stop with a message that names no file.
    """
    text = _read_text(path)
    csv.field_size_limit(max(csv.field_size_limit(), len(text)))  # a long pykt list is one field
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[list[str]] = []
    lines: list[int] = []
    start = 1
    try:
        for row in reader:
            if len(row) > 1 or (row and row[0].strip()):
                rows.append(row)
                lines.append(start)
            start = reader.line_num + 1
    except csv.Error as e:
        raise ValueError(f"{path} line {reader.line_num}: {e}") from None
    if not rows:
        raise ValueError(f"{path} line 1: empty file, expected a header naming {list(required)}")
    header, head_line = rows[0], lines[0]
    missing = [c for c in required if c not in header]
    if missing:
        raise ValueError(f"{path} line {head_line}: missing column(s) {missing}; header: {header}")
    if dupes := sorted({c for c in header if header.count(c) > 1}):
        raise ValueError(f"{path} line {head_line}: duplicate column name(s) {dupes}")
    width = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    if (bad := width != len(header)).any():
        i = int(np.argmax(bad))
        trailing = width[i] == len(header) + 1 and not rows[i][-1]
        raise ValueError(
            f"{path} line {lines[i]}: {width[i]} fields, but the header (line {head_line}) has "
            f"{len(header)}" + (" (a trailing comma adds an empty field)" if trailing else "")
        )
    if len(rows) == 1:
        raise ValueError(f"{path} line {head_line + 1}: no {rows_are} after the header")
    return pd.DataFrame(rows[1:], columns=header, dtype=str), np.array(lines[1:], dtype=np.int64)


def _int_column(df: pd.DataFrame, col: str, where: _Where) -> np.ndarray:
    """An integer column, or an error naming the first non-integer cell."""
    return _to_ints(df[col].tolist(), where, col)


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
    n_folds: int = 5,
) -> KTDataset:
    """Read a pykt CSV (`train_valid.csv` / `test.csv`, 0-based ids, -1 padding dropped).

    `fold` must lie in 0..n_folds-1 in `train_valid*.csv` (every student there is in a fold) and
    in -1..n_folds-1 elsewhere (-1: held out).
    """
    _check_K(K)
    data_dir = Path(data_dir)
    path = data_dir if data_dir.is_file() else data_dir / f"{which.removesuffix('.csv')}.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{data_dir}: no pykt file {path.name!r} (which={which!r})")
    df, lines = _read_csv(path, ("concepts", "responses"), "student rows")
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
    where = _Where(path, lines, offsets)
    v = {
        c: _to_ints(list(itertools.chain.from_iterable(toks[c])), where, c)
        for c in _PYKT_INTS
        if c in toks
    }
    # pykt pads chunked sequences with -1 (and selectmask -1): padding, not data.
    keep = v["concepts"] != -1
    if "selectmasks" in v:
        keep &= v["selectmasks"] != -1
    key_path = path.parent / "keyid2idx.json"
    keys = _read_json(key_path) if key_path.is_file() else {}
    vocab = {}
    for c, declared, key in (("concepts", num_c, "num_c"), ("questions", num_pid, "num_pid")):
        if c not in v:
            continue
        if declared is None and isinstance(keys.get(c), dict):
            declared, src = len(keys[c]), f"{key}={len(keys[c])} (from {key_path.name})"
        else:
            src = f"{key}={declared}"
        ids = np.where(keep, v[c], 0)
        _check_ids(ids, where, c.removesuffix("s") + " id", 0, declared, src)
        vocab[c] = _vocab(declared, ids)
    _check_responses(np.where(keep, v["responses"], 0), where, K)
    folds = None
    if "fold" in df.columns:
        folds = _int_column(df, "fold", _Where(path, lines))
        # A train_valid student outside the folds would be in train for every fold.
        lo = 0 if path.stem.startswith("train_valid") else -1
        msg = f"fold '{{v}}' not in {lo}..{n_folds - 1} (n_folds={n_folds})"
        _Where(path, lines).first((folds < lo) | (folds >= n_folds), folds, msg)
    new_offsets = np.concatenate([[0], np.cumsum(keep)])[offsets]
    cut = new_offsets[1:-1]
    q, r = np.split(v["concepts"][keep], cut), np.split(v["responses"][keep], cut)
    pid = np.split(v["questions"][keep], cut) if "questions" in v else None
    rows = _nonempty(path, np.diff(new_offsets), lines)
    students = _students(rows, uid_offset, q, r, pid, folds)
    meta = {}
    if "uid" in df.columns:
        meta["raw_uid"] = dict(enumerate(df["uid"].to_numpy()[rows].tolist(), start=uid_offset))
    return KTDataset(
        students,
        num_c=vocab["concepts"],
        num_pid=vocab.get("questions", 0),
        K=K,
        name=name or f"{path.parent.name}/{path.stem}",
        source=str(path),
        meta=meta,
    )


def _read_json(path: Path) -> Any:
    try:
        return json.loads(_read_text(path))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} line {e.lineno}: {e.msg}") from None


def _labels(col: pd.Series) -> pd.Series | np.ndarray:
    """Raw ids of a log column: integers if every cell is one (so 2 sorts before 10), else text."""
    ints = _parse_ints(col.tolist())
    return col if ints is None else ints


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


def read_log(
    path: PathLike,
    user: str = "user",
    skill: str = "skill",
    problem: str | None = None,
    correct: str = "correct",
    order: str | None = "order",
    K: int = 2,
    uid_offset: int = 0,
    name: str | None = None,
) -> KTDataset:
    """Read an interaction log CSV (one row per interaction); raw ids map to sorted 0-based indices.

    `meta` holds the mappings: `skill_ids[q]` / `problem_ids[pid]` are raw ids, `raw_uid[uid]`
    the raw user. Ordinal responses need `K`. `order` (numbers or dates) sorts each student's
    rows; ties and `order=None` keep the file order.
    """
    _check_K(K)
    path = Path(path)
    cols = [c for c in (user, skill, problem, correct, order) if c is not None]
    df, lines = _read_csv(path, cols, "interaction rows")
    where = _Where(path, lines)
    for c in cols:
        if (empty := (df[c].str.strip() == "").to_numpy()).any():
            raise where.error(int(np.argmax(empty)), f"empty value in column {c!r}")
    r = _int_column(df, correct, where)
    _check_responses(r, where, K, what=correct)
    u_code, users = pd.factorize(_labels(df[user]), sort=True)
    keys = (_order_key(df[order], where, order), u_code) if order else (u_code,)
    idx = np.lexsort(keys)  # stable: ties in order keep the file order
    q_code, skills = pd.factorize(_labels(df[skill]), sort=True)
    bounds = np.concatenate([[0], np.cumsum(np.bincount(u_code, minlength=len(users)))])
    cut = bounds[1:-1]
    meta = {
        "raw_uid": {uid_offset + i: u for i, u in enumerate(users.tolist())},
        "skill_ids": skills.tolist(),
    }
    pid = None
    if problem:
        p_code, problems = pd.factorize(_labels(df[problem]), sort=True)
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
    try:
        from .synthetic import simulate
    except ImportError as e:
        raise ImportError("data_format='synthetic' needs kt_lib.data.synthetic.simulate") from e
    if "seed" not in kw and "seed" in inspect.signature(simulate).parameters:
        kw["seed"] = seed  # one seed drives both the simulation and the split
    result = simulate(**kw)
    train, valid, test, how = _holdout(result.data, (0.7, 0.1, 0.2), fold, seed)
    return _Loaded(train, valid, test, result.data.name or "synthetic", how, result.truth)


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


def _detect(d: Path, kw: dict) -> tuple[str, str]:
    """(format, why) of `data_dir` for data_format='auto'."""
    if d.is_file():
        return "log", "one CSV file"
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such file or folder (data_format='auto')")
    if (d / "train_valid.csv").is_file():
        return "pykt", "train_valid.csv"
    prefix = kw.get("prefix", "*")
    split_files = _glob_split(d, prefix, "train*") + _glob_split(d, prefix, "test*")
    if split_files:
        if (toml := _datasets_toml(d, split_files)) and (fmt := _toml_format(toml)):
            return fmt, f"inputs in {toml.path.name} [{toml.section}]"
        return _sniff_lines(split_files[0]), f"records of {split_files[0].name}"
    if len(csvs := sorted(d.glob("*.csv"))) == 1:
        return "log", f"one CSV file, {csvs[0].name}"
    raise FileNotFoundError(
        f"{d}: data_format='auto' found no layout it knows: no train_valid.csv (pykt), no "
        f"train/test files ({_FOLDER_HELP}), not one *.csv (interaction log)"
    )


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
    if not len(train):
        raise ValueError(f"{d}/train_valid.csv: all {len(tv)} students are in fold {fold}")
    how = f"fold {fold} of train_valid.csv as valid, its other folds train; test = test.csv"
    return _Loaded(train, valid, test, d.name, how)


def _load_log(d, fold, valid_frac, seed, kw):
    """One interaction-log CSV, seeded student split (`fractions=`, default 70/10/20)."""
    path = _find(d, "*.csv") if d.is_dir() else d
    fractions = kw.pop("fractions", (0.7, 0.1, 0.2))
    train, valid, test, how = _holdout(read_log(path, **kw), fractions, fold, seed)
    return _Loaded(train, valid, test, path.stem, f"{path.name}: {how}")


_LOADERS = {
    "synthetic": _load_synthetic,
    "line3": partial(_load_lines, fmt="line3"),
    "line4": partial(_load_lines, fmt="line4"),
    "pykt": _load_pykt,
    "log": _load_log,
}
_FOLDER_FORMATS = ("line3", "line4", "pykt")  # formats whose data_dir is a folder of files


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
    `data_dir` (pykt folder, 3/4-line folder by record structure, one log CSV); the protocol
    says what was detected and `Bundle.data_format` holds the concrete format.
    """
    formats = ["auto", *_LOADERS]
    if data_format not in formats:
        raise ValueError(f"unknown data_format {data_format!r}; expected one of {formats}")
    if data_dir is None and data_format != "synthetic":
        raise ValueError(f"data_format={data_format!r} needs data_dir")
    d = None if data_dir is None else Path(data_dir)
    auto = data_format == "auto"
    if auto:
        data_format, why = _detect(d, kw)
    if data_format in _FOLDER_FORMATS and not d.is_dir():
        if d.is_file():
            raise ValueError(
                f"{d}: data_format={data_format!r} reads a folder of files, not one file "
                f"(pass its folder {d.parent})"
            )
        raise FileNotFoundError(f"{d}: no such folder (data_format={data_format!r})")
    got = _LOADERS[data_format](d, fold, valid_frac, seed, dict(kw))
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
