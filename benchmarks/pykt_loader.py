"""pykt-toolkit's model files loaded without `import pykt` (bench_peers, bench_peer_audit).

pykt's `__init__` pulls in modules that need tkinter and wandb, and pykt is not a project
dependency (`pip install --no-deps pykt-toolkit==0.0.38`). So pykt/models/<name>.py is executed
by path as a submodule of a stand-in package (their relative imports, `from .utils`, resolve
there), and the module-level `device` each file picks at import time (CUDA whenever one exists)
is set to the device asked for. The few files that import `pykt.utils` by its absolute name
(iekt, qdkt, que_base_model: `set_seed`, `debug_print`) get a stand-in `pykt.utils` for the
duration of their import only, so a real `import pykt` later is unaffected.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import random
import sys
import types
from pathlib import Path

import torch

PYKT_VERSION = "0.0.38"
INSTALL = f"pip install --no-deps pykt-toolkit=={PYKT_VERSION}"
PKG = "_pykt_models"  # the stand-in package their relative imports (`from .utils`) resolve in


def find_pykt_models() -> Path | None:
    """pykt/models of the installed pykt-toolkit (found, not executed), or None."""
    spec = importlib.util.find_spec("pykt")  # a top-level name: found, not executed
    if spec is not None and spec.origin:
        root = Path(spec.origin).parent
    else:
        try:
            root = Path(str(importlib.metadata.distribution("pykt-toolkit").locate_file("pykt")))
        except importlib.metadata.PackageNotFoundError:
            return None
    return root / "models" if (root / "models" / "akt.py").is_file() else None


def pykt_models_dir() -> Path:
    """pykt/models of the installed pykt-toolkit; exits with the install command when missing."""
    root = find_pykt_models()
    if root is None:
        raise SystemExit(
            f"this benchmark needs pykt-toolkit {PYKT_VERSION}, which is not installed: {INSTALL} "
            "(into this interpreter's environment; it stays out of the project's dependencies)"
        )
    return root


def pykt_version() -> str | None:
    try:
        return importlib.metadata.version("pykt-toolkit")
    except importlib.metadata.PackageNotFoundError:
        return None


def _set_seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def _stand_in_utils() -> dict[str, types.ModuleType]:
    """`pykt` and `pykt.utils` holding only the two helpers pykt's model files import."""
    pkg = types.ModuleType("pykt")
    pkg.__path__ = []
    utils = types.ModuleType("pykt.utils")
    utils.set_seed = _set_seed
    utils.debug_print = lambda text, fuc_name="": None
    pkg.utils = utils
    return {"pykt": pkg, "pykt.utils": utils}


def load_pykt(
    device: str,
    names: tuple[str, ...] = ("dkt", "sakt", "akt"),
    root: Path | None = None,
    pkg: str = PKG,
) -> dict:
    """pykt's `utils` and the model files `names` (<root>/<name>.py), executed by path; `root` is
    the installed package's pykt/models unless given (a checkout's, loaded under another `pkg`)."""
    root = pykt_models_dir() if root is None else Path(root)
    if pkg not in sys.modules:
        stand = types.ModuleType(pkg)
        stand.__path__ = [str(root)]
        sys.modules[pkg] = stand
    stand_in = {k: v for k, v in _stand_in_utils().items() if k not in sys.modules}
    sys.modules.update(stand_in)
    mods = {}
    try:
        for name in ("utils", *names):
            full = f"{pkg}.{name}"
            if full not in sys.modules:
                spec = importlib.util.spec_from_file_location(full, root / f"{name}.py")
                mod = importlib.util.module_from_spec(spec)
                sys.modules[full] = mod
                try:
                    spec.loader.exec_module(mod)
                except ImportError as e:  # installed with --no-deps: a module pykt needs is missing
                    del sys.modules[full]
                    raise SystemExit(f"pykt's {name}.py cannot be loaded: {e}") from e
            mods[name] = sys.modules[full]
    finally:
        for k in stand_in:
            sys.modules.pop(k, None)
    # they choose the device at import time (CUDA whenever one exists) for masks and positions;
    # keep each file's own type (a str in some, a torch.device in others)
    for full, mod in list(sys.modules.items()):
        dev = getattr(mod, "device", None)
        if full.startswith(pkg + ".") and isinstance(dev, (str, torch.device)):
            mod.device = type(mod.device)(device)
    return mods
