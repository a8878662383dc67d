"""Student-level splits: seeded hold-out, k-fold, and the folds a file already carries.

Every split is by student (never by interaction), seeded with a numpy Generator, reproducible,
disjoint and covering; each part keeps the students in their original order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .dataset import KTDataset

_LABELS = {2: ("train", "valid"), 3: ("train", "valid", "test")}


def split_students(
    dataset: KTDataset, fractions: Sequence[float] = (0.7, 0.1, 0.2), seed: int = 0
) -> tuple[KTDataset, ...]:
    """Seeded disjoint student split into parts of the given fractions (which must sum to 1).

    A part with a positive fraction that rounds to no student is refused.
    """
    frac = np.asarray(fractions, dtype=float)
    if frac.ndim != 1 or len(frac) < 2 or (frac < 0).any() or abs(frac.sum() - 1) > 1e-6:
        raise ValueError(
            f"fractions must be >= 2 non-negative numbers summing to 1, got {fractions}"
        )
    n = len(dataset)
    perm = np.random.default_rng(seed).permutation(n)
    # Rounded cumulative bounds: sizes differ from fraction * n by < 1 and always sum to n.
    bounds = np.concatenate([[0], np.round(np.cumsum(frac) * n).astype(int)])
    bounds[-1] = n
    labels = _LABELS.get(len(frac), tuple(f"part{i}" for i in range(len(frac))))
    # A part asked for but rounded to no student would only fail later (empty valid, no AUC).
    if (empty := (np.diff(bounds) == 0) & (frac > 0)).any():
        i = int(np.argmax(empty))
        raise ValueError(
            f"{dataset.name}: {n} students split by fractions {tuple(fractions)} leave the "
            f"{labels[i]} part ({frac[i]:g} of them) empty; use more students or a larger fraction"
        )
    return tuple(
        dataset.subset(np.sort(perm[a:b]), name=f"{dataset.name}/{label}")
        for a, b, label in zip(bounds[:-1], bounds[1:], labels, strict=False)
    )


def kfold(dataset: KTDataset, k: int = 5, seed: int = 0) -> list[tuple[KTDataset, KTDataset]]:
    """`k` seeded (train, valid) student splits; the valid parts partition the students."""
    if not 2 <= k <= len(dataset):
        raise ValueError(f"k must be in [2, {len(dataset)}] (number of students), got {k}")
    parts = np.array_split(np.random.default_rng(seed).permutation(len(dataset)), k)
    out = []
    for i, valid in enumerate(parts):
        train = np.concatenate([p for j, p in enumerate(parts) if j != i])
        out.append(
            (
                dataset.subset(np.sort(train), name=f"{dataset.name}/fold{i}/train"),
                dataset.subset(np.sort(valid), name=f"{dataset.name}/fold{i}/valid"),
            )
        )
    return out


def file_folds(dataset: KTDataset) -> list[tuple[KTDataset, KTDataset]]:
    """(train, valid) per fold stored in the file (`StudentSeq.fold` >= 0), by increasing fold.

    Students with fold -1 (none / test) belong to no fold and are left out of both parts.
    """
    folds = np.array([s.fold for s in dataset.students], dtype=np.int64)
    values = np.unique(folds[folds >= 0])
    if len(values) < 2:
        raise ValueError(
            f"{dataset.name}: file folds need >= 2 distinct folds >= 0, found {values.tolist()}"
        )
    return [
        (
            dataset.subset(
                np.flatnonzero((folds >= 0) & (folds != f)), name=f"{dataset.name}/fold{f}/train"
            ),
            dataset.subset(np.flatnonzero(folds == f), name=f"{dataset.name}/fold{f}/valid"),
        )
        for f in values
    ]
