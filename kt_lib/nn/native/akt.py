"""AKT's monotonic attention chain in C (akt_chain.c), one chunk at a time, for kt_lib.nn.cpu."""

from __future__ import annotations

import ctypes

import torch

from . import enabled, load, run_split

_P, _L, _F = ctypes.c_void_p, ctypes.c_long, ctypes.c_float
# a; bias, its batch/head/step strides; -(theta |t - j|)^2, its head/step strides; keep, scale;
# H, Lq, s1; pairs p0, p1; W, D, AY, P
_SIG = [_P, _P, _L, _L, _L, _P, _L, _L, _P, _F, _L, _L, _L, _L, _L, _P, _P, _P, _P]


def _lib():
    lib = load("akt_chain")
    if lib is not None and lib.akt_forward.argtypes is None:
        lib.akt_forward.argtypes = _SIG
        # P, W, D, AY, g (in place); H, Lq, s1; pairs p0, p1; theta's partial sums
        lib.akt_backward.argtypes = [_P] * 5 + [_L] * 5 + [_P]
    return lib


def _applies(*ts: torch.Tensor) -> bool:
    return enabled() and all(
        t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in ts
    )


def _strides(t: torch.Tensor) -> list[int]:
    """Element strides of the leading dims, 0 where a dim of size 1 broadcasts."""
    return [st if n > 1 else 0 for n, st in zip(t.shape[:-1], t.stride()[:-1], strict=True)]


def forward_chain(a, bias, neg_pos, keep, scale: float, W, D, AY) -> bool:
    """The chain of one chunk (see akt_chain.c) if the native kernel applies here, writing W, D,
    AY [n, H, Lq, s1] and, with `keep` (the drawn 1/0 floats), P = keep * W * scale into `keep`;
    returns False (nothing written) where it does not: a non-float32 or non-CPU chunk, a layout
    it does not read, no compiler, or `kt_lib.nn.native.use(False)`.

    a [n, H, Lq, s1] the scaled scores; bias [n|1, H|1, Lq, s1] additive mask; neg_pos
    [H, Lq, s1] = -(theta |t - j|)^2."""
    dense = (a, W, D, AY) + ((keep,) if keep is not None else ())
    if not _applies(*dense):
        return False
    if bias.stride(-1) != 1 or neg_pos.stride(-1) != 1 or bias.dtype != torch.float32:
        return False
    lib = _lib()
    if lib is None:
        return False
    n, H, Lq, s1 = a.shape
    sb, sh, sl = _strides(bias)
    nh, nl = _strides(neg_pos)
    kp = keep.data_ptr() if keep is not None else None
    head = (a.data_ptr(), bias.data_ptr(), sb, sh, sl, neg_pos.data_ptr(), nh, nl, kp)
    head += (float(scale), H, Lq, s1)
    run_split(lib.akt_forward, head, n * H, (W.data_ptr(), D.data_ptr(), AY.data_ptr(), kp))
    return True


def backward_chain(P, W, D, AY, g) -> torch.Tensor | None:
    """The chain's backward of one chunk (see akt_chain.c), in place on g (dL/dP in, dL/d raw
    scores out), returning theta's partial sums per head [H] in float64; None (g untouched)
    where the native kernel does not apply. P is W itself without dropout."""
    if not _applies(P, W, D, AY, g):
        return None
    lib = _lib()
    if lib is None:
        return None
    n, H, Lq, s1 = g.shape
    part = torch.zeros(n * H, dtype=torch.float64)
    head = tuple(t.data_ptr() for t in (P, W, D, AY, g)) + (H, Lq, s1)
    run_split(lib.akt_backward, head, n * H, (part.data_ptr(),))
    return part.view(n, H).sum(0)
