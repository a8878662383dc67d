"""Reading a raw public file: its encoding, separator, required columns, and errors that name the
file, the line and the column.

Raw files come as their publishers shipped them: UTF-8 or latin-1 bytes (ASSISTments 2009 carries
latin-1 in skill names and answer texts), commas or tabs (the KDD Cup and DataShop step exports),
pandas' usual missing markers (empty cell, `NA`, `NaN`, ...). Every value is read as text; the
numbers and times a dataset needs are converted column by column, and the first cell that does not
convert is reported with its 1-based line, found by walking the file again only then.
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

_ENCODINGS = ("utf-8", "latin-1")  # tried in order; latin-1 decodes any byte


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _decode(data: bytes) -> tuple[str, str]:
    """(text, encoding): UTF-8 (a BOM dropped) when the bytes are valid UTF-8, else latin-1."""
    try:
        return data.decode("utf-8-sig"), _ENCODINGS[0]
    except UnicodeDecodeError:
        return data.decode(_ENCODINGS[1]), _ENCODINGS[1]


@dataclass
class RawTable:
    """One raw file as a frame of text cells; the frame's index is the data row (0-based)."""

    path: Path
    frame: pd.DataFrame
    text: str = field(repr=False)
    encoding: str
    sep: str
    sha256: str

    @property
    def quoting(self) -> int:
        # Tab-separated DataShop exports do not quote; a `"` inside a step name is text.
        return csv.QUOTE_NONE if self.sep == "\t" else csv.QUOTE_MINIMAL

    def line(self, row: int) -> int:
        """1-based line where data row `row` starts (blank lines skipped, as pandas does)."""
        reader = csv.reader(
            io.StringIO(self.text, newline=""), delimiter=self.sep, quoting=self.quoting
        )
        start, seen = 1, -2  # the header is row -1
        for rec in reader:
            if rec and any(rec):
                seen += 1
                if seen == row:
                    return start
            start = reader.line_num + 1
        return start

    def error(self, row: int, column: str, message: str) -> ValueError:
        return ValueError(f"{self.path} line {self.line(row)}, column {column!r}: {message}")

    def first_bad(self, bad: pd.Series, column: str, message: str) -> None:
        """Raise for the first True of `bad` (indexed like the frame); `{v}` becomes the cell."""
        if bad.any():
            row = int(bad.index[np.argmax(bad.to_numpy())])
            value = self.frame.at[row, column]
            raise self.error(row, column, message.replace("{v}", repr(value)))

    def numbers(self, column: str) -> pd.Series:
        """The column as float (NaN where missing); a cell that is not a number is an error."""
        raw = self.frame[column]
        num = pd.to_numeric(raw, errors="coerce")
        self.first_bad(raw.notna() & num.isna(), column, "{v} is not a number")
        return num.astype(float)

    def times(self, column: str, formats: Sequence[str]) -> pd.Series:
        """The column as int64 milliseconds since the epoch (read as UTC; NaN where missing).

        A cell must match one of `formats` (strptime codes); otherwise it is an error.
        """
        raw = self.frame[column]
        got = pd.Series(pd.NaT, index=raw.index, dtype="datetime64[ns]")
        for fmt in formats:
            todo = got.isna() & raw.notna()
            if not todo.any():
                break
            got[todo] = pd.to_datetime(raw[todo], format=fmt, errors="coerce")
        self.first_bad(
            raw.notna() & got.isna(), column, f"{{v}} is not a time of the form {list(formats)}"
        )
        ms = got.astype("int64") // 1_000_000
        return ms.where(got.notna()).astype(float)


def read_table(
    path: Path,
    required: Sequence[str],
    optional: Sequence[str] = (),
    sep: str | None = None,
    data: bytes | None = None,
) -> RawTable:
    """Read `path` (or its bytes `data`) keeping `required` + the present `optional` columns.

    `sep=None` takes a tab when the header line holds one, else a comma. A missing required
    column is an error naming the header line (1).
    """
    path = Path(path)
    if data is None:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such raw file")
        data = path.read_bytes()
    text, encoding = _decode(data)
    header = text.split("\n", 1)[0].rstrip("\r")
    if not header.strip():
        raise ValueError(f"{path} line 1: empty header, expected columns {list(required)}")
    sep = sep or ("\t" if "\t" in header else ",")
    names = next(csv.reader([header], delimiter=sep))
    if missing := [c for c in required if c not in names]:
        raise ValueError(f"{path} line 1: missing column(s) {missing}; the header has {names}")
    keep = [*required, *(c for c in optional if c in names and c not in required)]
    table = RawTable(path, pd.DataFrame(), text, encoding, sep, sha256(data))
    try:
        frame = pd.read_csv(
            io.StringIO(text),
            sep=sep,
            dtype=str,
            usecols=keep,
            quoting=table.quoting,
            low_memory=False,
        )
    except pd.errors.ParserError as e:
        raise ValueError(f"{path}: {e}") from None
    table.frame = frame
    return table


@dataclass
class Drops:
    """Rows removed from a log, counted by the first reason that removed them."""

    counts: dict[str, int] = field(default_factory=dict)

    def apply(self, frame: pd.DataFrame, bad: pd.Series | np.ndarray, reason: str):
        bad = np.asarray(bad, dtype=bool)
        self.counts[reason] = self.counts.get(reason, 0) + int(bad.sum())
        return frame[~bad]

    def missing(self, frame: pd.DataFrame, columns: Sequence[str], reason: str | None = None):
        """Drop rows missing a cell of `columns` (the reason: `missing <column>` unless given)."""
        for c in columns:
            frame = self.apply(frame, frame[c].isna(), reason or f"missing {c}")
        return frame
