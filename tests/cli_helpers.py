"""Many `python -m MODULE ...` / `python SCRIPT ...` commands in one fresh interpreter (one torch
import, not one per command): each runs as `python -m` / `python script.py` would (runpy, its
sys.argv, the script's folder on sys.path), its exit code, stdout and stderr kept apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_RUNNER = r"""
import contextlib, io, json, os, runpy, sys
found = []
for argv in json.load(sys.stdin):
    out, err, code = io.StringIO(), io.StringIO(), 0
    module = argv[1] if argv[0] == "-m" else None
    sys.argv = [module or argv[0], *argv[2 if module else 1:]]
    path = list(sys.path)
    if module is None:
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if module:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:
        code, _ = 1, err.write(f"{type(exc).__name__}: {exc}")
    sys.path[:] = path
    found.append([code, out.getvalue(), err.getvalue()])
json.dump(found, sys.__stdout__)
"""


def run_many(commands: list[list[str]], timeout: float = 600) -> list[tuple[int, str, str]]:
    """(exit code, stdout, stderr) of each command, e.g. ["-m", "kt_lib.cli", "run", "--help"]
    or ["benchmarks/bench_models.py", "--help"], run from the repository root in order."""
    done = subprocess.run([sys.executable, "-c", _RUNNER], cwd=ROOT, input=json.dumps(commands),
                          capture_output=True, text=True, check=True, timeout=timeout)  # fmt: skip
    return [tuple(x) for x in json.loads(done.stdout)]
