"""No code on load without opt-in: files that name a module outside kt_lib to import.

A SimAKT config may name a custom similarity head by `module_path`; building from a loaded file
would import (and so run) that module. Loaders call `refuse_untrusted_code` before building, and
go on only with `trust_code=True` (as Hugging Face's `trust_remote_code`). Configs written in
Python by the user are trusted; only files being loaded are checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TRUSTED_PREFIX = "kt_lib."  # module paths inside the workbook load without opting in


def code_named(data: Any) -> list[str]:
    """Every `module_path` value in a loaded JSON structure that points outside kt_lib: code
    that building from this file would import (and so run)."""
    found = []
    if isinstance(data, dict):
        for k, v in data.items():
            if k == "module_path" and isinstance(v, str) and not v.startswith(TRUSTED_PREFIX):
                found.append(v)
            else:
                found += code_named(v)
    elif isinstance(data, list):
        for v in data:
            found += code_named(v)
    return found


def refuse_untrusted_code(data: Any, source: str | Path, trust_code: bool) -> None:
    """Raise PermissionError when a file names code to import and the caller did not opt in
    (`trust_code=True`), before anything is imported."""
    names = code_named(data)
    if names and not trust_code:
        raise PermissionError(
            f"{source}: names code to import ({', '.join(sorted(set(names)))}); loading it would "
            "run that code. Pass trust_code=True if you trust this file."
        )
