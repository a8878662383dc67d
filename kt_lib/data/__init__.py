"""Data layer: sequences and batches, file readers/writers, student-level splits."""

from .dataset import (
    PAD,
    Batch,
    BatchLoader,
    KTDataset,
    StudentSeq,
    Window,
    chunk,
    collate,
    interaction_token,
)
from .formats import (
    Bundle,
    load_bundle,
    read_line3,
    read_line4,
    read_log,
    read_pykt,
    write_line3,
    write_line4,
)
from .splits import file_folds, kfold, split_students
from .synthetic import SimResult, SimTruth, simulate

__all__ = [
    "PAD",
    "Batch",
    "BatchLoader",
    "Bundle",
    "KTDataset",
    "SimResult",
    "SimTruth",
    "StudentSeq",
    "Window",
    "chunk",
    "collate",
    "file_folds",
    "interaction_token",
    "kfold",
    "load_bundle",
    "read_line3",
    "read_line4",
    "read_log",
    "read_pykt",
    "simulate",
    "split_students",
    "write_line3",
    "write_line4",
]
