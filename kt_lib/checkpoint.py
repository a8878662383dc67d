"""Checkpoints without pickle: tensors via torch.save (loaded with weights_only=True) + JSON meta.

Both files are written atomically (temp file in the same folder, then os.replace), with the mode a
plain open() would give them. A model checkpoint is a pair written `.pt` first, `.json` second;
the `.json` records the SHA-256 of the exact `.pt` bytes (`pt_sha256`) and is the commit point.
While a new `.pt` replaces the old one, the old stays reachable as `<prefix>.prev.pt` (a hard
link), so a save killed at any instant leaves the old pair or the new one loadable, whole; a
damaged `.pt` is refused. Unreadable files raise ValueError naming the file. No pickle runs on
load, and a config naming a custom similarity head's `module_path` outside kt_lib is imported
only with `load_model(..., trust_code=True)`."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from .config import parse_json


def _new_file_mode(path: Path) -> int:
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


def _read_bytes(path: Path) -> bytes:
    """The file's bytes; read errors other than a missing file become ValueError naming it."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the file ({exc.strerror or exc})") from exc


def _torch_load(data: bytes, path: Path, map_location) -> dict[str, Any]:
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


def save_tensors(path: str | Path, tensors: dict[str, Any]) -> None:
    """Save a (nested) dict of tensors/numbers atomically."""
    atomic_write_bytes(path, lambda f: torch.save(tensors, f))


def load_tensors(path: str | Path, map_location="cpu") -> dict[str, Any]:
    path = Path(path)
    return _torch_load(_read_bytes(path), path, map_location)


def save_json(path: str | Path, obj: dict) -> None:
    atomic_write_bytes(path, lambda f: f.write(json.dumps(obj, indent=2, default=str).encode()))


def load_json(path: str | Path) -> dict:
    """A JSON object from `path`; unreadable or invalid files raise ValueError naming it."""
    path = Path(path)
    try:
        text = _read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON (not UTF-8 text: {exc.reason})") from exc
    data = parse_json(text, path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def save_model(path: str | Path, model, meta: dict | None = None, optimizer=None) -> None:
    """Write `<path>.pt` (state dict, extra state, optimizer), then `<path>.json` (name, config,
    `meta` and `pt_sha256`, the SHA-256 of the `.pt` bytes)."""
    from dataclasses import asdict

    path = Path(path)
    tensors = {"model": model.state_dict(), "extra": model.extra_state()}
    if optimizer is not None:
        tensors["optimizer"] = optimizer.state_dict()
    buf = io.BytesIO()
    torch.save(tensors, buf)
    data = buf.getvalue()
    pt, prev = path.with_suffix(".pt"), _previous(path)
    if pt.exists():  # the .json still names this .pt until it is replaced: keep it reachable
        _keep_copy(pt, prev)
    atomic_write_bytes(pt, lambda f: f.write(data))
    info = {"model": model.registry_name, "config": asdict(model.config), **(meta or {})}
    info["pt_sha256"] = hashlib.sha256(data).hexdigest()
    save_json(path.with_suffix(".json"), info)  # the commit point: the new pair is whole
    prev.unlink(missing_ok=True)


def _previous(path: Path) -> Path:
    """`<prefix>.prev.pt`: the `.pt` the current `.json` names while a new pair is written."""
    pt = path.with_suffix(".pt")
    return pt.with_name(pt.stem + ".prev.pt")


def _keep_copy(src: Path, dst: Path) -> None:
    """`dst` becomes a hard link to (or, where links fail, a copy of) `src`, atomically."""
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def load_checkpoint(path: str | Path, map_location="cpu") -> tuple[dict, dict[str, Any]]:
    """(meta, tensors) of a `save_model` pair, after checking the `.pt` against the `.json`.

    Raises ValueError naming both files when the `.pt` bytes do not have the SHA-256 the `.json`
    records. Pairs written before the hash was recorded load with a warning.
    """
    path = Path(path)
    pt, js = path.with_suffix(".pt"), path.with_suffix(".json")
    meta = load_json(js)
    data = _read_bytes(pt)
    expected = meta.get("pt_sha256")
    if expected is None:
        warnings.warn(f"{js}: no pt_sha256; {pt} is not verified", UserWarning, stacklevel=2)
    elif hashlib.sha256(data).hexdigest() != expected and _previous(path).is_file():
        # a save killed between its .pt and its .json: the .json still names the previous .pt
        prev = _read_bytes(_previous(path))
        if hashlib.sha256(prev).hexdigest() == expected:
            return meta, _torch_load(prev, _previous(path), map_location)
    if expected is not None and hashlib.sha256(data).hexdigest() != expected:
        raise ValueError(
            f"{pt} does not match {js} (its SHA-256 differs from the one recorded there): the "
            "pair is inconsistent (e.g. an interrupted write) or corrupted"
        )
    return meta, _torch_load(data, pt, map_location)


TRUSTED_PREFIX = "kt_lib."  # module paths inside the workbook load without opting in


def code_named(data: Any) -> list[str]:
    """Every `module_path` value in a loaded JSON structure that points outside kt_lib: code
    that building from this file would import (and so run)."""
    found = []
    if isinstance(data, dict):
        for k, v in data.items():
            if k == "module_path" and isinstance(v, str) and not v.startswith(TRUSTED_PREFIX):
                found.append(v)
            else:
                found += code_named(v)
    elif isinstance(data, list):
        for v in data:
            found += code_named(v)
    return found


def refuse_untrusted_code(data: Any, source: str | Path, trust_code: bool) -> None:
    """Raise PermissionError when a file names code to import and the caller did not opt in
    (`trust_code=True`, as Hugging Face's `trust_remote_code`). Configs written in Python by the
    user are trusted; only files being loaded are checked, before anything is imported."""
    names = code_named(data)
    if names and not trust_code:
        raise PermissionError(
            f"{source}: names code to import ({', '.join(sorted(set(names)))}); loading it would "
            "run that code. Pass trust_code=True if you trust this file."
        )


def load_model(path: str | Path, map_location="cpu", trust_code: bool = False):
    """Rebuild a registered model from `save_model` files; returns (model, meta, tensors).
    A checkpoint whose config names a module outside kt_lib (a custom SimAKT head's
    `module_path`) is refused unless `trust_code=True`: nothing is imported before that check."""
    from .models import build_model

    meta, tensors = load_checkpoint(path, map_location)
    refuse_untrusted_code(meta.get("config"), Path(path).with_suffix(".json"), trust_code)
    model = build_model(meta["model"], meta["config"])
    model.load_state_dict(tensors["model"])
    model.load_extra_state(tensors.get("extra", {}))
    return model, meta, tensors
