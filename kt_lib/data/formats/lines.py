"""The 3/4-line layouts (DKVMN 3-line, AKT/DTransformer 4-line): records, readers and writers.

A record's first line is its length or (AKT's folds) an identifier line; ids are 1-based or
(DTransformer) 0-based. Readers return a `KTDataset` with 0-based ids; malformed input raises
ValueError naming the file, the 1-based line and the offending value.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ...fileio import atomic_write_text
from ..dataset import KTDataset
from .tokens import (
    _INT,
    PathLike,
    _check_ids,
    _check_K,
    _check_responses,
    _int_problem,
    _nonempty,
    _read_lines,
    _students,
    _to_ints,
    _Where,
)

_HEADERS = ("auto", "length", "id")  # how the first line of a record reads


def _count_fields(s: str) -> int:
    """Number of comma-separated values on a line (a trailing comma adds none; blank: 0)."""
    s = s.strip().removesuffix(",")
    return s.count(",") + 1 if s else 0


class _Heads(NamedTuple):
    """The header line of each R-line record, as the header detection sees it."""

    is_len: np.ndarray  # [m] bool: its first field is the number of values on the next line
    id_like: np.ndarray  # [m] bool: it is a list of >= 2 integers (AKT's `index,student_id`)
    even: np.ndarray  # [m] bool: the record's value lines hold equally many values


def _heads(lines: list[str], R: int) -> _Heads:
    """Per-record header facts of `lines` cut into records of R lines (missing lines: empty)."""
    m = -(-len(lines) // R)
    counts = np.zeros(m * R, dtype=np.int64)
    counts[: len(lines)] = [_count_fields(s) for s in lines]
    counts = counts.reshape(m, R)  # [m, R]
    heads = [h.strip().removesuffix(",").split(",") for h in lines[::R]]
    is_len = [
        _INT.fullmatch(h[0]) is not None and int(h[0]) == c
        for h, c in zip(heads, counts[:, 1].tolist(), strict=True)
    ]
    id_like = [len(h) >= 2 and all(_INT.fullmatch(x) for x in h) for h in heads]
    even = (counts[:, 1:] == counts[:, 1:2]).all(axis=1)
    return _Heads(np.array(is_len, dtype=bool), np.array(id_like, dtype=bool), even)


def _header_kind(h: _Heads) -> str | None:
    """'length' if every header starts with its record's length; 'id' if every header is a list
    of integers and fewer than half start with that length (a few may by chance); else None."""
    if h.is_len.all():
        return "length"
    if h.id_like.all() and 2 * int(h.is_len.sum()) < len(h.is_len):
        return "id"
    return None


def _header_mode(lines: list[str], R: int, header: str) -> str:
    """'length' or 'id' for one file; auto falls back to 'length' so that the reader names the
    first record whose header disagrees with its values."""
    if header not in _HEADERS:
        raise ValueError(f"header must be one of {list(_HEADERS)}, got {header!r}")
    if header != "auto":
        return header
    return _header_kind(_heads(lines, R)) or "length"


def _content_end(lines: list[str]) -> int:
    """Number of lines before the trailing blank ones (which are harmless)."""
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return end


class _Records(NamedTuple):
    """Records of a multi-line file, each field flattened over all students."""

    path: Path
    header: str  # "length" or "id": how the first line of each record was read
    raw_uid: list[str]  # id line: the whole line; length line: the fields after n
    flat: list[np.ndarray]  # one int64 array per field; all but the last are ids
    offsets: np.ndarray  # [n_records + 1] start of each record in the flat arrays
    header_lines: np.ndarray  # [n_records] 1-based line of each header

    def where(self, j: int) -> _Where:
        return _Where(self.path, self.header_lines + 1 + j, self.offsets)

    def check(self, j: int, what: str, base: int, vocab: int | None, vocab_name: str) -> None:
        _check_ids(self.flat[j], self.where(j), what, base, vocab, vocab_name)

    def check_responses(self, j: int, K: int) -> None:
        _check_responses(self.flat[j], self.where(j), K)

    def split(self, j: int, base: int = 0) -> list[np.ndarray]:
        return np.split(self.flat[j] - base, self.offsets[1:-1])

    def nonempty(self) -> np.ndarray:
        return _nonempty(self.path, np.diff(self.offsets), self.header_lines)

    def has_zero_id(self) -> bool:
        return any((v == 0).any() for v in self.flat[:-1])

    def meta(self, keep: np.ndarray, uid_offset: int) -> dict:
        """`raw_uid` of the kept students when the headers carry one."""
        if not any(self.raw_uid):
            return {}
        return {"raw_uid": {uid_offset + j: self.raw_uid[i] for j, i in enumerate(keep.tolist())}}


def _read_records(path: PathLike, fields: Sequence[str], header: str = "length") -> _Records:
    """Parse records of one header line followed by one line of `n` ints per field.

    The header is the length `n[,...]` or an identifier line (then `n` is the count of the next
    line); `header="auto"` tells them apart for the whole file (`_header_kind`). A record with
    n=0 has empty field lines; at the end of the file they may be missing.
    """
    path = Path(path)
    lines = _read_lines(path)
    R = 1 + len(fields)
    end = _content_end(lines)
    if not end:
        raise ValueError(f"{path} line 1: empty file, expected records of {R} lines")
    mode = _header_mode(lines[:end], R, header)
    hint = ""
    if header == "auto" and mode == "length":
        hint = " (if each record starts with an identifier line, not its length, pass header='id')"
    raw: list[str] = []
    counts: list[int] = []
    tokens: list[list[str]] = [[] for _ in fields]
    for h in range(0, end, R):  # h: index of a header line
        if not lines[h].strip():
            what = "the length n" if mode == "length" else "an identifier line"
            raise ValueError(
                f"{path} line {h + 1}: blank line where a record header ({what}) belongs"
            )
        body = lines[h + 1 : h + R]
        if mode == "id":
            n = _count_fields(body[0]) if body else 0
            raw.append(lines[h].strip().rstrip(",").strip())
            says = f"line {h + 2} has {n} {fields[0]}s"
        else:
            head, _, extra = lines[h].partition(",")
            if problem := _int_problem(head):
                raise ValueError(f"{path} line {h + 1}: sequence length {head!r} {problem}")
            n = int(head)
            if n < 0:
                raise ValueError(f"{path} line {h + 1}: sequence length '{n}' is negative")
            raw.append(extra.strip().rstrip(",").strip())
            says = f"header line {h + 1} says n={n}{hint}"
        if len(body) < R - 1 and n:
            raise ValueError(
                f"{path} line {h + 1}: truncated record: the file ends after {1 + len(body)} of "
                f"{R} lines (header {lines[h]!r})"
            )
        body += [""] * (R - 1 - len(body))
        for j, what in enumerate(fields):
            s = body[j].strip().removesuffix(",")
            toks = s.split(",") if s else []
            if len(toks) != n:
                raise ValueError(f"{path} line {h + 2 + j}: found {len(toks)} {what}s, but {says}")
            tokens[j].extend(toks)
        counts.append(n)
    offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    header_lines = np.arange(len(counts), dtype=np.int64) * R + 1
    flat = [
        _to_ints(tokens[j], _Where(path, header_lines + 1 + j, offsets), what)
        for j, what in enumerate(fields)
    ]
    return _Records(path, mode, raw, flat, offsets, header_lines)


def _vocab(declared: int | None, ids: np.ndarray) -> int:
    """Declared vocabulary size, else max 0-based id + 1."""
    if declared is not None:
        return int(declared)
    return int(ids.max()) + 1 if len(ids) else 0


def _id_base(one_based: bool | None, recs: Sequence[_Records]) -> int:
    """1 or 0: the declared base, else 0 when some id of the files (all together) is 0."""
    if one_based is not None:
        return int(bool(one_based))
    return 0 if any(r.has_zero_id() for r in recs) else 1


_LINE_FIELDS = {
    "line3": ("question id", "response"),
    "line4": ("problem id", "skill id", "response"),
}


def _line_dataset(
    rec: _Records,
    base: int,
    uid_offset: int = 0,
    num_c: int | None = None,
    num_pid: int | None = None,
    K: int = 2,
    name: str | None = None,
    notes: dict[str, str] | None = None,
) -> KTDataset:
    """A 3-line (question ids, responses) or 4-line (problem ids, skill ids, responses) file's
    records as a dataset; `notes` say where a declared size came from."""
    _check_K(K)
    notes = notes or {}
    has_pid = len(rec.flat) == 3
    if not has_pid and num_pid is not None:
        raise TypeError(f"{rec.path}: num_pid is for 4-line files (problem ids); this has none")
    q = 1 if has_pid else 0  # field of the skill/question ids
    if has_pid:
        rec.check(0, "problem id", base, num_pid, f"num_pid={num_pid}{notes.get('num_pid', '')}")
    what = "skill id" if has_pid else "question id"
    rec.check(q, what, base, num_c, f"num_c={num_c}{notes.get('num_c', '')}")
    rec.check_responses(q + 1, K)
    keep = rec.nonempty()
    pid = rec.split(0, base) if has_pid else None
    return KTDataset(
        _students(keep, uid_offset, rec.split(q, base), rec.split(q + 1), pid),
        num_c=_vocab(num_c, rec.flat[q] - base),
        num_pid=_vocab(num_pid, rec.flat[0] - base) if has_pid else 0,
        K=K,
        name=name or rec.path.stem,
        source=str(rec.path),
        meta=rec.meta(keep, uid_offset),
    )


def read_line3(
    path: PathLike,
    num_c: int | None = None,
    K: int = 2,
    one_based: bool | None = True,
    uid_offset: int = 0,
    name: str | None = None,
    header: str = "auto",
) -> KTDataset:
    """Read the DKVMN 3-line format (n / question ids / responses per student).

    `header`: "length" (the first line of a record is `n[,...]`), "id" (an identifier line, kept
    in `meta["raw_uid"]`) or "auto" (told apart for the file). `one_based=None`: 0-based when
    some id is 0, else 1-based.
    """
    _check_K(K)
    rec = _read_records(path, _LINE_FIELDS["line3"], header)
    return _line_dataset(rec, _id_base(one_based, [rec]), uid_offset, num_c, None, K, name)


def read_line4(
    path: PathLike,
    num_c: int | None = None,
    num_pid: int | None = None,
    K: int = 2,
    one_based: bool | None = True,
    uid_offset: int = 0,
    name: str | None = None,
    header: str = "auto",
) -> KTDataset:
    """Read the AKT/DTransformer 4-line format (header / problem ids / skill ids / responses).

    The header is `n[,user_id]` or, in AKT's published folds, an identifier line `index,user_id`
    (`header` and `one_based` as in `read_line3`); the raw id is kept in `meta["raw_uid"]`.
    """
    _check_K(K)
    rec = _read_records(path, _LINE_FIELDS["line4"], header)
    return _line_dataset(rec, _id_base(one_based, [rec]), uid_offset, num_c, num_pid, K, name)


def _join(a: np.ndarray) -> str:
    return ",".join(map(str, a.tolist()))


def write_line3(dataset: KTDataset, path: PathLike, one_based: bool = True) -> None:
    """Write the 3-line format, 1-based question ids unless `one_based=False` (atomic); a
    student's raw id (`meta["raw_uid"]`, as the readers keep it) follows its length, `n,raw_uid`."""
    raw = dataset.meta.get("raw_uid", {})
    b = int(one_based)
    out = []
    for s in dataset.students:
        head = f"{len(s)},{raw[s.uid]}" if s.uid in raw else str(len(s))
        out += [head, _join(s.q + b), _join(s.r)]
    atomic_write_text(path, "\n".join(out) + "\n")


def write_line4(dataset: KTDataset, path: PathLike, one_based: bool = True) -> None:
    """Write the 4-line format `n,user_id` / pids / skills / responses, 1-based ids unless
    `one_based=False` (atomic)."""
    if not dataset.has_pid:
        raise ValueError(f"{dataset.name}: the 4-line format needs problem ids on every student")
    raw = dataset.meta.get("raw_uid", {})
    b = int(one_based)
    out = []
    for s in dataset.students:
        out += [f"{len(s)},{raw.get(s.uid, s.uid)}", _join(s.pid + b), _join(s.q + b), _join(s.r)]
    atomic_write_text(path, "\n".join(out) + "\n")
