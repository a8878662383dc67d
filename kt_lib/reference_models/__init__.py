"""Reference models (BKT, IRT) behind one interface; modules register themselves on import.
gpcm_mml.py is a calibration routine (GPCM items by marginal maximum likelihood), not a registered
reference."""

import importlib
import pkgutil

from .base import REFERENCES, ReferenceModel, build_reference, references_providing

for _m in pkgutil.iter_modules(__path__):
    if _m.name != "base":
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["REFERENCES", "ReferenceModel", "build_reference", "references_providing"]
