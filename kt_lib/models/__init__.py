"""Model registry. Every module in this package is imported so its `@register` runs."""

import importlib
import pkgutil

from .base import (
    MODELS,
    BaseConfig,
    KTModel,
    ModelOutput,
    build_model,
    list_models,
    make_config,
    register,
)

for _m in pkgutil.iter_modules(__path__):
    if _m.name != "base":
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = [
    "MODELS",
    "BaseConfig",
    "KTModel",
    "ModelOutput",
    "build_model",
    "list_models",
    "make_config",
    "register",
]
