"""DTransformer's Block 4 C kernel alone (kt_lib/nn/native/slot_chain.c): this checkout's build
against the same file at another git revision, in one process, on the same inputs.

    python benchmarks/bench_slot_kernel.py --base REV [--batch 4] [--repeats 7]
        [--out benchmarks/results/slot_kernel_backward_cpu.json]

One chunk of B rows at DTransformer's paper sizes (H = 8 heads, K = 16 slots, S = L = 200 steps,
strict mask, every key kept; random scores, log-masses from a random walk), one thread. Times
the forward (`slot_weights`, the weights only) and the backward: `slot_backward`, one pass that
recomputes the weights and adds the score and decay gradients, or in a revision before it
(2026-11-29) `slot_weights` also writing decay, distance, 1 / sum and the argmax, then
`slot_grads` reading them (`interface` tells a build's calls apart); medians over --repeats
calls each, the two builds alternated call by call. The base is compiled here with
`kt_lib.nn.native.FLAGS` and its own KERNEL_FLAGS entry for slot_chain (read from the
revision; none before 2026-11-29); this checkout's is `native.load`'s. Also: whether the two
builds' weights (the forward's, `w`, and the backward's, `wb`), dL/dr (`gr`) and dL/dtheta's
terms (`part`) are equal to the bit.
"""

from __future__ import annotations

import argparse
import ast
import ctypes
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_models import cpu_model

from kt_lib.nn import native
from kt_lib.provenance import ROOT

H, K, S = 8, 16, 200


def revision_flags(rev: str) -> list[str]:
    """slot_chain's own compiler flags at `rev` (its KERNEL_FLAGS entry, read from the
    revision's kt_lib/nn/native/__init__.py; none before it existed): x86-64 only, as
    `native.load` adds them."""
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:kt_lib/nn/native/__init__.py"], check=True,
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    flags = []
    for node in ast.parse(text).body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "KERNEL_FLAGS" and node.value:
            flags = ast.literal_eval(node.value).get("slot_chain", [])
    return flags if platform.machine().lower() in ("x86_64", "amd64") else []


def base_library(rev: str, tmp: Path) -> ctypes.CDLL:
    """slot_chain.c (and the header it includes) as of `rev`, built here with FLAGS and the
    revision's own flags for it."""
    for path in ("kt_lib/nn/native/slot_chain.c", "kt_lib/nn/native/fastmath.h"):
        text = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True, capture_output=True,
            text=True,
        ).stdout  # fmt: skip
        (tmp / Path(path).name).write_text(text)
    lib = tmp / "slot_chain_base.so"
    flags = [*native.FLAGS, *revision_flags(rev)]
    cmd = ["cc", *flags, f"-I{tmp}", "-o", str(lib), str(tmp / "slot_chain.c"), "-lm"]
    subprocess.run(cmd, check=True)
    return ctypes.CDLL(str(lib))


def inputs(B: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    lp = (0.01 * torch.randn(B, H, K, S, generator=g)).cumsum(-1) - 5.0
    return {
        "r": 3 * torch.randn(B, H, K, S, generator=g), "lp": lp,
        "lc": torch.logcumsumexp(lp, -1), "keep": torch.ones(1, S),
        "theta": torch.rand(H, generator=g),
    }  # fmt: skip


def interface(lib: ctypes.CDLL) -> str:
    """How a build of slot_chain.c is called: "scratch" (now: `slot_weights` and the one-pass
    `slot_backward` take the caller's scratch for the ratio bases), "one_pass" (867409b only:
    the same without it) or "two_pass" (before 2026-11-29: the recompute, `slot_weights` also
    writing decay, distance, 1 / sum and the argmax, then `slot_grads` reading them)."""
    for name, kind in (("slot_chain_takes_scratch", "scratch"), ("slot_backward", "one_pass")):
        try:
            getattr(lib, name)
        except AttributeError:
            continue
        return kind
    return "two_pass"


def calls(lib: ctypes.CDLL, x: dict, B: int):
    """(forward, backward) closures over fresh buffers, and the buffers."""
    P, L = ctypes.c_void_p, ctypes.c_long
    ptr = lambda t: P(t.data_ptr())  # noqa: E731
    head = [ptr(x["r"]), ptr(x["lp"]), ptr(x["lc"]), ptr(x["keep"]), L(1), ptr(x["theta"])]
    head += [L(B), L(H), L(K), L(S), L(0), L(B), L(0), L(S), L(S), ctypes.c_int(1), L(0), L(B * H)]
    w = torch.empty(B, H, S, K, S)
    buf = {"w": w, "wb": torch.empty_like(w)}  # the forward's weights, the backward's
    buf |= {"gw": torch.randn(w.shape, generator=torch.Generator().manual_seed(1))}
    buf |= {"gr": torch.zeros(B, H, K, S), "part": torch.zeros(B * H)}
    grads = [ptr(buf["gw"]), ptr(buf["gr"]), ptr(buf["part"])]
    kind = interface(lib)
    if kind == "two_pass":
        forward = lambda: lib.slot_weights(*head, ptr(buf["w"]), P(0), P(0), P(0), P(0))  # noqa: E731
        rows = (B, H, S, K)
        saved = [torch.empty_like(w), torch.empty_like(w), torch.empty(rows)]
        saved.append(torch.empty(rows, dtype=torch.int32))
        buf["saved"] = saved
        record = [ptr(buf["wb"]), *(ptr(t) for t in saved)]
        backward_calls = [
            lambda: lib.slot_weights(*head, *record),
            lambda: lib.slot_grads(*head, *record, *grads),
        ]
    else:
        buf["bases"] = torch.empty(B, H, K, S)  # each pair's ratio bases (scratch)
        scratch = [ptr(buf["bases"])] if kind == "scratch" else []
        forward = lambda: lib.slot_weights(*head, *scratch, ptr(buf["w"]))  # noqa: E731
        one_pass = [*scratch, ptr(buf["gw"]), ptr(buf["wb"]), ptr(buf["gr"]), ptr(buf["part"])]
        backward_calls = [lambda: lib.slot_backward(*head, *one_pass)]

    def backward():
        buf["gr"].zero_()
        buf["part"].zero_()
        for call in backward_calls:
            call()

    return (forward, backward), buf


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--base", required=True, help="the git revision to compare with")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default="benchmarks/results/slot_kernel_backward_cpu.json")
    a = p.parse_args()
    torch.set_num_threads(1)
    ours = native.load("slot_chain")
    if ours is None:
        sys.exit(f"slot_chain does not build here: {native.why_not('slot_chain')}")
    x = inputs(a.batch)
    with tempfile.TemporaryDirectory() as tmp:
        libs = {"this checkout": ours, a.base: base_library(a.base, Path(tmp))}
        built = {label: calls(lib, x, a.batch) for label, lib in libs.items()}
        names = ("forward", "backward")
        times = {(label, n): [] for label in libs for n in names}
        for rep in range(a.repeats + 1):  # the first round is the warm-up
            order = list(built.items())
            for label, (fns, _) in order if rep % 2 else order[::-1]:
                for n, fn in zip(names, fns, strict=True):
                    t0 = time.perf_counter()
                    fn()
                    if rep:
                        times[label, n].append(time.perf_counter() - t0)
        (_, a_buf), (_, b_buf) = built.values()
        keys = ("w", "wb", "gr", "part")
        equal = {k: bool(torch.equal(a_buf[k], b_buf[k])) for k in keys}
    rows = []
    for label in libs:
        row = {"version": label}
        for n in names:
            row[f"{n}_ms"] = 1000 * statistics.median(times[label, n])
        rows.append(row)
        print(f"{label:14s} " + "  ".join(f"{n} {row[f'{n}_ms']:7.1f} ms" for n in names))
    print("equal to the bit:", equal)
    out = {
        "cpu": cpu_model(), "threads": 1, "repeats": a.repeats, "base": a.base,
        "B": a.batch, "H": H, "K": K, "S": S, "results": rows, "equal": equal,
        "kernel_flags": native.KERNEL_FLAGS.get("slot_chain", []),
        "base_kernel_flags": revision_flags(a.base),
    }  # fmt: skip
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
