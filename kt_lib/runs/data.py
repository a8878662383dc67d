"""`DataSpec`: where a run's data comes from, the one place that names a dataset.

A folder without a format is read with `auto` (its layout detected); no folder means the
simulator. A folder with `synthetic` is refused: the simulator would ignore the folder and its
runs would be labelled with the folder's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data.formats import load_bundle

SYNTHETIC = "synthetic"


def dataset_name(data_dir: str | Path | None, data_format: str | None = None) -> str:
    """The dataset name of a results row: the folder's name ('assist2009'), or 'synthetic' for
    the simulator (no folder, or format synthetic: the simulator ignores any folder). A layout
    folder of `prepare`'s output (OUT/pykt, OUT/line3, OUT/line4) is named by OUT."""
    if not data_dir or data_format == SYNTHETIC:
        return SYNTHETIC
    path = Path(data_dir)
    if layout_folder(data_dir):
        return path.parent.name
    return path.name or str(data_dir)


def layout_folder(data_dir: str | Path | None) -> str | None:
    """The layout of one of `prepare`'s layout folders (OUT/pykt, OUT/line3, OUT/line4), else
    None. Those folders share their dataset name (OUT's), so a run key tells them apart by it."""
    if not data_dir:
        return None
    path = Path(data_dir)
    return path.name if path.name in ("pykt", "line3", "line4") and path.parent.name else None


@dataclass(frozen=True)
class DataSpec:
    """The arguments of `load_bundle` as plain, picklable data.

    data_format None: `auto` with a `data_dir`, `synthetic` without one. `kw` go to the reader
    (or to `simulate`)."""

    data_dir: str | None = None
    data_format: str | None = None
    fold: int | None = None
    seed: int = 0
    kw: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        data_dir = None if self.data_dir is None else str(self.data_dir)
        fmt = self.data_format or ("auto" if data_dir else SYNTHETIC)
        if data_dir and fmt == SYNTHETIC:
            raise ValueError(
                f"data_dir={data_dir!r} with data_format='synthetic': the simulator ignores the "
                "folder; drop data_dir for simulated data, or name the folder's format "
                "(auto, line3, line4, pykt, log)"
            )
        if not data_dir and fmt != SYNTHETIC:
            raise ValueError(f"data_format={fmt!r} needs data_dir")
        if not isinstance(self.kw, dict):
            raise ValueError(f"DataSpec.kw must be a mapping of reader arguments, got {self.kw!r}")
        object.__setattr__(self, "data_dir", data_dir)
        object.__setattr__(self, "data_format", fmt)
        object.__setattr__(self, "kw", dict(self.kw))

    @property
    def name(self) -> str:
        """The dataset name every results row of this data carries."""
        return dataset_name(self.data_dir, self.data_format)

    @property
    def synthetic(self) -> bool:
        return self.data_format == SYNTHETIC

    def key(self) -> str:
        """A stable identity (a cache key)."""
        return repr(
            (
                self.data_dir,
                self.data_format,
                self.fold,
                self.seed,
                sorted((k, repr(v)) for k, v in self.kw.items()),
            )
        )

    def load(self):
        """The `Bundle` (train/valid/test) this spec names."""
        return load_bundle(
            self.data_dir, self.data_format, fold=self.fold, seed=self.seed, **self.kw
        )
