"""Name -> class registries for models, heads, similarity modules and ordinal mechanisms."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Registry(dict):
    """A dict of named classes with a `register` decorator and helpful lookup errors."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if name in self and self[name] is not obj:
                raise KeyError(f"{self.kind} {name!r} is already registered to {self[name]!r}")
            self[name] = obj
            try:
                obj.registry_name = name  # type: ignore[attr-defined]
            except (AttributeError, TypeError):
                pass
            return obj

        return decorator

    def __getitem__(self, name: str):
        try:
            return super().__getitem__(name)
        except KeyError:
            raise KeyError(
                f"unknown {self.kind} {name!r}; valid names: {', '.join(sorted(self))}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self)
