"""Model checkpoints without pickle: tensors via torch.save (loaded with weights_only=True) + JSON.

A model checkpoint is a pair written `.pt` first, `.json` second; the `.json` records the SHA-256
of the exact `.pt` bytes (`pt_sha256`) and is the commit point. While a new `.pt` replaces the old
one, the old stays reachable as `<prefix>.prev.pt` (a hard link), so a save killed at any instant
leaves the old pair or the new one loadable, whole; a damaged `.pt` is refused. Unreadable files
raise ValueError naming the file. No pickle runs on load, and a config naming a custom similarity
head's `module_path` outside kt_lib is imported only with `load_model(..., trust_code=True)`.
The file primitives live in `kt_lib.fileio` (re-exported here) and the trust rule in
`kt_lib.trust`.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from .fileio import (
    atomic_write_bytes,
    load_json,
    load_tensors,
    locked,
    read_pair,
    save_json,
    save_tensors,
    tensor_bytes,
    write_pair,
)
from .heads.simakt_config import files_named, refuse_untrusted_config
from .models import build_model
from .trust import TRUSTED_PREFIX, code_named, refuse_untrusted_code

__all__ = [
    "TRUSTED_PREFIX",
    "atomic_write_bytes",
    "code_named",
    "load_checkpoint",
    "load_json",
    "load_model",
    "load_tensors",
    "refuse_untrusted_code",
    "remove_checkpoint",
    "save_json",
    "save_model",
    "save_tensors",
]


def save_model(path: str | Path, model, meta: dict | None = None, optimizer=None) -> None:
    """Write `<path>.pt` (state dict, extra state, optimizer), then `<path>.json` (name, config,
    `meta` and `pt_sha256`, the SHA-256 of the `.pt` bytes): `kt_lib.fileio.write_pair`."""
    tensors = {"model": model.state_dict(), "extra": model.extra_state()}
    if optimizer is not None:
        tensors["optimizer"] = optimizer.state_dict()
    info = {"model": model.registry_name, "config": config_record(model), **(meta or {})}
    write_pair(path, tensor_bytes(tensors), info)


def config_record(model) -> dict:
    """The config a checkpoint stores: the config's fields, and a SimAKT similarity read from a
    file as what was read (so the file cannot move it)."""
    config = asdict(model.config)
    if files_named(config):
        config["similarity"] = model.config.similarity_config().to_mapping()
    return config


def remove_checkpoint(prefix: str | Path | None) -> None:
    """Remove the files of an epoch checkpoint prefix (`fit`'s `<prefix>_last.pt`, `_best.json`,
    `_history.json`, ...); None: nothing."""
    if prefix is None:
        return
    prefix = Path(prefix)
    try:
        with locked(prefix.with_name(prefix.name + ".claim"), wait=False):  # `fit`'s claim
            for f in prefix.parent.glob(prefix.name + "_*"):
                f.unlink(missing_ok=True)
            prefix.with_name(prefix.name + ".claim.lock").unlink(missing_ok=True)
    except ValueError:  # a process trains this run now: its files are its own
        return


def load_checkpoint(path: str | Path, map_location="cpu") -> tuple[dict, dict[str, Any]]:
    """(meta, tensors) of a `save_model` pair, after checking the `.pt` against the `.json`
    (`kt_lib.fileio.read_pair`: a mismatch raises ValueError naming both files)."""
    return read_pair(path, map_location)


def load_model(path: str | Path, map_location="cpu", trust_code: bool = False):
    """Rebuild a registered model from `save_model` files; returns (model, meta, tensors).
    A checkpoint whose config names a module outside kt_lib (a custom SimAKT head's
    `module_path`) or a SimAKT config file outside the shipped presets is refused unless
    `trust_code=True`: nothing is read or imported before that check."""
    meta, tensors = load_checkpoint(path, map_location)
    refuse_untrusted_config(meta.get("config"), Path(path).with_suffix(".json"), trust_code)
    model = build_model(meta["model"], meta["config"])
    model.load_state_dict(tensors["model"])
    model.load_extra_state(tensors.get("extra", {}))
    return model, meta, tensors
