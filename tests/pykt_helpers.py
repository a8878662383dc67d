"""pyKT's repository-code models for the optional comparisons on copied weights
(tests/test_extrakt.py, tests/test_robustkt.py): loaded from a checkout named by $PYKT_SRC (its
pykt/models, as for tests/test_bench_peers.py) by benchmarks/pykt_loader.py, skipped without one
or when a module the file imports (einops) is missing; pyKT is never a dependency."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def pykt_repo_module(name: str):
    """pyKT's pykt/models/<name>.py from $PYKT_SRC, or a skip saying why not."""
    src = os.environ.get("PYKT_SRC")
    if not (src and (Path(src) / f"{name}.py").is_file() and (Path(src) / "utils.py").is_file()):
        pytest.skip(f"$PYKT_SRC names no checkout of pyKT's pykt/models with {name}.py")
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_peers import SRC_PKG
    from pykt_loader import load_pykt

    try:
        return load_pykt("cpu", (name,), root=Path(src), pkg=SRC_PKG)[name]
    except SystemExit as e:  # a module pyKT's file imports is not installed
        pytest.skip(str(e))


# pyKT's AKT-layout names (akt.py, extrakt.py, robustkt.py, ...) -> ours (kt_lib.models.akt)
_LAYER = {
    "masked_attn_head.k_linear": "attn.{shared}",
    "masked_attn_head.v_linear": "attn.v_proj",
    "masked_attn_head.out_proj": "attn.out_proj",
    "masked_attn_head.gammas": "attn.gamma",
    "layer_norm1": "ln1",
    "linear1": "ffn.0",
    "linear2": "ffn.2",
    "layer_norm2": "ln2",
}
_TOP = {
    "q_embed.weight": "embed.c.weight",
    "qa_embed.weight": "embed.g.weight",
    "out.0": "out.0",
    "out.3": "out.2",
    "out.6": "out.4",
}


def akt_layout_names(theirs: torch.nn.Module, ours: torch.nn.Module) -> dict[str, str]:
    """pyKT's tensor names -> ours, for every tensor both models have: pyKT's FFNs of the
    question self-attention layers (built, never run) have no counterpart and are left out, and
    so is what the caller maps itself (a variant's own modules)."""
    mine = ours.state_dict()
    shared = "q_proj" if any(".attn.q_proj." in k for k in mine) else "k_proj"
    names = {}
    for key in theirs.state_dict():
        m = re.fullmatch(r"model\.blocks_([12])\.(\d+)\.(.+)\.(weight|bias|gammas)", key)
        if m:
            stack = "encoder" if m[1] == "1" else "retriever"
            part = f"{m[3]}.{m[4]}" if m[4] == "gammas" else m[3]
            if part not in _LAYER:
                continue
            name = _LAYER[part].format(shared=shared)
            name = f"{stack}.{m[2]}.{name}" + ("" if m[4] == "gammas" else f".{m[4]}")
        else:
            head = next((k for k in _TOP if key == k or key.startswith(k + ".")), None)
            if head is None:
                continue
            name = _TOP[head] + key[len(head) :]
        if name in mine:
            names[key] = name
    return names


def akt_layout_weights(theirs: torch.nn.Module, ours: torch.nn.Module) -> dict[str, torch.Tensor]:
    """pyKT's tensors under our names (`akt_layout_names`), in our shapes and dtypes."""
    mine, src = ours.state_dict(), theirs.state_dict()
    return {
        ours_name: src[key].reshape(mine[ours_name].shape).to(mine[ours_name].dtype)
        for key, ours_name in akt_layout_names(theirs, ours).items()
    }


def unused_in_ours(theirs: torch.nn.Module, ours: torch.nn.Module) -> set[str]:
    """pyKT's parameters with no counterpart in ours (before the caller's own mappings)."""
    names = akt_layout_names(theirs, ours)
    return {k for k, _ in theirs.named_parameters() if k not in names}
