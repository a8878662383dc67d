"""Native CPU kernels: C sources beside this file, compiled on first use and cached.

A kernel here is a fused elementwise chain that torch can only run as many passes over memory:
`slot_chain.c`, DTransformer's Block 4 (about 15 passes a chunk in torch, one here), and
`akt_chain.c`, AKT's monotonic attention (fourteen passes a chunk in torch, a few loops a row
here), and `penumbral.c`, stableKT's lca height and its gradient (about forty passes, one loop).
Each is a plain C file with no torch or Python headers (`fastmath.h`: their shared inline
exp): it compiles in about a second with the system's C compiler (`cc`, or `$CC`) and is called
through `ctypes`, which releases the GIL, so a caller can split its rows between threads
(`run_split`).

The shared library is cached under `$KT_LIB_CACHE` (default `~/.cache/kt_lib`)/native, keyed by a
hash of the source and headers, the compiler's version, the flags and this CPU's model and flags
(`-march=native`: a library built on one CPU is never loaded on another). The build writes a
temporary file and renames it, so concurrent processes never load a partial library.

Without a working compiler `load` returns None, warns once, `why_not` says why (the compiler's
message), and the callers keep their torch path: the same math, tested against the same
reference.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import torch

HERE = Path(__file__).parent
FLAGS = ["-O3", "-march=native", "-ffast-math", "-fPIC", "-shared"]
# a kernel's own flags beside FLAGS (x86-64 compilers: -mrecip is theirs): slot_chain's
# vectorised distance loop takes an exact vector sqrt, not -ffast-math's reciprocal estimate and
# Newton step (its scalar loop had sqrtss: the weights stay those of the runs made before it
# vectorised); the others keep theirs
KERNEL_FLAGS = {"slot_chain": ["-mrecip=!vec-sqrt"]}
_ENABLED = True
_LIBS: dict[str, ctypes.CDLL | None] = {}
_WHY: dict[str, str] = {}
_TRACKING: list[set[str]] = []  # the sets of the open `track` contexts
_LOCK = threading.Lock()
_POOL: tuple[int, ThreadPoolExecutor] | None = None  # (pid that made it, pool): a forked
# child inherits the pool object but not its threads, so it makes its own


@contextmanager
def use(enabled: bool):
    """Within: the callers take their native kernels (True, the default, where they build) or
    their torch paths (False): for A/B benchmarks and tests."""
    global _ENABLED
    before, _ENABLED = _ENABLED, enabled
    try:
        yield
    finally:
        _ENABLED = before


def enabled() -> bool:
    return _ENABLED


def cache_dir() -> Path:
    """$KT_LIB_CACHE/native (default ~/.cache/kt_lib/native), or a per-user folder under the
    system's temporary directory where that one cannot be created or written."""
    root = os.environ.get("KT_LIB_CACHE") or Path.home() / ".cache" / "kt_lib"
    path = Path(root) / "native"
    try:
        path.mkdir(parents=True, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / f"kt_lib-native-{os.getuid()}"


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _cpu_signature() -> str:
    """The model name and flag lines of /proc/cpuinfo (platform.processor() elsewhere)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    keep = [ln for ln in lines if ln.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(keep)))


def _build(name: str, cc: str) -> Path:
    src = HERE / f"{name}.c"
    headers = [h.read_text() for h in sorted(HERE.glob("*.h"))]
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    flags = FLAGS + (KERNEL_FLAGS.get(name, []) if x86 else [])
    parts = [src.read_text(), *headers, version, " ".join(flags), _cpu_signature()]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    out = cache_dir() / f"{name}-{key}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        cmd = [cc, *flags, f"-I{HERE}", "-o", tmp, str(src), "-lm"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr.strip()}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def load(name: str) -> ctypes.CDLL | None:
    """The compiled library `name` (built from `name`.c on first use), or None where it cannot
    be built here (then `why_not(name)` says why)."""
    with _LOCK:
        if name not in _LIBS:
            cc = _compiler()
            try:
                if cc is None:
                    raise RuntimeError("no C compiler found (cc, gcc or $CC)")
                _LIBS[name] = ctypes.CDLL(str(_build(name, cc)))
            except (OSError, RuntimeError) as err:
                _LIBS[name], _WHY[name] = None, str(err)
                warnings.warn(
                    f"kt_lib: the native kernel {name!r} is not available here ({err}); its "
                    "torch path runs instead (the same numbers, slower)",
                    RuntimeWarning,
                    stacklevel=3,
                )
        if _LIBS[name] is not None:
            for used in _TRACKING:
                used.add(name)
        return _LIBS[name]


@contextmanager
def track():
    """Within: the names of the kernels that ran collect in the yielded set (a run's provenance:
    its numbers came from these C chains rather than the torch paths)."""
    used: set[str] = set()
    _TRACKING.append(used)
    try:
        yield used
    finally:
        _TRACKING.remove(used)


def named(used: set[str]) -> str | None:
    """A `track` set as a results row writes it: comma-separated, sorted; None when empty."""
    return ",".join(sorted(used)) or None


def why_not(name: str) -> str | None:
    """Why `load(name)` returned None (None if it loaded or was never asked for)."""
    return _WHY.get(name)


def run_split(fn, head: tuple, n: int, tail: tuple) -> None:
    """Call fn(*head, p0, p1, *tail) over [0, n) split into torch.get_num_threads() ranges, one
    thread each (ctypes releases the GIL); the kernel must write disjoint outputs per range."""
    parts = max(1, min(torch.get_num_threads(), n))
    if parts == 1:
        fn(*head, 0, n, *tail)
        return
    global _POOL
    with _LOCK:
        if _POOL is None or _POOL[0] != os.getpid() or _POOL[1]._max_workers < parts - 1:
            _POOL = os.getpid(), ThreadPoolExecutor(parts - 1, thread_name_prefix="kt-native")
        pool = _POOL[1]
    edges = [round(i * n / parts) for i in range(parts + 1)]
    ranges = [(p0, p1) for p0, p1 in zip(edges[:-1], edges[1:], strict=True) if p1 > p0]
    futures = [pool.submit(fn, *head, p0, p1, *tail) for p0, p1 in ranges[1:]]
    fn(*head, *ranges[0], *tail)  # the first range here: one thread handoff fewer
    for f in futures:
        f.result()
