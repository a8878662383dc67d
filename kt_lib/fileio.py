"""File I/O and hashing that every layer may import (it imports nothing from kt_lib but config).

Atomic writes (temp file in the same folder, fsync, then os.replace, with the mode a plain
open() would give), JSON and tensor files without pickle (torch.load with weights_only=True),
SHA-256 of bytes, and verified pairs: a `.pt` and a `.json` whose `pt_sha256` records the `.pt`
bytes (model checkpoints and memory-bank files alike). While a new `.pt` replaces an old one, the
old stays reachable as `<prefix>.prev.pt`, so a reader finds a whole pair after a kill at any
instant. Unreadable files raise ValueError naming the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import stat
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .config import parse_json


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def short_digest(data: str | bytes, n: int = 10) -> str:
    """The first `n` hex digits of SHA-1: a short name for a settings blob (run keys, trial
    checkpoints, storages), not a security digest."""
    return hashlib.sha1(data.encode() if isinstance(data, str) else data).hexdigest()[:n]


def new_file_mode(path: Path) -> int:
    """The mode `open(path, "w")` leaves: the existing file's, else 0o666 minus the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        pass
    mask = os.umask(0o077)  # the umask can only be read by setting it; restore it at once
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_bytes(path: str | Path, write) -> None:
    """Call `write(fileobj)` on a temp file next to `path`, then rename it into place.

    mkstemp creates the temp file 0600; it gets `new_file_mode(path)` before the rename.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = new_file_mode(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """`text` as UTF-8 with "\n" line ends, written atomically (`atomic_write_bytes`)."""
    atomic_write_bytes(path, lambda f: f.write(text.encode("utf-8")))


def read_bytes(path: Path) -> bytes:
    """The file's bytes; read errors other than a missing file become ValueError naming it."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the file ({exc.strerror or exc})") from exc


def torch_load_bytes(data: bytes, path: Path, map_location) -> dict[str, Any]:
    """torch.load (weights_only) of `data`, read from `path`; damaged data -> ValueError."""
    try:
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as exc:  # EOFError, UnpicklingError, RuntimeError, KeyError, IndexError, ...
        # the first sentence of torch's reason, not its advice to retry with weights_only=False
        reason = str(exc).split("WeightsUnpickler error:")[-1].strip().split("\n\n")[0]
        reason = " ".join(reason.split()).split(". ")[0].rstrip(".") or "empty or truncated file"
        raise ValueError(
            f"{path}: not a loadable tensor checkpoint ({type(exc).__name__}: {reason}); the "
            "file is truncated, corrupted, or was not written by kt_lib"
        ) from exc


def tensor_bytes(tensors: dict[str, Any]) -> bytes:
    """The torch.save bytes of a (nested) dict of tensors/numbers."""
    buf = io.BytesIO()
    torch.save(tensors, buf)
    return buf.getvalue()


def save_tensors(path: str | Path, tensors: dict[str, Any]) -> None:
    """Save a (nested) dict of tensors/numbers atomically."""
    atomic_write_bytes(path, lambda f: torch.save(tensors, f))


def load_tensors(path: str | Path, map_location="cpu") -> dict[str, Any]:
    path = Path(path)
    return torch_load_bytes(read_bytes(path), path, map_location)


def save_json(path: str | Path, obj: dict) -> None:
    atomic_write_bytes(path, lambda f: f.write(json.dumps(obj, indent=2, default=str).encode()))


def load_json(path: str | Path) -> dict:
    """A JSON object from `path`; unreadable or invalid files raise ValueError naming it."""
    path = Path(path)
    try:
        text = read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON (not UTF-8 text: {exc.reason})") from exc
    data = parse_json(text, path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


# -- verified pairs: <prefix>.pt + <prefix>.json naming the .pt's SHA-256 ----------------------


def previous_path(path: str | Path) -> Path:
    """`<prefix>.prev.pt`: the `.pt` the current `.json` names while a new pair is written."""
    pt = Path(path).with_suffix(".pt")
    return pt.with_name(pt.stem + ".prev.pt")


def keep_copy(src: Path, dst: Path) -> None:
    """`dst` becomes a hard link to (or, where links fail, a copy of) `src`, atomically."""
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def write_pair(path: str | Path, data: bytes, meta: dict) -> None:
    """Write `data` to `<path>.pt`, then `meta` + `pt_sha256` to `<path>.json` (the commit point),
    so that a kill at any instant leaves a whole pair: the `.pt` the `.json` names stays reachable
    as `<prefix>.prev.pt` until the new `.json` is written. A `.pt` left by an earlier killed save
    (one the `.json` does not name) is not kept: the `.prev.pt` the `.json` names stays."""
    path = Path(path)
    pt, js, prev = path.with_suffix(".pt"), path.with_suffix(".json"), previous_path(path)
    if pt.exists() and _named_by_json(pt, js):
        keep_copy(pt, prev)
    atomic_write_bytes(pt, lambda f: f.write(data))
    save_json(js, {**meta, "pt_sha256": sha256_bytes(data)})
    prev.unlink(missing_ok=True)


def _named_by_json(pt: Path, js: Path) -> bool:
    """Whether `js` names these `pt` bytes (or records no hash: a pair from before hashes)."""
    try:
        expected = load_json(js).get("pt_sha256")
    except (OSError, ValueError):
        return False
    return expected is None or sha256_bytes(read_bytes(pt)) == expected


def read_pair(path: str | Path, map_location="cpu") -> tuple[dict, dict[str, Any]]:
    """(meta, tensors) of a `.pt`/`.json` pair, after checking the `.pt` against the `.json`.

    Raises ValueError naming both files when the `.pt` bytes do not have the SHA-256 the `.json`
    records (a save killed between its `.pt` and `.json` reads the kept `<prefix>.prev.pt`).
    Pairs written before the hash was recorded load with a warning.
    """
    path = Path(path)
    pt, js = path.with_suffix(".pt"), path.with_suffix(".json")
    meta = load_json(js)
    data = read_bytes(pt)
    expected = meta.get("pt_sha256")
    if expected is None:
        warnings.warn(f"{js}: no pt_sha256; {pt} is not verified", UserWarning, stacklevel=3)
    elif sha256_bytes(data) != expected and previous_path(path).is_file():
        # a save killed between its .pt and its .json: the .json still names the previous .pt
        prev = read_bytes(previous_path(path))
        if sha256_bytes(prev) == expected:
            return meta, torch_load_bytes(prev, previous_path(path), map_location)
    if expected is not None and sha256_bytes(data) != expected:
        raise ValueError(
            f"{pt} does not match {js} (its SHA-256 differs from the one recorded there): the "
            "pair is inconsistent (e.g. an interrupted write) or corrupted"
        )
    return meta, torch_load_bytes(data, pt, map_location)


class LockHeld(ValueError):
    """Another process holds the lock `locked(..., wait=False)` asked for."""


@contextlib.contextmanager
def locked(path: str | Path, wait: bool = True) -> Iterator[None]:
    """An exclusive lock on `<path>.lock` (POSIX; no lock where fcntl is missing). With
    `wait=False` it refuses to wait: a `LockHeld` (a ValueError) names the lock file when another
    process holds it (one long job per resource, e.g. one search of a label)."""
    try:
        import fcntl
    except ImportError:  # Windows: one writer at a time is the user's business
        yield
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    name = path.with_name(path.name + ".lock")
    with open(name, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise LockHeld(f"{name} is held by another process: one at a time") from None
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
