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


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last).

    Checked as written, before `<<` merges, so a mapping may still override a merged-in key.
    """

    def compose_mapping_node(self, anchor):
        node = super().compose_mapping_node(anchor)
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = (key_node.tag, key_node.value)
            if key in seen:
                raise ValueError(
                    f"line {key_node.start_mark.line + 1}: duplicate key {key_node.value!r} "
                    "(it would silently replace the earlier value)"
                )
            seen.add(key)
        return node


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    """json object_pairs_hook: refuse a key given twice in one object (json keeps the last)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} (it would silently replace the earlier value)")
        out[key] = value
    return out


def parse_json(text: str, source: str | Path) -> Any:
    """json.loads refusing duplicate keys; errors are ValueErrors naming `source` (and the line)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{source}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc
    except ValueError as exc:  # a duplicate key
        raise ValueError(f"{source}: not valid JSON: {exc}") from exc


def read_mapping(path: str | Path) -> dict:
    """Read a YAML or JSON file into a dict (clear error if not a mapping or a key repeats)."""
    path = Path(path)
    text = path.read_text()
    if path.suffix == ".json":
        data = parse_json(text, path)
    else:
        try:
            data = yaml.load(text, Loader=_UniqueKeyLoader)
        except (yaml.YAMLError, ValueError) as exc:  # ValueError: duplicate key, bad date
            raise ValueError(f"{path}: not valid YAML: {exc}") from exc
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
