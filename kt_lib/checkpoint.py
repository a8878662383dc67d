"""Checkpoints without pickle: tensors via torch.save (loaded with weights_only=True) + JSON meta.

Both files are written atomically (temp file in the same folder, then os.replace).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def atomic_write_bytes(path: str | Path, write) -> None:
    """Call `write(fileobj)` on a temp file next to `path`, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_tensors(path: str | Path, tensors: dict[str, Any]) -> None:
    """Save a (nested) dict of tensors/numbers atomically."""
    atomic_write_bytes(path, lambda f: torch.save(tensors, f))


def load_tensors(path: str | Path, map_location="cpu") -> dict[str, Any]:
    return torch.load(path, map_location=map_location, weights_only=True)


def save_json(path: str | Path, obj: dict) -> None:
    atomic_write_bytes(path, lambda f: f.write(json.dumps(obj, indent=2, default=str).encode()))


def load_json(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


def save_model(path: str | Path, model, meta: dict | None = None, optimizer=None) -> None:
    """Write `<path>.pt` (state dict, extra state, optimizer) and `<path>.json` (name, config)."""
    from dataclasses import asdict

    path = Path(path)
    tensors = {"model": model.state_dict(), "extra": model.extra_state()}
    if optimizer is not None:
        tensors["optimizer"] = optimizer.state_dict()
    save_tensors(path.with_suffix(".pt"), tensors)
    info = {"model": model.registry_name, "config": asdict(model.config), **(meta or {})}
    save_json(path.with_suffix(".json"), info)


def load_model(path: str | Path, map_location="cpu"):
    """Rebuild a registered model from `save_model` files; returns (model, meta, tensors)."""
    from .models import build_model

    path = Path(path)
    meta = load_json(path.with_suffix(".json"))
    tensors = load_tensors(path.with_suffix(".pt"), map_location)
    model = build_model(meta["model"], meta["config"])
    model.load_state_dict(tensors["model"])
    model.load_extra_state(tensors.get("extra", {}))
    return model, meta, tensors
