"""Per-student sequences, chunking into fixed windows, padding and collation to a `Batch`.

Conventions (the one place they are written down):
- ids are 0-based: `q` in [0, num_c), `pid` in [0, num_pid), `r` in [0, K).
- padded positions hold `PAD = 0` in every tensor and `mask = False`; models must never read them
  as evidence and metrics ignore them.
- `uid` is an integer that is unique inside one loaded bundle (train, valid and test together), so
  memory banks and reference models can recognise a student.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, fields, replace

import numpy as np
import pandas as pd
import torch

PAD = 0  # value stored at padded positions of q, r, pid (mask=False there)


def interaction_token(q: torch.Tensor, r: torch.Tensor, num_c: int) -> torch.Tensor:
    """Token of the pair (q, r): `q + num_c * r`, in [0, num_c * K)."""
    return q + num_c * r


def opens_question(uid, step, pid, q) -> np.ndarray:
    """[n] bool over rows in (student, step) order: False on a row that continues a question.

    Formats that expand a multi-skill problem into one row per skill (the 4-line format, pykt)
    put its rows at consecutive steps. Inside a run of consecutive rows of one problem, a skill
    seen again starts a new attempt ((P,a),(P,b),(P,a),(P,b) is two questions), so the n-th
    occurrence of a skill belongs to attempt n, and an attempt's first row opens it."""
    same_problem = (uid[1:] == uid[:-1]) & (step[1:] == step[:-1] + 1) & (pid[1:] == pid[:-1])
    run = np.cumsum(np.concatenate([[True], ~same_problem]))  # id of each run of one problem
    rows = pd.DataFrame({"run": run, "q": q})
    rows["attempt"] = rows.groupby(["run", "q"]).cumcount()  # n-th time this skill in the run
    return ~rows.duplicated(["run", "attempt"]).to_numpy()


@dataclass
class StudentSeq:
    """One student's full interaction log (never truncated)."""

    uid: int  # unique integer id inside a bundle
    q: np.ndarray  # [n] int64 concept ids
    r: np.ndarray  # [n] int64 responses in [0, K)
    pid: np.ndarray | None = None  # [n] int64 problem ids, or None
    fold: int = -1  # fold read from the file (-1: none / test)

    def __len__(self) -> int:
        return len(self.q)


@dataclass
class KTDataset:
    """A set of students with their vocabulary sizes."""

    students: list[StudentSeq]
    num_c: int  # number of concepts/skills
    num_pid: int = 0  # number of problems (0: the data has no problem ids)
    K: int = 2  # response categories (2: binary)
    name: str = "dataset"
    source: str = ""  # file(s) the data came from
    meta: dict = field(default_factory=dict)  # raw-id mappings etc. (e.g. "raw_uid", "skill_ids")

    def __len__(self) -> int:
        return len(self.students)

    @property
    def num_interactions(self) -> int:
        return int(sum(len(s) for s in self.students))

    def problem_copies(self) -> int:
        """The further rows of a multi-skill problem expanded into one row per skill (0 without
        problem ids): the rows `opens_question` finds continuing a question, copies of its
        (pid, r) to a model that reads problems only."""
        seqs = [s for s in self.students if s.pid is not None and len(s) > 1]
        if not seqs:
            return 0
        uid = np.repeat(np.arange(len(seqs)), [len(s) for s in seqs])
        step = np.concatenate([np.arange(len(s)) for s in seqs])
        pid, q = (np.concatenate([getattr(s, k) for s in seqs]) for k in ("pid", "q"))
        return int((~opens_question(uid, step, pid, q)).sum())

    def repeats(self) -> dict[str, float]:
        """How blocked the logs are, over every step but a student's first: `same_skill`, the
        share whose skill is the previous step's; `same_response`, the share of those whose
        response is the previous step's too (skill-builder logs: ASSIST2009's test file 0.55
        and 0.67; Statics2011's 0.001). nan where no student has two steps."""
        pairs = [(s.q[1:] == s.q[:-1], s.r[1:] == s.r[:-1]) for s in self.students if len(s) > 1]
        if not pairs:
            return {"same_skill": float("nan"), "same_response": float("nan")}
        skill = np.concatenate([p[0] for p in pairs])
        both = np.concatenate([p[0] & p[1] for p in pairs])
        rate = both.sum() / skill.sum() if skill.any() else float("nan")
        return {"same_skill": float(skill.mean()), "same_response": float(rate)}

    def warn_problem_copies(self, model: str, why: str) -> None:
        """A UserWarning naming `model` where `problem_copies` finds any (`why`: pyKT's way)."""
        copies = self.problem_copies()
        if copies:
            warnings.warn(
                f"{model}: {copies} of {self.num_interactions} training rows of {self.name} "
                "repeat the previous row's problem and response under another skill "
                f"(multi-skill problems expanded into rows); {why}",
                UserWarning,
                stacklevel=3,
            )

    @property
    def uids(self) -> np.ndarray:
        return np.array([s.uid for s in self.students], dtype=np.int64)

    @property
    def has_pid(self) -> bool:
        return self.num_pid > 0 and all(s.pid is not None for s in self.students)

    def subset(self, index, name: str | None = None) -> KTDataset:
        """Students at the given positions, same vocabulary."""
        return replace(
            self, students=[self.students[int(i)] for i in index], name=name or self.name
        )

    def stats(self) -> dict:
        """Counts a researcher reads first (students, interactions, lengths, correctness)."""
        lengths = np.array([len(s) for s in self.students])
        r = np.concatenate([s.r for s in self.students]) if self.students else np.zeros(0)
        return {
            "name": self.name,
            "students": len(self.students),
            "interactions": int(lengths.sum()),
            "num_c": self.num_c,
            "num_pid": self.num_pid,
            "K": self.K,
            "mean_len": float(lengths.mean()) if len(lengths) else 0.0,
            "max_len": int(lengths.max()) if len(lengths) else 0,
            "mean_response": float(r.mean() / max(self.K - 1, 1)) if len(r) else 0.0,
        }


@dataclass
class Batch:
    """Padded tensors `[B, L]` for one mini-batch."""

    q: torch.Tensor  # [B, L] long, concept ids
    r: torch.Tensor  # [B, L] long, responses
    mask: torch.Tensor  # [B, L] bool, True on real interactions
    pid: torch.Tensor | None = None  # [B, L] long problem ids, or None
    uid: torch.Tensor | None = None  # [B] long student ids
    start: torch.Tensor | None = None  # [B] long offset of the window inside the student's log
    extras: dict = field(default_factory=dict)  # per-batch tensors added by references/banks

    def to(self, device, non_blocking: bool = False) -> Batch:
        """A copy on `device`. Towards CUDA with `non_blocking`, CPU tensors are pinned first
        so the copies overlap with the GPU's work instead of waiting for it."""
        pin = non_blocking and torch.device(device).type == "cuda"

        def move(t):
            if not isinstance(t, torch.Tensor):
                return t
            if pin and t.device.type == "cpu":
                t = t.pin_memory()
            return t.to(device, non_blocking=non_blocking)

        moved = {}
        for f in fields(self):
            v = getattr(self, f.name)
            moved[f.name] = {k: move(t) for k, t in v.items()} if f.name == "extras" else move(v)
        return Batch(**moved)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.q.shape)

    def clone(self) -> Batch:
        return Batch(
            q=self.q.clone(),
            r=self.r.clone(),
            mask=self.mask.clone(),
            pid=None if self.pid is None else self.pid.clone(),
            uid=None if self.uid is None else self.uid.clone(),
            start=None if self.start is None else self.start.clone(),
            extras=dict(self.extras),
        )


@dataclass
class Window:
    """A slice `[start, start + len)` of one student's log."""

    student: int  # index into KTDataset.students
    start: int
    stop: int
    context: int = (
        0  # leading steps given as history only: evaluation scores [start + context, stop)
    )


def chunk(dataset: KTDataset, max_len: int, min_len: int = 1) -> list[Window]:
    """Cut every log into consecutive windows of at most `max_len` steps; nothing is dropped.

    `min_len` only skips whole students shorter than it (default 1 keeps everyone).
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    windows = []
    for i, s in enumerate(dataset.students):
        n = len(s)
        if n < min_len:
            continue
        for start in range(0, n, max_len):
            windows.append(Window(i, start, min(start + max_len, n)))
    return windows


def sliding(dataset: KTDataset, max_len: int, stride: int = 1) -> list[Window]:
    """Evaluation windows in which each step is predicted from the `max_len - 1` steps before it
    (fewer only at the start of a log), instead of from the start of its `chunk` window.

    A student's window k ends at `e_k = min(max_len + k * stride, n)`, covers
    `[max(e_k - max_len, 0), e_k)` and scores the steps after the previous window's end, so every
    step is scored once. stride 1 is exact; a larger stride costs `stride` times fewer windows and
    gives each scored step between `max_len - stride` and `max_len - 1` steps of history. A log of
    at most `max_len` steps is one window, as in `chunk`.
    """
    if max_len < 1 or stride < 1:
        raise ValueError(f"max_len and stride must be >= 1, got {max_len} and {stride}")
    if stride > max_len:  # the steps between one window's end and the next one's start
        raise ValueError(f"stride {stride} > max_len {max_len} would leave steps unscored")
    windows = []
    for i, s in enumerate(dataset.students):
        n = len(s)
        if n == 0:
            continue
        ends = np.append(np.arange(max_len, n, stride), n)
        starts = np.maximum(ends - max_len, 0)
        scored = np.concatenate([[0], ends[:-1]])
        windows += [
            Window(i, int(a), int(e), int(c - a))
            for a, e, c in zip(starts, ends, scored, strict=True)
        ]
    return windows


def collate(dataset: KTDataset, windows: list[Window], pad_to: int | None = None) -> Batch:
    """Stack windows into a padded `Batch` (right padding with PAD, mask False)."""
    L = pad_to or max(w.stop - w.start for w in windows)
    B = len(windows)
    q = np.full((B, L), PAD, dtype=np.int64)
    r = np.full((B, L), PAD, dtype=np.int64)
    mask = np.zeros((B, L), dtype=bool)
    use_pid = dataset.has_pid
    pid = np.full((B, L), PAD, dtype=np.int64) if use_pid else None
    uid = np.empty(B, dtype=np.int64)
    start = np.empty(B, dtype=np.int64)
    for b, w in enumerate(windows):
        s = dataset.students[w.student]
        n = w.stop - w.start
        q[b, :n] = s.q[w.start : w.stop]
        r[b, :n] = s.r[w.start : w.stop]
        mask[b, :n] = True
        if use_pid:
            pid[b, :n] = s.pid[w.start : w.stop]
        uid[b] = s.uid
        start[b] = w.start
    return Batch(
        q=torch.from_numpy(q),
        r=torch.from_numpy(r),
        mask=torch.from_numpy(mask),
        pid=None if pid is None else torch.from_numpy(pid),
        uid=torch.from_numpy(uid),
        start=torch.from_numpy(start),
    )


class BatchLoader:
    """Iterates `Batch`es over the windows of a dataset; seeded shuffling, deterministic order.

    `bucket` (with `shuffle`) batches windows of similar length together: the shuffled windows
    are cut into pools of `bucket * batch_size`, each pool is sorted by length (stable) and cut
    into batches of about `batch_size * mean window length` interactions (so a batch of short
    windows holds more of them), and the batches of a pool are shuffled. Every step then sees
    about as many interactions as a plainly shuffled batch does on average, so each interaction
    keeps its weight in the loss, while the padding that a batch's longest window forces on the
    others mostly disappears: on ASSIST2009 (median window 28 of 200 steps) a training epoch
    does about a third of the padded work. With equal-length windows the batches are exactly
    those of plain shuffling.
    """

    def __init__(
        self,
        dataset: KTDataset,
        batch_size: int = 64,
        max_len: int = 200,
        shuffle: bool = False,
        seed: int = 0,
        bucket: int = 0,
    ):
        if bucket < 0:
            raise ValueError(f"bucket must be >= 0 (batches per length pool), got {bucket}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.max_len = max_len
        self.shuffle = shuffle
        self.seed = seed
        self.bucket = bucket
        self.epoch = 0
        self.windows = chunk(dataset, max_len)
        self.lengths = np.array([w.stop - w.start for w in self.windows], dtype=np.int64)

    def __len__(self) -> int:
        if self.shuffle and self.bucket:
            return len(self.batches())
        return (len(self.windows) + self.batch_size - 1) // self.batch_size

    def set_epoch(self, epoch: int) -> None:
        """Shuffle order depends on (seed, epoch) only, so resumed runs see the same batches."""
        self.epoch = epoch

    def batches(self) -> list[np.ndarray]:
        """Window indices of each batch of this epoch."""
        order = np.arange(len(self.windows))
        rng = np.random.default_rng([self.seed, self.epoch])
        if self.shuffle:
            rng.shuffle(order)
        bs = self.batch_size
        if not (self.shuffle and self.bucket):
            return [order[i : i + bs] for i in range(0, len(order), bs)]
        out: list[np.ndarray] = []
        pool = bs * self.bucket
        budget = bs * float(self.lengths.mean())  # interactions in an average plain batch
        for p in range(0, len(order), pool):
            idx = order[p : p + pool]
            lens = self.lengths[idx]
            if lens.min() == lens.max():  # nothing to gain: keep plain shuffled batches
                out.extend(idx[i : i + bs] for i in range(0, len(idx), bs))
                continue
            by_len = np.argsort(lens, kind="stable")
            idx, lens = idx[by_len], lens[by_len]
            slot = (np.cumsum(lens) - 1) // budget  # batch of each window: where its tokens end
            cuts = np.flatnonzero(np.diff(slot)) + 1
            group = np.split(idx, cuts)
            out.extend(group[j] for j in rng.permutation(len(group)))
        return out

    def __iter__(self) -> Iterator[Batch]:
        for idx in self.batches():
            yield collate(self.dataset, [self.windows[j] for j in idx])
