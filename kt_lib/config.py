"""Config dataclasses: load from dict/YAML/JSON with validation that names the bad field."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

C = TypeVar("C")


def read_mapping(path: str | Path) -> dict:
    """Read a YAML or JSON file into a dict (clear error if it is not a mapping)."""
    path = Path(path)
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at top level, got {type(data).__name__}")
    return data


def _check_type(cls_name: str, name: str, value: Any, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for a in args:
            try:
                return _check_type(cls_name, name, value, a)
            except (TypeError, ValueError):
                continue
        raise ValueError(f"{cls_name}.{name}: {value!r} does not match {hint}")
    if hint is type(None):
        if value is None:
            return None
        raise ValueError(f"{cls_name}.{name}: expected None, got {value!r}")
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool):
        if isinstance(value, bool) and hint is not bool:
            raise ValueError(f"{cls_name}.{name}: expected {hint.__name__}, got {value!r}")
        if not isinstance(value, hint):
            raise ValueError(f"{cls_name}.{name}: expected {hint.__name__}, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{cls_name}.{name}: expected a list, got {value!r}")
        return origin(value)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{cls_name}.{name}: expected a mapping, got {value!r}")
        return value
    return value


def from_dict(cls: type[C], data: dict, source: str = "") -> C:
    """Build a config dataclass from a dict: unknown keys and wrong types raise ValueError."""
    where = f"{source}: " if source else ""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(
            f"{where}unknown field(s) {unknown} for {cls.__name__}; valid: {sorted(names)}"
        )
    kwargs = {}
    for key, value in data.items():
        try:
            kwargs[key] = _check_type(cls.__name__, key, value, hints[key])
        except ValueError as exc:
            raise ValueError(f"{where}{exc}") from None
    cfg = cls(**kwargs)
    validate = getattr(cfg, "validate", None)
    if validate is not None:
        try:
            validate()
        except ValueError as exc:
            raise ValueError(f"{where}{exc}") from None
    return cfg


def load_config(cls: type[C], path: str | Path) -> C:
    """Load a config dataclass from a YAML/JSON file."""
    return from_dict(cls, read_mapping(path), source=str(path))


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def require(cond: bool, message: str) -> None:
    """Raise ValueError(message) unless cond: used by config `validate()` methods."""
    if not cond:
        raise ValueError(message)
