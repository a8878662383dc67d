"""Data layer: readers/writers, input errors, chunking/collation, loaders, splits, bundles."""

from __future__ import annotations

import re
from pathlib import Path

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
    read_line3,
    read_line4,
    read_log,
    read_pykt,
    split_students,
    write_line3,
    write_line4,
)

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _toy(n_students: int = 5, K: int = 2, seed: int = 0, pid: bool = True) -> KTDataset:
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


def _assert_same(a: KTDataset, b: KTDataset) -> None:
    assert (a.num_c, a.num_pid, a.K, len(a)) == (b.num_c, b.num_pid, b.K, len(b))
    for s, t in zip(a.students, b.students, strict=True):
        assert s.uid == t.uid and s.fold == t.fold
        np.testing.assert_array_equal(s.q, t.q)
        np.testing.assert_array_equal(s.r, t.r)
        assert (s.pid is None) == (t.pid is None)
        if s.pid is not None:
            np.testing.assert_array_equal(s.pid, t.pid)


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("K", [2, 4])
def test_line3_round_trip(tmp_path, K):
    d = _toy(K=K, pid=False)
    write_line3(d, tmp_path / "d.csv")
    _assert_same(d, read_line3(tmp_path / "d.csv", num_c=d.num_c, K=K))


def test_line4_round_trip(tmp_path):
    d = _toy()
    write_line4(d, tmp_path / "d.csv")
    back = read_line4(tmp_path / "d.csv", num_c=d.num_c, num_pid=d.num_pid)
    _assert_same(d, back)
    assert back.meta["raw_uid"] == {s.uid: str(s.uid) for s in d.students}


def test_vocabulary_inferred_from_max_id(tmp_path):
    path = _write(tmp_path, "a.csv", "3,extra,fields\n1,5,2,\n0,1,1,\n\n\n")
    d = read_line3(path, uid_offset=10)
    assert d.num_c == 5 and d.students[0].uid == 10
    np.testing.assert_array_equal(d.students[0].q, [0, 4, 1])


def test_write_is_atomic(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("old")
    with pytest.raises(ValueError, match="problem ids"):
        write_line4(_toy(pid=False), path)
    assert path.read_text() == "old"  # a failed write leaves the old file intact
    write_line3(_toy(pid=False), path)
    assert [p.name for p in tmp_path.iterdir()] == ["d.csv"]  # no temp file left behind


# --- malformed input: file, line and value named ----------------------------------------------

LINE3_ERRORS = [
    ("", {}, 1, "empty file"),
    ("\n\n", {}, 1, "empty file"),
    ("2\n1,2\n0,1\n3\n1,2,3\n", {}, 4, "'3'"),  # truncated record
    ("3\n1,2\n0,1\n", {}, 2, "found 2 question ids"),  # header n vs ids
    ("2\n1,2\n0\n", {}, 3, "found 1 responses"),  # ids vs responses
    ("x\n1\n0\n", {}, 1, "'x'"),
    ("2\n1,2\n0,1\n2\n1,q7\n0,1\n", {}, 5, "'q7'"),
    ("2\n1,2\n0,1.0\n", {}, 3, "'1.0'"),
    ("2\n1,2\n0,1\n2\n3,4\n2,0\n", {}, 6, "response '2' not in {0, 1}"),
    ("2\n1,2\n0,3\n", {"K": 3}, 3, "response '3' not in {0, 1, 2}"),
    ("2\n1,0\n0,1\n", {}, 2, "question id '0'"),
    ("2\n1,6\n0,1\n", {"num_c": 5}, 2, "question id '6' is beyond the declared vocabulary num_c=5"),
]


@pytest.mark.parametrize(("text", "kw", "line", "value"), LINE3_ERRORS)
def test_line3_errors(tmp_path, text, kw, line, value):
    path = _write(tmp_path, "assist_train.csv", text)
    with pytest.raises(ValueError, match=rf"assist_train\.csv line {line}\b.*{re.escape(value)}"):
        read_line3(path, **kw)


LINE4_ERRORS = [
    ("2,u1\n1,2\n1,1\n0,1\n2\n1\n1\n0\n", {}, 6, "found 1 problem ids"),
    ("2\n1,9\n1,1\n0,1\n", {"num_pid": 8}, 2, "problem id '9'"),
    ("2\n1,2\n0,1\n0,1\n", {}, 3, "skill id '0'"),
    ("2\n1,2\n1,1\n0,-1\n", {}, 4, "response '-1'"),
    ("2\n1,2\n1,1\n", {}, 1, "truncated"),
]


@pytest.mark.parametrize(("text", "kw", "line", "value"), LINE4_ERRORS)
def test_line4_errors(tmp_path, text, kw, line, value):
    path = _write(tmp_path, "akt.csv", text)
    with pytest.raises(ValueError, match=rf"akt\.csv line {line}\b.*{re.escape(value)}"):
        read_line4(path, **kw)


PYKT_HEADER = "fold,uid,questions,concepts,responses,selectmasks\n"


def test_pykt_minimal_columns(tmp_path):
    _write(tmp_path, "test.csv", 'concepts,responses\n"0,2","1,0"\n')
    d = read_pykt(tmp_path / "test.csv")
    assert d.num_c == 3 and d.students[0].fold == -1 and d.meta == {}


def test_pykt_reads_pid_fold_and_drops_padding(tmp_path):
    _write(
        tmp_path,
        "train_valid.csv",
        PYKT_HEADER + '0,u7,"3,4,-1","1,2,-1","0,1,-1","1,1,-1"\n1,u8,"0","0","1","1"\n',
    )
    d = read_pykt(tmp_path, uid_offset=5)
    assert [len(s) for s in d.students] == [2, 1] and [s.fold for s in d.students] == [0, 1]
    np.testing.assert_array_equal(d.students[0].pid, [3, 4])
    assert d.num_c == 3 and d.num_pid == 5 and d.meta["raw_uid"] == {5: "u7", 6: "u8"}


PYKT_ERRORS = [
    ("", 1, "empty file"),
    ('0,u,"1,2","1,2","0,1","1,1"\n1,u,"1,2,3","1,2,3","0,1","1,1,1"\n', 3, "found 2 responses"),
    ('0,u,"1,2","1,a","0,1","1,1"\n', 2, "concepts 'a'"),
    ('0,u,"1,2","1,2","0,5","1,1"\n', 2, "response '5'"),
    ('0,u,"1,-2","1,2","0,1","1,1"\n', 2, "question id '-2'"),
]


@pytest.mark.parametrize(("rows", "line", "value"), PYKT_ERRORS)
def test_pykt_errors(tmp_path, rows, line, value):
    _write(tmp_path, "train_valid.csv", PYKT_HEADER + rows if rows else "")
    with pytest.raises(ValueError, match=rf"train_valid\.csv line {line}\b.*{re.escape(value)}"):
        read_pykt(tmp_path)


LOG = (
    "user,skill,problem,correct,order\n"
    "b,s2,p1,2,3\na,s1,p1,0,2\nb,s1,p2,1,1\na,s3,p3,1,1\nb,s1,p2,0,3\n"
)


def test_log_sorts_maps_and_infers_K(tmp_path):
    d = read_log(_write(tmp_path, "log.csv", LOG), problem="problem")
    assert (len(d), d.num_c, d.num_pid, d.K) == (2, 3, 3, 3)
    assert d.meta["skill_ids"] == ["s1", "s2", "s3"] and d.meta["raw_uid"] == {0: "a", 1: "b"}
    a, b = d.students
    np.testing.assert_array_equal(a.q, [2, 0])  # a sorted by order: s3 then s1
    np.testing.assert_array_equal(b.q, [0, 1, 0])  # tie at order 3 keeps the file order
    np.testing.assert_array_equal(b.r, [1, 2, 0])
    np.testing.assert_array_equal(b.pid, [1, 0, 1])


@pytest.mark.parametrize(
    ("text", "kw", "line", "value"),
    [
        ("user,skil,correct,order\na,s,1,1\n", {}, 1, "missing column(s) ['skill']"),
        ("user,skill,correct,order\na,s,1,1\na,s,yes,2\n", {}, 3, "correct 'yes'"),
        ("user,skill,correct,order\na,s,1,1\na,s,0.5,2\n", {}, 3, "correct '0.5'"),
        ("user,skill,correct,order\na,s,1,1\na,s,2,2\n", {"K": 2}, 3, "correct '2' not in {0, 1}"),
        ("user,skill,correct,order\na,s,1,1\n,s,0,2\n", {}, 3, "empty value in column 'user'"),
        ("", {}, 1, "empty file"),
    ],
)
def test_log_errors(tmp_path, text, kw, line, value):
    path = _write(tmp_path, "log.csv", text)
    with pytest.raises(ValueError, match=rf"log\.csv line {line}\b.*{re.escape(value)}"):
        read_log(path, **kw)


# --- chunking, collation, loader --------------------------------------------------------------


def test_chunk_keeps_every_interaction():
    d = _toy(20)
    d.students.append(StudentSeq(uid=99, q=np.zeros(450, np.int64), r=np.ones(450, np.int64)))
    windows = chunk(d, max_len=200)
    assert sum(w.stop - w.start for w in windows) == d.num_interactions
    assert [w.stop - w.start for w in windows if w.student == len(d) - 1] == [200, 200, 50]


def test_collate_pads_and_masks():
    d = _toy(3)
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
    d = _toy(30)

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
    d = _toy(50)
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
    d = _toy(23)
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


def _assert_bundle(b):
    uids = [set(x.uids.tolist()) for x in (b.train, b.valid, b.test)]
    assert sum(map(len, uids)) == len(set.union(*uids)), "uids must be unique across splits"
    assert len({(x.num_c, x.num_pid, x.K) for x in (b.train, b.valid, b.test)}) == 1


def test_bundle_line3_folder(tmp_path):
    d = _toy(20, pid=False)
    train, valid = kfold(d, k=2)[0]
    write_line3(d, tmp_path / "toy_train.csv")
    write_line3(train, tmp_path / "toy_train1.csv")
    write_line3(valid, tmp_path / "toy_valid1.csv")
    write_line3(_toy(6, seed=1, pid=False), tmp_path / "toy_test.csv")
    b = load_bundle(tmp_path, "line3", valid_frac=0.25, seed=1)
    assert (len(b.train), len(b.valid), len(b.test)) == (15, 5, 6) and b.fold is None
    assert "toy_train.csv" in b.protocol and b.data_format == "line3"
    _assert_bundle(b)
    b1 = load_bundle(tmp_path, "line3", fold=1)
    assert (len(b1.train), len(b1.valid)) == (len(train), len(valid))
    _assert_bundle(b1)
    with pytest.raises(FileNotFoundError, match=rf"{re.escape(str(tmp_path))}.*\*_train2\.csv"):
        load_bundle(tmp_path, "line3", fold=2)
    with pytest.raises(ValueError, match="unknown data_format"):
        load_bundle(tmp_path, "line5")


def test_bundle_log(tmp_path):
    rows = [f"u{i % 40},s{i % 7},{i % 2},{i}" for i in range(400)]
    path = _write(tmp_path, "log.csv", "user,skill,correct,order\n" + "\n".join(rows) + "\n")
    b = load_bundle(path, "log", seed=2)
    assert (len(b.train), len(b.valid), len(b.test)) == (28, 4, 8)
    _assert_bundle(b)


def test_bundle_synthetic():
    pytest.importorskip("kt_lib.data.synthetic")
    b = load_bundle(num_students=100, seed=0)
    assert (len(b.train), len(b.valid), len(b.test)) == (70, 10, 20)
    assert b.truth is not None and b.data_dir is None and b.data_format == "synthetic"
    _assert_bundle(b)


# --- the real datasets (MANIFEST.md figures) --------------------------------------------------

needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"{DATA} absent")


@needs_data
@pytest.mark.parametrize(
    ("path", "students", "interactions"),
    [
        ("assist2009/assist2009_updated_train.csv", 2921, 224_218),
        ("assist2009/assist2009_updated_test.csv", 1230, 101_419),
        ("statics2011/STATICS_train.csv", 229, 130_184),
        ("statics2011/STATICS_test.csv", 104, 59_113),
    ],
)
def test_real_line3_counts(path, students, interactions):
    d = read_line3(DATA / path)
    assert (len(d), d.num_interactions) == (students, interactions)


@needs_data
def test_real_assist2009_bundle():
    b = load_bundle(DATA / "assist2009", "line3")
    assert len(b.train) + len(b.valid) == 2921 and len(b.test) == 1230 and b.num_c == 110
    assert max(b.train.stats()["max_len"], b.valid.stats()["max_len"]) == 1261  # kept whole
    _assert_bundle(b)
    b3 = load_bundle(DATA / "statics2011", "line3", fold=3)
    assert len(b3.train) + len(b3.valid) == 229
    _assert_bundle(b3)


@needs_data
def test_real_pykt_assist2015():
    tv, test = read_pykt(DATA / "assist2015"), read_pykt(DATA / "assist2015", "test")
    assert (len(tv), tv.num_interactions) == (15_275, 544_339)
    assert (len(test), test.num_interactions) == (3818, 138_458)
    b = load_bundle(DATA / "assist2015", "pykt", fold=2)
    assert (len(b.train), len(b.valid), len(b.test)) == (12_220, 3055, 3818) and b.num_c == 100
    assert all(s.fold == 2 for s in b.valid.students)
    _assert_bundle(b)
