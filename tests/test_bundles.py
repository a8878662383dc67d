"""Data layer: chunking, collation, loaders, splits and bundles."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from kt_lib.data import (
    PAD,
    BatchLoader,
    KTDataset,
    StudentSeq,
    chunk,
    collate,
    file_folds,
    kfold,
    load_bundle,
    split_students,
    write_line3,
)
from tests.formats_support import (
    assert_bundle_disjoint,
    toy_dataset,
    write_file,
)

# --- chunking, collation, loader --------------------------------------------------------------


def test_chunk_keeps_every_interaction():
    d = toy_dataset(20)
    d.students.append(StudentSeq(uid=99, q=np.zeros(450, np.int64), r=np.ones(450, np.int64)))
    windows = chunk(d, max_len=200)
    assert sum(w.stop - w.start for w in windows) == d.num_interactions
    assert [w.stop - w.start for w in windows if w.student == len(d) - 1] == [200, 200, 50]


def test_collate_pads_and_masks():
    d = toy_dataset(3)
    windows = chunk(d, max_len=10)[:4]
    b = collate(d, windows)
    lengths = [w.stop - w.start for w in windows]
    assert b.q.shape == (4, max(lengths)) and b.pid is not None
    for i, (w, n) in enumerate(zip(windows, lengths, strict=True)):
        s = d.students[w.student]
        assert b.mask[i].sum() == n and not b.mask[i, n:].any()
        assert torch.equal(b.q[i, :n], torch.from_numpy(s.q[w.start : w.stop]))
        assert (b.q[i, n:] == PAD).all() and (b.r[i, n:] == PAD).all()
        assert b.uid[i] == s.uid and b.start[i] == w.start


def test_loader_is_deterministic_and_covers_all():
    d = toy_dataset(30)

    def run(seed, epoch):
        loader = BatchLoader(d, batch_size=4, max_len=8, shuffle=True, seed=seed)
        loader.set_epoch(epoch)
        return [(b.uid.tolist(), b.start.tolist()) for b in loader]

    assert run(1, 0) == run(1, 0)
    assert run(1, 0) != run(1, 1) and run(1, 0) != run(2, 0)
    loader = BatchLoader(d, batch_size=4, max_len=8, shuffle=True, seed=1)
    assert sum(int(b.mask.sum()) for b in loader) == d.num_interactions


def test_bucketed_loader_covers_all_and_pads_less():
    from tests.conftest import make_tiny_dataset

    d = make_tiny_dataset(n=200, L=60, seed=1)  # ragged: 30..60 steps, some windows of 1..19

    def batches(bucket, epoch=0):
        loader = BatchLoader(d, batch_size=8, max_len=20, shuffle=True, seed=3, bucket=bucket)
        loader.set_epoch(epoch)
        return loader, [b for b in loader]

    loader, plain = batches(0)
    _, pooled = batches(4)
    keys = lambda bs: sorted(
        (u, s) for b in bs for u, s in zip(b.uid.tolist(), b.start.tolist(), strict=True)
    )
    assert keys(pooled) == keys(plain) and len(keys(plain)) == len(loader.windows)
    assert sum(int(b.mask.sum()) for b in pooled) == d.num_interactions
    padded = lambda bs: sum(b.q.numel() for b in bs)
    assert padded(pooled) < padded(plain)
    budget = 8 * loader.lengths.mean()  # each bucketed batch: about a plain batch's interactions
    sizes = np.array([int(b.mask.sum()) for b in pooled])
    assert sizes.max() <= budget + 20 and np.median(sizes) >= budget - 20
    pools = -(-len(loader.windows) // 32)  # at most one short batch more per pool of 4 x 8
    assert len(plain) - pools <= len(pooled) <= len(plain) + pools
    assert len(pooled) == len(batches(4)[0])
    assert max(len(b.uid) for b in pooled) > 8  # short windows come in bigger batches
    same = lambda a, b: [x.uid.tolist() for x in a] == [x.uid.tolist() for x in b]
    assert same(batches(4)[1], pooled) and not same(batches(4, epoch=1)[1], pooled)
    equal = KTDataset(  # every window 10 long
        [StudentSeq(i, np.arange(20) % 7, np.arange(20) % 2) for i in range(50)], num_c=7
    )
    runs = [BatchLoader(equal, 4, 10, shuffle=True, seed=5, bucket=b) for b in (0, 3)]
    assert same(*[list(r) for r in runs])
    with pytest.raises(ValueError, match="bucket"):
        BatchLoader(d, 4, 10, bucket=-1)


# --- splits -----------------------------------------------------------------------------------


def test_split_students_disjoint_covering_reproducible():
    d = toy_dataset(50)
    parts = split_students(d, (0.7, 0.1, 0.2), seed=3)
    uids = [set(p.uids.tolist()) for p in parts]
    assert [len(u) for u in uids] == [35, 5, 10]
    assert set.union(*uids) == set(d.uids.tolist()) and sum(map(len, uids)) == len(d)
    again = split_students(d, (0.7, 0.1, 0.2), seed=3)
    assert all((p.uids == q.uids).all() for p, q in zip(parts, again, strict=True))
    assert (split_students(d, seed=4)[0].uids != parts[0].uids).any()
    with pytest.raises(ValueError, match="fractions"):
        split_students(d, (0.5, 0.2))


def test_kfold_and_file_folds():
    d = toy_dataset(23)
    folds = kfold(d, k=5, seed=0)
    valid = [set(v.uids.tolist()) for _, v in folds]
    assert sum(map(len, valid)) == len(d) and set.union(*valid) == set(d.uids.tolist())
    for (t, v), vs in zip(folds, valid, strict=True):
        assert not set(t.uids.tolist()) & vs and len(t) + len(v) == len(d)
    for i, s in enumerate(d.students):
        s.fold = i % 3 if i < 20 else -1  # the last three have no fold
    ff = file_folds(d)
    assert len(ff) == 3 and all(len(t) + len(v) == 20 for t, v in ff)
    assert all(s.fold == 1 for s in ff[1][1].students)


# --- bundles ----------------------------------------------------------------------------------


def test_bundle_line3_folder(tmp_path):
    d = toy_dataset(20, pid=False)
    train, valid = kfold(d, k=2)[0]
    write_line3(d, tmp_path / "toy_train.csv")
    write_line3(train, tmp_path / "toy_train1.csv")
    write_line3(valid, tmp_path / "toy_valid1.csv")
    write_line3(toy_dataset(6, seed=1, pid=False), tmp_path / "toy_test.csv")
    b = load_bundle(tmp_path, "line3", valid_frac=0.25, seed=1)
    assert (len(b.train), len(b.valid), len(b.test)) == (15, 5, 6) and b.fold is None
    assert "toy_train.csv" in b.protocol and b.data_format == "line3"
    assert_bundle_disjoint(b)
    b1 = load_bundle(tmp_path, "line3", fold=1)
    assert (len(b1.train), len(b1.valid)) == (len(train), len(valid))
    assert_bundle_disjoint(b1)
    with pytest.raises(FileNotFoundError, match=rf"{re.escape(str(tmp_path))}.*\*_train2\.csv"):
        load_bundle(tmp_path, "line3", fold=2)
    with pytest.raises(ValueError, match="unknown data_format"):
        load_bundle(tmp_path, "line5")


def test_bundle_log(tmp_path):
    rows = [f"u{i % 40},s{i % 7},{i % 2},{i}" for i in range(400)]
    path = write_file(tmp_path, "log.csv", "user,skill,correct,order\n" + "\n".join(rows) + "\n")
    b = load_bundle(path, "log", seed=2)
    assert (len(b.train), len(b.valid), len(b.test)) == (28, 4, 8)
    assert_bundle_disjoint(b)


def test_bundle_synthetic():
    pytest.importorskip("kt_lib.data.synthetic")
    b = load_bundle(num_students=100, seed=0)
    assert (len(b.train), len(b.valid), len(b.test)) == (70, 10, 20)
    assert b.truth is not None and b.data_dir is None and b.data_format == "synthetic"
    assert_bundle_disjoint(b)


def test_bundle_refuses_a_folder_with_synthetic(tmp_path):
    """The simulator would ignore the folder, and the runs would carry the folder's name."""
    with pytest.raises(ValueError, match="with data_format='synthetic': the simulator would"):
        load_bundle(tmp_path, "synthetic")
