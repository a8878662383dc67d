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
from tqdm.auto import tqdm

_ENCODINGS = ("utf-8", "latin-1")  # tried in order; latin-1 decodes any byte
_CHUNK_ROWS = 500_000
_PROGRESS_BYTES = 50 << 20  # a progress bar for files above 50 MB


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: Path, block: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class RawTable:
    """One raw file as a frame of text cells; the frame's index is the data row (0-based).

    Large files are read by pandas from disk, never held as one decoded string; the text is
    walked again only to name the line of a bad cell.
    """

    path: Path
    frame: pd.DataFrame
    encoding: str
    sep: str
    sha256: str
    size: int
    data: bytes | None = field(default=None, repr=False)  # small inputs read as bytes

    def _open(self):
        enc = "utf-8-sig" if self.encoding == "utf-8" else self.encoding
        if self.data is not None:
            return io.TextIOWrapper(io.BytesIO(self.data), encoding=enc, newline="")
        return open(self.path, encoding=enc, newline="")

    @property
    def quoting(self) -> int:
        # Tab-separated DataShop exports do not quote; a `"` inside a step name is text.
        return csv.QUOTE_NONE if self.sep == "\t" else csv.QUOTE_MINIMAL

    def line(self, row: int) -> int:
        """1-based line where data row `row` starts. Blank lines are skipped as pandas skips
        them: a line of nothing but spaces and tabs (the separator excepted); a line of empty
        cells (`,,,`) is a row."""
        blank = set(" \t") - {self.sep}
        with self._open() as f:
            last = [""]  # the physical line the csv reader read last

            def lines():
                for text in f:
                    last[0] = text
                    yield text

            reader = csv.reader(lines(), delimiter=self.sep, quoting=self.quoting)
            start, seen = 1, -2  # the header is row -1
            for _ in reader:
                one_line = reader.line_num == start
                if not (one_line and set(last[0].rstrip("\r\n")) <= blank):
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


def _read_frame(table: RawTable, keep: list[str]) -> pd.DataFrame:
    """All columns parsed in chunks (so that a row with more fields than the header is an error;
    pandas' `usecols` would drop its extra fields silently), `keep` kept of each chunk."""
    reader = pd.read_csv(
        table.path if table.data is None else io.BytesIO(table.data),
        encoding="utf-8-sig" if table.encoding == "utf-8" else table.encoding,
        sep=table.sep,
        dtype=str,
        quoting=table.quoting,
        index_col=False,
        chunksize=_CHUNK_ROWS,
    )
    with reader:
        chunks = tqdm(
            reader,
            desc=table.path.name,
            unit=f"{_CHUNK_ROWS // 1000}k rows",
            disable=table.size < _PROGRESS_BYTES,
        )
        frame = pd.concat(
            [c[keep] for c in chunks] or [pd.DataFrame(columns=keep, dtype=str)], ignore_index=True
        )
    return frame


def read_table(
    path: Path,
    required: Sequence[str],
    optional: Sequence[str] = (),
    sep: str | None = None,
    data: bytes | None = None,
    allow_empty: bool = False,
) -> RawTable:
    """Read `path` (or its bytes `data`) keeping `required` + the present `optional` columns.

    `sep=None` takes a tab when the header line holds one, else a comma. A missing required
    column is an error naming the header line (1).
    """
    path = Path(path)
    if data is None and not path.is_file():
        raise FileNotFoundError(f"{path}: no such raw file")
    if data is not None:
        head = data[:65536]
        size, digest = len(data), sha256(data)
    else:
        with open(path, "rb") as f:
            head = f.read(65536)
        size, digest = path.stat().st_size, _file_sha256(path)
    first = head.split(b"\n", 1)[0].rstrip(b"\r").removeprefix(b"\xef\xbb\xbf")
    header = first.decode("utf-8", errors="replace")
    if not header.strip():
        raise ValueError(f"{path} line 1: empty header, expected columns {list(required)}")
    sep = sep or ("\t" if "\t" in header else ",")
    names = next(csv.reader([header], delimiter=sep))
    if missing := [c for c in required if c not in names]:
        raise ValueError(f"{path} line 1: missing column(s) {missing}; the header has {names}")
    keep = [*required, *(c for c in optional if c in names and c not in required)]
    for encoding in _ENCODINGS:
        table = RawTable(path, pd.DataFrame(), encoding, sep, digest, size, data)
        try:
            table.frame = _read_frame(table, keep)
        except UnicodeDecodeError:
            continue
        except pd.errors.ParserError as e:
            raise ValueError(f"{path}: {e}") from None
        if not (len(table.frame) or allow_empty):
            raise ValueError(f"{path} line 2: no data rows after the header")
        return table
    raise AssertionError("not reached: latin-1 decodes any byte")


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
