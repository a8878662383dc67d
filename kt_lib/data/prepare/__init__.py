"""Raw public KT datasets -> pykt CSV + the 3/4-line layout + `prepare.json`.

    from kt_lib.data.prepare import prepare
    result = prepare("assist2009", "skill_builder_data_corrected_collapsed.csv", "data/a09")
    bundle = result.bundle(fold=0)          # the pykt folds through load_bundle

or `kt prepare assist2009 RAW_PATH OUT_DIR`. Each dataset module reads its raw
files with their own column names into a `RawLog` (rows dropped by reason); `core.build` orders,
filters, expands multi-skill rows, maps ids and splits as pykt-toolkit does; `write` writes the
files. `DATASETS` names the readers; `prepare.json` records what was done.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import formats
from . import assistments, datashop, ednet, eedi, oulad, raw
from .core import RawLog, build
from .write import (
    check_out_dir,
    line_files,
    line_layout,
    remove_stale,
    write_lines,
    write_pykt,
    write_record,
)


@dataclass(frozen=True)
class PrepareOptions:
    """Choices shared by every dataset (pykt-toolkit's defaults) and the per-dataset extras."""

    seed: int = 1024  # pykt's random_state for the test hold-out and the folds
    min_seq_len: int = 3  # students with fewer raw rows are dropped
    test_frac: float = 0.2
    n_folds: int = 5
    ordinal: bool = False  # ASSISTments 2009/2012/2017 (K=4), EdNet (K=3): see docs
    max_users: int | None = None  # EdNet: the first N users of pykt's sample order (5000 = pykt)
    task: str | None = None  # Eedi: NeurIPS 2020 tasks "1_2" or "3_4"; None: the train file's
    # name (train_task_3_4.csv), else "1_2"
    bands: int | None = None  # OULAD: K of the score bands, 5, 4 or 2; None: 5 (oulad.py)
    keep_banked: bool = False  # OULAD: keep results carried over from an earlier presentation
    bad_rows: str = "error"  # a raw row of another field count than the header: "error" or
    # "skip" (left out, counted in prepare.json's dropped rows and its input's skipped_rows)

    def __post_init__(self) -> None:
        if self.min_seq_len < 1:
            raise ValueError(f"min_seq_len must be >= 1, got {self.min_seq_len}")
        if self.max_users is not None and self.max_users < 1:
            raise ValueError(f"max_users must be >= 1, got {self.max_users}")
        if self.bands is not None and self.bands not in oulad.BANDS:
            raise ValueError(f"bands must be one of {sorted(oulad.BANDS)}, got {self.bands}")
        if self.bad_rows not in raw.BAD_ROWS:
            raise ValueError(f"bad_rows must be one of {list(raw.BAD_ROWS)}, got {self.bad_rows!r}")


Reader = Callable[[Path, PrepareOptions], RawLog]

DATASETS: dict[str, Reader] = {
    **assistments.READERS,
    **datashop.READERS,
    "ednet": ednet.read,
    "eedi": eedi.read,
    "oulad": oulad.read,
}
# Options only one dataset reads, with their neutral value: another dataset refuses the others.
_OWN_OPTIONS = {
    "max_users": ("ednet", None),
    "task": ("eedi", None),
    "bands": ("oulad", None),
    "keep_banked": ("oulad", False),
}


@dataclass
class PrepareResult:
    """Where the prepared files are and what they hold (the counts of `prepare.json`)."""

    name: str
    out_dir: Path
    pykt_dir: Path
    line_dir: Path
    line_format: str  # "line4" (problem ids) or "line3"
    K: int
    counts: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)

    def bundle(self, fold: int = 0, layout: str = "pykt") -> formats.Bundle:
        """Train/valid/test of pykt's fold `fold` (0..4) read back from the pykt or the 3/4-line
        files (where the same fold is numbered `fold + 1`, as the DKVMN and AKT folders)."""
        if layout == "pykt":
            return formats.load_bundle(self.pykt_dir, "pykt", fold=fold, K=self.K)
        if layout == "lines":
            line_fold = None if fold is None else fold + 1  # None: a seeded holdout of train
            return formats.load_bundle(self.line_dir, self.line_format, fold=line_fold, K=self.K)
        raise ValueError(f"layout must be 'pykt' or 'lines', got {layout!r}")


def prepare(name: str, raw_path: str | Path, out_dir: str | Path, **options: Any) -> PrepareResult:
    """Read the raw files of dataset `name` at `raw_path`, write the prepared folder `out_dir`.

    `options` are the fields of `PrepareOptions`; an option only another dataset reads
    (`_OWN_OPTIONS`) is refused. Malformed raw files raise ValueError naming the file, the line and
    the column; an `out_dir` that exists and is not a folder is refused before reading. An earlier
    preparation in `out_dir` is replaced: its pykt files and `prepare.json` are overwritten and
    its line files this one does not write are deleted (`write.remove_stale`); other files stay.
    The new files are staged and moved in only once all are written: a preparation stopped
    midway leaves the earlier one whole.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    known = {f.name for f in dataclasses.fields(PrepareOptions)}
    if unknown := sorted(set(options) - known):
        raise TypeError(f"unknown option(s) {unknown}; known: {sorted(known)}")
    opts = PrepareOptions(**options)
    for option, (owner, neutral) in _OWN_OPTIONS.items():
        if name != owner and getattr(opts, option) != neutral:
            raise ValueError(f"{option} is an option of {owner} only; {name} does not read it")
    raw_path, out = Path(raw_path), Path(out_dir)
    if not raw_path.exists():
        raise FileNotFoundError(f"{raw_path}: no such raw file or folder for {name}")
    check_out_dir(out)  # before the raw files are read, which can take minutes
    with raw.bad_rows(opts.bad_rows):
        log = DATASETS[name](raw_path, opts)
    seq = build(log, opts.min_seq_len, opts.seed, opts.test_frac, opts.n_folds)
    out.mkdir(parents=True, exist_ok=True)
    # every file is written into a staging folder first and moved in only once all are written:
    # a preparation stopped midway leaves the earlier one whole, never a mix of two splits
    # (train of one seed beside test of another, sharing students)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=out))
    try:
        pykt_dir = out / write_pykt(seq, staging, log.K).name
        line_dir = out / write_lines(seq, staging, name, log.K, opts.n_folds).name
        (out / "prepare.json").unlink(missing_ok=True)  # its absence marks a folder being written
        # an earlier preparation's line files this one does not write (folds beyond n_folds,
        # the other layout, another dataset): deleted, so no fold of an old split stays readable
        remove_stale(out, DATASETS, {line_layout(seq): line_files(name, opts.n_folds)})
        for f in sorted(p for p in staging.rglob("*") if p.is_file()):
            dst = out / f.relative_to(staging)
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(f, dst)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    counts = {"rows_read": log.rows_read, "dropped": dict(log.dropped), **seq.counts}
    counts["folds"] = [int((seq.fold == k).sum()) for k in range(opts.n_folds)]
    record = {
        "dataset": name,
        "inputs": [asdict(i) for i in log.inputs],
        "options": asdict(opts),
        "K": log.K,
        "layouts": {"pykt": "pykt", line_dir.name: line_dir.name},
        "choices": {
            **log.choices,
            "skills of one row": (
                f"split on {log.skill_sep!r}, one interaction per skill ({log.skill_order})"
                if log.skill_sep
                else "one skill per row"
            ),
            "student order": (
                "sorted by raw id" if log.user_order == "sorted" else "first row in the file"
            ),
            "min_seq_len": f"students with fewer than {opts.min_seq_len} rows are dropped",
            "ids": "0-based by first appearance (pykt), 1-based in the 3/4-line files",
            "split": (
                f"int(n * {opts.test_frac}) test students, {opts.n_folds} folds of the rest; "
                f"numpy RandomState({opts.seed}) permutations as pykt's DataFrame.sample"
            ),
        },
        "counts": counts,
    }
    write_record(out, record)
    return PrepareResult(name, out, pykt_dir, line_dir, line_dir.name, log.K, counts, record)


__all__ = ["DATASETS", "PrepareOptions", "PrepareResult", "prepare"]
