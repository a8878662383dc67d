"""EdNet-KT1: one CSV per user (`KT1/u{id}.csv`: timestamp, solving_id, question_id, user_answer,
elapsed_time) and the answer key `contents/questions.csv` (question_id, correct_answer, tags), as
pykt-toolkit reads them (`ednet_preprocess.py`).

A response is correct when `user_answer` equals the question's `correct_answer`; the skills are the
question's `;`-joined tags. Dropped: rows without an answer, time or elapsed time, and rows whose
question is not in the answer key or has the tag `-1`. Order: `timestamp`, ties by the row's place.
Students: every file, by numeric id; `max_users=N` takes the first N users of pykt's sample order
(Python's `random.Random(2)` shuffle of 0..840472; N=5000 is pykt's `ednet`).

Ordinal option (K=3), from the answers and their times: 0 = wrong; 1 = right, slower than the
question's median `elapsed_time`; 2 = right within that median. The medians are taken after the
split, over the rows of the train/valid students only (students kept by min_seq_len), so the test
students' times move no label; a question no train/valid student answered takes the median of all
their rows. The five folds share these medians (a fold's validation students count in them).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .common import count_skipped, table_input
from .core import RawInput, RawLog
from .raw import Drops, read_table, sha256

ORDINAL_K = 3
PYKT_ID_RANGE = 840473  # pykt shuffles range(840473) with random.seed(2)
_USER_FILE = re.compile(r"u(\d+)\.csv")
_COLUMNS = ["timestamp", "question_id", "user_answer", "elapsed_time"]


def _user_files(raw_path: Path) -> dict[int, Path]:
    d = raw_path / "KT1" if (raw_path / "KT1").is_dir() else raw_path
    files = {int(m.group(1)): p for p in d.glob("u*.csv") if (m := _USER_FILE.fullmatch(p.name))}
    if not files:
        raise FileNotFoundError(f"{d}: no EdNet-KT1 user files u{{id}}.csv")
    return files


def _answer_key(raw_path: Path) -> Path:
    for p in (
        raw_path / "contents" / "questions.csv",
        raw_path / "questions.csv",
        raw_path.parent / "contents" / "questions.csv",
    ):
        if p.is_file():
            return p
    raise FileNotFoundError(f"{raw_path}: no contents/questions.csv (the EdNet answer key)")


def pick_users(ids, max_users: int | None) -> list[int]:
    """All ids sorted, or the first `max_users` present in pykt's shuffled order."""
    if max_users is None:
        return sorted(ids)
    order = list(range(PYKT_ID_RANGE))
    random.Random(2).shuffle(order)
    present = set(ids)
    return [u for u in order if u in present][:max_users]


def ordinal(log: pd.DataFrame, train: np.ndarray) -> np.ndarray:
    """K=3 responses of `log` (module doc); medians over the rows where `train` is True."""
    usetime, problem = log["usetime"], log["problem"]
    median = usetime[train].groupby(problem[train]).median()
    limit = problem.map(median).fillna(usetime[train].median())
    fast = (usetime <= limit).to_numpy()
    return np.where(log["response"].to_numpy() == 1, np.where(fast, 2, 1), 0)


def read(raw_path: Path, opts) -> RawLog:
    if raw_path.is_file():
        raise ValueError(f"{raw_path}: EdNet-KT1 is a folder (KT1/u*.csv + contents/questions.csv)")
    files = _user_files(raw_path)
    key_table = read_table(_answer_key(raw_path), ["question_id", "correct_answer", "tags"])
    key = key_table.frame
    tagged = key[key["tags"].notna() & (key["tags"].str.strip() != "-1")]
    answer = dict(zip(tagged["question_id"], tagged["correct_answer"], strict=True))
    tags = dict(zip(tagged["question_id"], tagged["tags"], strict=True))
    users = pick_users(files, opts.max_users)
    frames, digests, encodings, inputs_bytes, rows_read, skipped = [], [], set(), 0, 0, 0
    drops = Drops()
    for u in tqdm(users, desc="EdNet-KT1 users", unit="file", disable=len(users) < 1000):
        path = files[u]
        data = path.read_bytes()
        inputs_bytes += len(data)
        digests.append(f"{path.name} {sha256(data)}")
        t = read_table(path, _COLUMNS, data=data, allow_empty=True)
        f = t.frame
        encodings.add(t.encoding)
        rows_read += count_skipped(drops, t)
        skipped += t.skipped
        time, elapsed = t.numbers("timestamp"), t.numbers("elapsed_time")
        f = drops.missing(f, ["user_answer"], "no answer")
        f = drops.missing(f, ["timestamp", "elapsed_time"])
        known = f["question_id"].isin(answer)
        f = drops.apply(f, ~known, "question not in the answer key or tagged -1")
        frames.append(
            pd.DataFrame(
                {
                    "user": str(u),
                    "problem": f["question_id"],
                    "skill": f["question_id"].map(tags),
                    "response": (f["user_answer"] == f["question_id"].map(answer)).astype(np.int64),
                    "time": time.loc[f.index],
                    "timestamp": time.loc[f.index].astype(np.int64),
                    "usetime": elapsed.loc[f.index].astype(np.int64),
                }
            )
        )
    log = pd.concat(frames, ignore_index=True)
    choices = {
        "columns": {
            "student": "the file's u{id}",
            "problem": "question_id",
            "skill": "tags of contents/questions.csv",
            "response": "user_answer == correct_answer",
            "order": "timestamp",
        },
        "dropped rows": "no user_answer, missing timestamp/elapsed_time, question not in the "
        "answer key or tagged -1",
        "users": "all files by id"
        if opts.max_users is None
        else f"first {opts.max_users} of pykt's random.Random(2) order",
    }
    if opts.ordinal:
        choices["ordinal"] = (
            f"K={ORDINAL_K}: 0 wrong, 1 right but slower than the question's median "
            "elapsed_time, 2 right within it; medians over the train/valid students' rows only "
            "(all folds), a question none of them answered: the median of all their rows"
        )
    digest = sha256("\n".join(sorted(digests)).encode())
    inputs = [
        table_input(key_table),
        # one digest for many files: SHA-256 of the sorted lines "u{id}.csv <sha256>"
        RawInput(
            f"{files[users[0]].parent}/u*.csv ({len(users)} files)",
            digest,
            inputs_bytes,
            "/".join(sorted(encodings)),
            skipped,
        ),
    ]
    return RawLog(
        log,
        rows_read,
        drops.counts,
        inputs,
        choices,
        skill_sep=";",
        K=ORDINAL_K if opts.ordinal else 2,
        relabel=ordinal if opts.ordinal else None,
    )
