"""Memory-bank files: where a dataset's prebuilt banks live, and the checked `.pt`/`.json` pair.

`kt memory build` writes `<bank_dir>/<dataset>.pt` + `.json` (no pickle, atomic;
the `.json` records the `.pt`'s SHA-256 and, given the training students, a SHA-256 of their
logs); `read_banks` checks the pair, what the banks depend on (the similarity signature and the
model sizes) and which training students built them. The model (`kt_lib.models.simakt`)
supplies the tensors and the signature; this module knows files only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ..data.dataset import KTDataset
from ..fileio import read_pair, tensor_bytes, write_pair


def dataset_name(data: KTDataset) -> str:
    """The dataset a split belongs to ('assist2009/train' -> 'assist2009')."""
    base, _, split = data.name.rpartition("/")
    return base if base and split in ("train", "valid", "test") else data.name


def bank_file(bank_dir: str | Path, dataset: str) -> Path:
    """Where `kt memory build` puts a dataset's banks: `<bank_dir>/<dataset>.pt`
    and `.json` (the returned path ends in a placeholder suffix, so that `with_suffix` keeps
    dotted dataset names whole)."""
    return Path(bank_dir) / f"{dataset.replace('/', '_')}.banks"


def students_sha256(data: KTDataset) -> str:
    """SHA-256 of the training students' logs (uid, q, r, pid in uid order): banks built from
    one fold's or seed's split are refused for another even where the readers number students
    by position (every `train{k}` file has uids 0..n-1)."""
    h = hashlib.sha256()
    for s in sorted(data.students, key=lambda s: s.uid):
        h.update(np.array([s.uid, len(s)], dtype="<i8").tobytes())
        for a in (s.q, s.r) if s.pid is None else (s.q, s.r, s.pid):
            h.update(np.ascontiguousarray(a, dtype="<i8").tobytes())
    return h.hexdigest()


def write_banks(
    path: str | Path, state: dict[str, torch.Tensor], meta: dict, train: KTDataset | None = None
) -> None:
    """Write the bank tensors to `<path>.pt`, then `meta` (+ the training students it was built
    from and the `.pt`'s SHA-256) to `<path>.json`."""
    meta = dict(meta)
    if train is not None:
        meta.update(
            dataset=dataset_name(train),
            train_students=len(train),
            train_sha256=students_sha256(train),
        )
    write_pair(path, tensor_bytes(state), meta)  # kill-safe, as model checkpoints


def read_banks(
    path: str | Path,
    expected: dict,
    train: KTDataset | None = None,
    old_signature: Callable[[dict], dict] | None = None,
) -> dict[str, torch.Tensor]:
    """The bank tensors written by `write_banks`, checked against `expected` (its
    `similarity_config` signature and `sizes`) and, given `train`, the training students.
    `old_signature(meta)` gives the signature of files written before it was recorded."""
    path = Path(path)
    if not path.with_suffix(".json").is_file():
        raise FileNotFoundError(
            f"{path.with_suffix('.json')}: no prebuilt banks (build them with python -m "
            "kt_lib.memory build ... --out DIR)"
        )
    meta, tensors = read_pair(path)
    saved = meta.get("similarity_config")
    if saved is None and old_signature is not None:
        saved = old_signature(meta)
    if saved != expected["similarity_config"]:
        raise ValueError(
            f"{path}: banks were built for similarity={meta['similarity']!r}, "
            f"this model has {expected['similarity']!r}"
        )
    if "sizes" in meta and meta["sizes"] != expected["sizes"]:
        raise ValueError(
            f"{path}: banks were built for {meta['sizes']}, this model has {expected['sizes']}"
        )
    if train is not None and meta.get("train_sha256") != students_sha256(train):
        raise ValueError(
            f"{path}: banks were built from other training students ({meta['dataset']}, "
            f"{meta['train_students']} students) than the {len(train)} given (another fold "
            "or split seed? build each fold's banks into its own --out folder)"
        )
    return tensors
