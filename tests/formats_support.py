"""Shared by the data-layer tests: the shared data folder, toy datasets, file helpers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kt_lib.data import KTDataset, StudentSeq

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def write_file(tmp_path: Path, name: str, text: str) -> Path:
    """`text` written to tmp_path / name."""
    path = tmp_path / name
    path.write_text(text)
    return path


def toy_dataset(n_students: int = 5, K: int = 2, seed: int = 0, pid: bool = True) -> KTDataset:
    """A small random dataset (9 concepts, 13 problems when `pid`)."""
    rng = np.random.default_rng(seed)
    students = []
    for i in range(n_students):
        n = int(rng.integers(1, 40))
        students.append(
            StudentSeq(
                uid=i,
                q=rng.integers(0, 7, n),
                r=rng.integers(0, K, n),
                pid=rng.integers(0, 12, n) if pid else None,
            )
        )
    return KTDataset(students, num_c=9, num_pid=13 if pid else 0, K=K, name="toy")


def assert_same_dataset(a: KTDataset, b: KTDataset) -> None:
    """Sizes, uids, folds and every sequence equal."""
    assert (a.num_c, a.num_pid, a.K, len(a)) == (b.num_c, b.num_pid, b.K, len(b))
    for s, t in zip(a.students, b.students, strict=True):
        assert s.uid == t.uid and s.fold == t.fold
        np.testing.assert_array_equal(s.q, t.q)
        np.testing.assert_array_equal(s.r, t.r)
        assert (s.pid is None) == (t.pid is None)
        if s.pid is not None:
            np.testing.assert_array_equal(s.pid, t.pid)


PYKT_HEADER = "fold,uid,questions,concepts,responses,selectmasks\n"
PYKT_ROW = '0,u,"1,2","1,2","0,1","1,1"\n'
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"{DATA} absent")


def assert_bundle_disjoint(b):
    """No student in two splits; one vocabulary and K across them."""
    uids = [set(x.uids.tolist()) for x in (b.train, b.valid, b.test)]
    assert sum(map(len, uids)) == len(set.union(*uids)), "uids must be unique across splits"
    assert len({(x.num_c, x.num_pid, x.K) for x in (b.train, b.valid, b.test)}) == 1
