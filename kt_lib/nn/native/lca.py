"""stableKT's penumbral lca height and its gradient in C (penumbral.c), one chunk at a time, for
kt_lib.nn.penumbral's blocked kernel."""

from __future__ import annotations

import ctypes

import torch

from . import enabled, load, run_split

_P, _L, _F = ctypes.c_void_p, ctypes.c_long, ctypes.c_float
# zq and its batch/head/step strides; zk and its; H, Lq, s1; radius, eps
_COORDS = [_P, _L, _L, _L, _P, _L, _L, _L, _L, _L, _L, _F, _F]


def _lib():
    lib = load("penumbral")
    if lib is not None and lib.lca_forward.argtypes is None:
        lib.lca_forward.argtypes = [_P, *_COORDS, _F, _L, _L]  # delta; coords; scale; pairs
        lib.lca_backward.argtypes = [_P, _P, *_COORDS, _L, _L, _P, _P]  # G, delta; ...; dzq, dzk
    return lib


def _coords(zq: torch.Tensor, zk: torch.Tensor, H: int, Lq: int, s1: int, radius, eps) -> tuple:
    """zq [n, H, Lq, 1] and zk [n, H, 1, s1] (any strides) as the kernel's pointer and strides."""
    q = (zq.data_ptr(), zq.stride(0), zq.stride(1), zq.stride(2))
    k = (zk.data_ptr(), zk.stride(0), zk.stride(1), zk.stride(3))
    return (*q, *k, H, Lq, s1, float(radius), float(eps))


def _applies(*ts: torch.Tensor) -> bool:
    return enabled() and all(t.device.type == "cpu" and t.dtype == torch.float32 for t in ts)


def forward(delta, zq, zk, radius: float, eps: float, scale: float) -> bool:
    """scale * lca over `delta` [n, H, Lq, s1] (contiguous), in place, if the kernel applies here;
    False (delta untouched) where it does not."""
    if not (_applies(delta, zq, zk) and delta.is_contiguous()) or (lib := _lib()) is None:
        return False
    n, H, Lq, s1 = delta.shape
    head = (delta.data_ptr(), *_coords(zq, zk, H, Lq, s1, radius, eps), float(scale))
    run_split(lib.lca_forward, head, n * H, ())
    return True


def backward(G, delta, zq, zk, radius: float, eps: float):
    """(d zq [n, H, Lq, 1], d zk [n, H, 1, s1]) of sum(G * lca), turning G [n, H, Lq, s1]
    (contiguous) into d/d delta in place; None (G untouched) where the kernel does not apply."""
    tensors = (G, delta, zq, zk)
    if not (_applies(*tensors) and G.is_contiguous() and delta.is_contiguous()):
        return None
    if (lib := _lib()) is None:
        return None
    n, H, Lq, s1 = G.shape
    dzq, dzk = G.new_empty(n, H, Lq, 1), G.new_empty(n, H, 1, s1)
    head = (G.data_ptr(), delta.data_ptr(), *_coords(zq, zk, H, Lq, s1, radius, eps))
    run_split(lib.lca_backward, head, n * H, (dzq.data_ptr(), dzk.data_ptr()))
    return dzq, dzk
