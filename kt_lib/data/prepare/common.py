"""Helpers the dataset readers share: finding the raw file, and turning a cleaned raw frame into a
`RawLog`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .core import RawInput, RawLog
from .raw import Drops, RawTable


def find_file(raw_path: Path, names: Sequence[str], what: str) -> Path:
    """`raw_path` itself when it is a file, else the one file under it named one of `names`."""
    if raw_path.is_file():
        return raw_path
    for name in names:
        hits = sorted(raw_path.rglob(name))
        if len(hits) > 1:
            raise ValueError(f"{raw_path}: several {name} files: {[str(h) for h in hits]}")
        if hits:
            return hits[0]
    raise FileNotFoundError(f"{raw_path}: no {what} file (looked for {list(names)} below it)")


def table_input(table: RawTable) -> RawInput:
    return RawInput(str(table.path), table.sha256, table.size, table.encoding, table.skipped)


SKIPPED = "fewer or more fields than the header (bad_rows='skip')"


def count_skipped(drops: Drops, table: RawTable) -> int:
    """Rows read from `table`, those its field-count check left out counted as dropped."""
    if table.skipped:
        drops.counts[SKIPPED] = drops.counts.get(SKIPPED, 0) + table.skipped
    return len(table.frame) + table.skipped


def binary(frame: pd.DataFrame, drops: Drops, column: str, values: pd.Series):
    """Drop the rows whose `values` (numbers of `column`) are not 0 or 1 (partial credit)."""
    bad = ~values.loc[frame.index].isin([0.0, 1.0])
    return drops.apply(frame, bad, f"{column} not 0/1")


def make_log(
    table: RawTable,
    frame: pd.DataFrame,
    columns: dict[str, pd.Series],
    drops: Drops,
    choices: dict[str, Any],
    **kw: Any,
) -> RawLog:
    """A RawLog of the kept rows of `frame`; `columns` maps log columns to full-length series.

    An optional milliseconds column (`timestamp`, `usetime`) missing on some kept row is left out
    of the log (and the choices say so) rather than dropping rows pykt keeps.
    """
    idx = frame.index
    log = pd.DataFrame(index=idx)
    for name, series in columns.items():
        values = series.loc[idx]
        if name in ("timestamp", "usetime"):
            if values.isna().any():
                choices[f"{name}s"] = f"left out: missing on {int(values.isna().sum())} kept rows"
                continue
            values = values.round().astype(np.int64)
        log[name] = values
    inputs = [table_input(table)]
    rows_read = count_skipped(drops, table)
    return RawLog(log, rows_read, drops.counts, inputs, choices, **kw)
