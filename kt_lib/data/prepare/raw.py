"""Reading a raw public file: its encoding, separator, required columns, and errors that name the
file, the line and the column.

Raw files come as their publishers shipped them: UTF-8 or latin-1 bytes (ASSISTments 2009 carries
latin-1 in skill names and answer texts), commas or tabs (the KDD Cup and DataShop step exports),
pandas' usual missing markers (empty cell, `NA`, `NaN`, ...). A UTF-16/UTF-32 file (byte-order
mark, or the null bytes of one without) is decoded as such and its encoding recorded; null bytes
in any other file are an error. A row with fewer or more fields than the header (a damaged file,
or one cut short) is an error naming the line and the missing columns, or, under the policy
`bad_rows("skip")` (`kt prepare --skip-bad-rows`), left out and counted in `RawTable.skipped`.
Every value is read as text; the numbers and times a dataset needs are converted column by column,
and the first cell that does not convert is reported with its 1-based line, found by walking the
file again only then.
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import hashlib
import io
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from pandas._libs.parsers import STR_NA_VALUES
from tqdm.auto import tqdm

from ..formats.sniff import decode_wide, null_error, sniff

_ENCODINGS = ("utf-8", "latin-1")  # tried in order; latin-1 decodes any byte
_PROBE = "\0probe"  # the frame's copy of each row's last field while it is read
_CHUNK_ROWS = 500_000
_BLOCK = 1 << 26  # bytes per block when counting the fields of each line
_PROGRESS_BYTES = 50 << 20  # a progress bar for files above 50 MB


_NA = sorted(STR_NA_VALUES)  # pandas' default missing markers, applied to the kept columns
BAD_ROWS = ("error", "skip")
_BAD_ROWS = contextvars.ContextVar("bad_rows", default="error")


@contextlib.contextmanager
def bad_rows(policy: str):
    """Within the block, a row whose field count differs from the header's is an error
    ("error") or left out and counted in `RawTable.skipped` ("skip")."""
    if policy not in BAD_ROWS:
        raise ValueError(f"bad_rows must be one of {list(BAD_ROWS)}, got {policy!r}")
    token = _BAD_ROWS.set(policy)
    try:
        yield
    finally:
        _BAD_ROWS.reset(token)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_scan(path: Path, block: int = 1 << 22) -> tuple[str, int]:
    """SHA-256 of the file and the offset of its first null byte (-1: none), in one pass."""
    h, at, done = hashlib.sha256(), -1, 0
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
            if at < 0 and (k := chunk.find(b"\x00")) >= 0:
                at = done + k
            done += len(chunk)
    return h.hexdigest(), at


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
    read_as: str | None = None  # the codec of `data` when not `encoding` (UTF-16/32 -> UTF-8)
    skipped: int = 0  # rows of another field count than the header, left out (bad_rows skip)

    @property
    def codec(self) -> str:
        enc = self.read_as or self.encoding
        return "utf-8-sig" if enc == "utf-8" else enc

    def _open(self):
        enc = self.codec
        if self.data is not None:
            return io.TextIOWrapper(io.BytesIO(self.data), encoding=enc, newline="")
        return open(self.path, encoding=enc, newline="")

    @property
    def quoting(self) -> int:
        # Tab-separated DataShop exports do not quote; a `"` inside a step name is text.
        return csv.QUOTE_NONE if self.sep == "\t" else csv.QUOTE_MINIMAL

    def line(self, row: int) -> int:
        """1-based line where data row `row` starts (the line after the last row for a row
        beyond them)."""
        start = 0
        for seen, start, _ in self.walk():
            if seen == row:
                return start
        return start + 1

    def walk(self):
        """(data row, 1-based line where it starts, its field count) of each row, the header
        being row -1. Blank lines are skipped as pandas skips them: a line of nothing but spaces
        and tabs (the separator excepted); a line of empty cells (`,,,`) is a row."""
        blank = set(" \t") - {self.sep}
        with self._open() as f:
            last = [""]  # the physical line the csv reader read last

            def lines():
                for text in f:
                    last[0] = text
                    yield text

            reader = csv.reader(lines(), delimiter=self.sep, quoting=self.quoting)
            start, seen = 1, -2  # the header is row -1
            for fields in reader:
                n = len(fields)  # a line holding the separator is never blank
                if n > 1 or not (reader.line_num == start and set(last[0].rstrip("\r\n")) <= blank):
                    seen += 1
                    yield seen, start, n
                start = reader.line_num + 1

    def _widths(self) -> np.ndarray:
        """[data rows, 2]: the line where each row starts and its field count. Lines are
        counted in blocks with numpy unless a quote or a lone carriage return asks for the csv
        walk."""
        sep, blank = ord(self.sep), (" \t".replace(self.sep, "")).encode()
        got: list[np.ndarray] = []
        line0, tail = 1, b""
        src = io.BytesIO(self.data) if self.data is not None else open(self.path, "rb")
        with src as f:
            while True:
                chunk = f.read(_BLOCK)
                buf = tail + chunk + (b"" if chunk or not tail else b"\n")
                cut = buf.rfind(b"\n") + 1
                block, tail = buf[:cut], buf[cut:]
                a = np.frombuffer(block, dtype=np.uint8)
                quoted = self.quoting != csv.QUOTE_NONE and (a == ord('"')).any()
                cr = np.flatnonzero(a == 13)
                if quoted or (a[np.minimum(cr + 1, len(a) - 1)] != 10).any():
                    return np.array([w for _, *w in self.walk()][1:], dtype=np.int64).reshape(-1, 2)
                nl = np.flatnonzero(a == 10)
                n = np.diff(np.searchsorted(np.flatnonzero(a == sep), nl), prepend=0) + 1
                keep = n > 1
                starts = np.concatenate([[0], nl[:-1] + 1]).astype(np.int64)
                for k in np.flatnonzero(~keep).tolist():  # one field: a row unless blank
                    keep[k] = bool(block[starts[k] : nl[k]].rstrip(b"\r").strip(blank))
                lines = np.arange(line0, line0 + len(nl), dtype=np.int64)
                got.append(np.stack([lines[keep], n[keep]], axis=1))
                line0 += len(nl)
                if not chunk:
                    break
        return np.concatenate(got)[1:]

    def ends_mid_line(self) -> bool:
        """Whether the file's last byte is not a line break (its last row may be cut short)."""
        if self.data is not None:
            return self.data[-1:] not in (b"\n", b"\r")
        with open(self.path, "rb") as f:
            f.seek(max(self.size - 1, 0))
            return f.read(1) not in (b"\n", b"\r")

    def _width_error(self, line: int, width: int, names: list[str], last: bool) -> ValueError:
        n = len(names)
        msg = f"{self.path} line {line}: {width} fields, but the header (line 1) has {n}"
        if width < n:
            msg += f": missing {names[width:]}"
            if last and self.ends_mid_line():
                msg += " (the file ends inside this row: cut short?)"
        return ValueError(msg + "; kt prepare --skip-bad-rows leaves such rows out and counts them")

    def check_widths(self, names: list[str], suspects: np.ndarray, long_rows: int) -> None:
        """Rows of another field count than the header's: an error, or (policy skip) dropped
        from the frame, whose index becomes the row's place in the file again."""
        if not suspects.any() and not long_rows:
            return
        rows = self._widths()
        width = rows[:, 1]
        bad = width != len(names)
        if _BAD_ROWS.get() == "error":
            if bad.any():
                i = int(np.argmax(bad))
                raise self._width_error(int(rows[i, 0]), int(width[i]), names, i == len(rows) - 1)
            return
        if len(self.frame) == len(rows):  # pandas kept every row (cut to the header's width)
            self.frame.index = np.arange(len(rows))
        else:
            self.frame.index = np.flatnonzero(width <= len(names))  # it left out the long ones
        self.frame = self.frame[width[self.frame.index] == len(names)]
        self.skipped = int(bad.sum())

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


def _read_frame(table: RawTable, keep: list[str], names: list[str]) -> pd.DataFrame:
    """All columns parsed in chunks (so that a row with more fields than the header is found;
    pandas' `usecols` would drop its extra fields silently), `keep` kept of each chunk.

    pandas fills the missing fields of a short row silently; its last field is then empty, so
    the rows whose last column is empty (or missing) are checked against the file
    (`RawTable.check_widths`), and pandas' missing markers apply to the kept columns only.
    """
    reader = pd.read_csv(
        table.path if table.data is None else io.BytesIO(table.data),
        encoding=table.codec,
        sep=table.sep,
        dtype=str,
        quoting=table.quoting,
        index_col=False,
        chunksize=_CHUNK_ROWS,
        keep_default_na=False,
        na_values={c: _NA for c in keep},
        on_bad_lines="error" if _BAD_ROWS.get() == "error" else "warn",
    )

    def columns(c: pd.DataFrame) -> pd.DataFrame:
        """`keep` and the probe of a chunk: the header's names as `names` has them (a BOM left
        by the latin-1 fallback dropped), the probe by place (a header with a trailing
        delimiter names its last column '', which pandas calls 'Unnamed: N')."""
        first = str(c.columns[0])
        c = c.rename(columns={c.columns[0]: first.removeprefix("\ufeff").removeprefix("ï»¿")})
        return c[keep].assign(**{_PROBE: c.iloc[:, len(names) - 1]})

    with reader, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pd.errors.ParserWarning)
        chunks = tqdm(
            reader,
            desc=table.path.name,
            unit=f"{_CHUNK_ROWS // 1000}k rows",
            disable=table.size < _PROGRESS_BYTES,
        )
        frame = pd.concat(
            [columns(c) for c in chunks] or [pd.DataFrame(columns=[*keep, _PROBE], dtype=str)],
            ignore_index=True,
        )
    long_rows = sum(len(re.findall(r"Skipping line \d+", str(w.message))) for w in caught)
    # a long first data row: pandas cuts every row to the header's width with this warning
    # alone, skipping none (a file with R-style row names reads shifted by a column so)
    long_rows += any("Length of header or names does not match" in str(w.message) for w in caught)
    suspects = (frame[_PROBE].isna() | (frame[_PROBE] == "")).to_numpy()
    table.frame = frame[keep]
    table.check_widths(names, suspects, long_rows)
    return table.frame


def _parser_error(table: RawTable, e: pd.errors.ParserError, names: list[str]) -> ValueError:
    """pandas' tokenizer error as `path line L: ...`."""
    if m := re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(e)):
        rows = table._widths()  # a short row may come before the long one pandas stopped at
        if (bad := rows[:, 1] != len(names)).any():
            i = int(np.argmax(bad))
            return table._width_error(*rows[i].tolist(), names, i == len(rows) - 1)
        return table._width_error(int(m.group(2)), int(m.group(3)), names, False)
    if "EOF inside string" in str(e):
        *_, (_, start, _) = table.walk()
        return ValueError(
            f"{table.path} line {start}: the file ends inside a quoted field (cut short?)"
        )
    return ValueError(f"{table.path}: {e}")


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
        size, digest, nul = len(data), sha256(data), data.find(b"\x00")
    else:
        with open(path, "rb") as f:
            head = f.read(65536)
        size, (digest, nul) = path.stat().st_size, _file_scan(path)
    encodings, read_as = _ENCODINGS, None
    if found := sniff(head):  # UTF-16/32: decoded whole, read as UTF-8, recorded as found
        data = decode_wide(path, path.read_bytes() if data is None else data, found).encode()
        head, encodings, read_as = data[:65536], (found.name,), "utf-8"
    elif nul >= 0:
        raise null_error(path, path.read_bytes() if data is None else data, nul, "UTF-8/latin-1")
    first = head.split(b"\n", 1)[0].rstrip(b"\r").removeprefix(b"\xef\xbb\xbf")
    header = first.decode("utf-8", errors="replace")
    if not header.strip():
        raise ValueError(f"{path} line 1: empty header, expected columns {list(required)}")
    sep = sep or ("\t" if "\t" in header else ",")
    if sep == "\t" and any(len(n) > 1 and n[0] == n[-1] == '"' for n in header.split(sep)):
        raise ValueError(
            f"{path} line 1: quoted column names in a tab-separated file; its fields are read "
            "as written, without quote handling (the KDD Cup files' steps hold stray quotes): "
            "save it without quotes"
        )
    names = next(csv.reader([header], delimiter=sep))
    if missing := [c for c in required if c not in names]:
        raise ValueError(f"{path} line 1: missing column(s) {missing}; the header has {names}")
    keep = [*required, *(c for c in optional if c in names and c not in required)]
    for encoding in encodings:
        table = RawTable(path, pd.DataFrame(), encoding, sep, digest, size, data, read_as)
        try:
            _read_frame(table, keep, names)
        except UnicodeDecodeError:
            continue
        except pd.errors.ParserError as e:
            raise _parser_error(table, e, names) from None
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
