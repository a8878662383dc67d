"""Shared by every reader: integer tokens, where a value sits (file, 1-based line), range checks,
CSV tables and JSON side files.

Text is UTF-8 (a UTF-16/UTF-32 file, or one holding null bytes, is refused naming what it is; a
CSV row of another width than the header names the missing columns); an integer is an optional
sign and ASCII digits that fit in int64 (no `1_0`, no `1.0`); blank lines keep their place in the
line count; responses lie in {0, ..., K-1}; a student without interactions is dropped with a
warning. Parsing is vectorised: all tokens of a field go through one numpy conversion and one
range check, and only when that fails is the file walked again to point at the first bad token.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from ..dataset import StudentSeq
from .sniff import line_at, null_error, sniff, wide_error

PathLike = str | os.PathLike

# the integer syntax of every file: sign, ASCII digits, blanks around (spaces and tabs: `\s`
# would let through the control characters U+001C-U+001F, which int() takes and numpy refuses)
_INT = re.compile(r"[ \t]*[+-]?[0-9]+[ \t]*")
_NOT_INT_CHAR = re.compile(r"[^0-9+\- \t]")  # int() and numpy also take `1_0` and non-ASCII digits
_INT64 = np.iinfo(np.int64)


def _allowed(K: int) -> str:
    """The response set as printed in messages: `{0, 1}` or `{0, ..., 9}`."""
    return "{" + (", ".join(map(str, range(K))) if K <= 5 else f"0, ..., {K - 1}") + "}"


def _read_text(path: Path) -> str:
    """The file decoded as UTF-8 (a BOM is dropped), or an error naming the line and bad bytes;
    a UTF-16/UTF-32 file (`sniff`) or one holding null bytes is refused, naming what it is."""
    data = path.read_bytes()
    if found := sniff(data):
        raise wide_error(path, found)
    if (at := data.find(b"\x00")) >= 0:
        raise null_error(path, data, at, "UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = line_at(e.object, e.start)
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
        if isinstance(vocab, bool) or not isinstance(vocab, int | np.integer) or vocab < 0:
            raise ValueError(f"{vocab_name}: a declared size is a whole number >= 0")
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
        why = " (a trailing comma adds an empty field)" if trailing else ""
        if width[i] < len(header):
            why = f": missing {header[width[i] :]}" + _cut_short(text, i == len(rows) - 1)
        raise ValueError(
            f"{path} line {lines[i]}: {width[i]} fields, but the header (line {head_line}) has "
            f"{len(header)}{why}"
        )
    if len(rows) == 1:
        raise ValueError(f"{path} line {head_line + 1}: no {rows_are} after the header")
    return pd.DataFrame(rows[1:], columns=header, dtype=str), np.array(lines[1:], dtype=np.int64)


def _cut_short(text: str, last: bool) -> str:
    """The note for a short last row of a file that ends without a line break: it was cut."""
    if last and text[-1:] not in "\r\n":
        return " (the file ends inside this row: cut short?)"
    return ""


def _int_column(df: pd.DataFrame, col: str, where: _Where) -> np.ndarray:
    """An integer column, or an error naming the first non-integer cell."""
    return _to_ints(df[col].tolist(), where, col)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(_read_text(path))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} line {e.lineno}: {e.msg}") from None
