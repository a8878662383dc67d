"""Atomic file writes, JSON files and file locks: the bottom layer every module may import.

A file written here is either the old one or the whole new one, never a torn mix: the bytes go
to a temp file beside it, are flushed to disk, and the temp file is renamed into place.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO


def _new_file_mode(path: Path) -> int:
    """The mode `open(path, "w")` leaves: the existing file's, else 0o666 minus the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        pass
    mask = os.umask(0o077)  # the umask can only be read by setting it; restore it at once
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_bytes(path: str | Path, write: Callable[[IO[bytes]], object]) -> None:
    """Call `write(fileobj)` on a temp file next to `path`, then rename it into place.

    mkstemp creates the temp file 0600; it gets `_new_file_mode(path)` before the rename.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _new_file_mode(path)
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


def save_json(path: str | Path, obj: dict) -> None:
    """`obj` as indented JSON, written atomically (values JSON cannot hold become strings)."""
    atomic_write_bytes(path, lambda f: f.write(json.dumps(obj, indent=2, default=str).encode()))


@contextlib.contextmanager
def locked(path: str | Path) -> Iterator[None]:
    """An exclusive lock on `<path>.lock` (POSIX; no lock where fcntl is missing)."""
    try:
        import fcntl
    except ImportError:  # Windows: one writer at a time is the user's business
        yield
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
