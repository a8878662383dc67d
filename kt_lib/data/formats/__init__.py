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

Modules: `tokens` (shared parsing and checks), `lines` (3/4-line readers and writers), `pykt`,
`log`, `detect` (which layout a folder holds), `bundle` (`Bundle`, `load_bundle`).
"""

from .bundle import Bundle, load_bundle
from .lines import read_line3, read_line4, write_line3, write_line4
from .log import read_log
from .pykt import read_pykt

__all__ = [
    "Bundle",
    "load_bundle",
    "read_line3",
    "read_line4",
    "read_log",
    "read_pykt",
    "write_line3",
    "write_line4",
]
