"""pykt-toolkit 0.0.38's models under our causality audit and q_t alignment check.

    pip install --no-deps pykt-toolkit==0.0.38      # once; not a project dependency
    python benchmarks/bench_peer_audit.py [--models dkt atkt] [--out FILE.json]
    python benchmarks/bench_peer_audit.py --markdown [--out FILE.json]   # the table from the JSON
    python benchmarks/bench_peer_audit.py --pykt-src CHECKOUT/pykt/models --src-label LABEL \
        --out benchmarks/results/peer_audit_repo_cpu.json    # a pykt-toolkit checkout's files

Each model is called as pykt's own evaluation calls it (pykt/models/evaluate_model.py `evaluate`,
the same inputs as train_model.py `model_forward`): pykt's loader cuts a window of L steps into
q, c, r = steps 0..L-2 and qshft, cshft, rshft = steps 1..L-1, and every model's scored output y
[B, L-1] is compared with rshft, so y[:, s-1] is the prediction pykt scores against r_s. The
audit maps it back to s: for each audited s, responses at steps >= s and questions, concepts and
times at steps > s are redrawn, and the predictions scored against r_1..r_s must not move (eval
mode, and train mode with the RNG reseeded before each pass: the same dropout and sampling draws).
A leaking model is then probed one input and one step at a time (r at s+k, k >= 0; q/c or t at
s+k, k >= 1) for the nearest step through which it leaks (`leak_via`). The alignment check
changes q_s (and its concept c_s) alone: the prediction scored against r_s must move, else the
model predicts without knowing which question it is (GUIDE section 9).

Tiny sizes (d 16), 30 questions on 10 concepts (c = q mod 10), B=4, L=20 ragged (padding 0 as
pykt's loader), seeds fixed, float64 (atol 1e-10; float32 and 1e-5 where a model cannot run in
float64). One JSON line per model in --out (model, pykt_version, ran: true or the error, leak,
max_change, leak_via, aligned, notes, and details), models the 0.0.38 wheel lacks included with
ran = "not in the 0.0.38 wheel". Without pykt-toolkit installed it prints the install command
and exits 0 (CI does not install it).

pykt-team/pykt-toolkit's repository (its setup.py also says 0.0.38) holds models the PyPI wheel
lacks (simpleKT, sparseKT, stableKT, FoLiBiKT, extraKT, RobustKT, DTransformer, DIMKT, ATDKT,
QIKT): `--pykt-src` audits a checkout's pykt/models (the wheel's models and those), recording
`--src-label` as pykt_version. stablekt, folibikt and extrakt import einops (not a project
dependency: put it on PYTHONPATH). How each model is built and called: benchmarks/peer_models.py.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
from collections.abc import Callable
from pathlib import Path

import torch
from peer_models import (  # noqa: F401 - part of this module's API
    NOTES,
    NQ,
    REPO,
    SHIPPED,
    UNWIRED,
    B,
    L,
    Seqs,
    build,
    cuda_calls_in_place,
    probe,
    pykt_batch,
    random_seqs,
    scored,
    set_mode,
)
from pykt_loader import INSTALL, PYKT_VERSION, find_pykt_models, load_pykt, pykt_version

# -- the audit --------------------------------------------------------------------------------

Forward = Callable[[Seqs], torch.Tensor]


def perturb(
    s: Seqs, step: int, g: torch.Generator, channels: tuple[str, ...] = ("r", "q", "t")
) -> Seqs:
    """Copy of `s` with r[:, step:] flipped and q[:, step+1:] moved to another question at
    random, t[:, step+1:] redrawn (`channels` only); every cell changes (as kt_lib.audit: a
    redraw kept a cell with probability 1/2 for r and could miss a leak confined to one)."""
    p = s.clone()
    n = L - step - 1
    if "r" in channels:
        p.r[:, step:] = (1 - s.r[:, step:]) * s.mask[:, step:]
    if n > 0 and "q" in channels:
        shift = torch.randint(1, NQ, (B, n), generator=g)
        p.q[:, step + 1 :] = (s.q[:, step + 1 :] + shift) % NQ * s.mask[:, step + 1 :]
    if n > 0 and "t" in channels:  # new gaps after step; times stay non-decreasing
        gaps = torch.randint(1, 4000, (B, n), generator=g)
        p.t[:, step + 1 :] = (s.t[:, step : step + 1] + gaps.cumsum(1)) * s.mask[:, step + 1 :]
    return p


def flip_one(s: Seqs, channel: str, at: int) -> Seqs:
    """Copy of `s` with one input changed at one step (r flipped, q shifted, t delayed)."""
    p = s.clone()
    if channel == "r":
        p.r[:, at] = (1 - p.r[:, at]) * s.mask[:, at]
    elif channel == "q":
        p.q[:, at] = (p.q[:, at] + 1) % NQ * s.mask[:, at]
    else:
        p.t[:, at:] = (p.t[:, at:] + 3600) * s.mask[:, at:]
    return p


def past_change(fwd: Forward, base: torch.Tensor, s: Seqs, p: Seqs, step: int) -> float:
    """Largest move of the predictions scored against r_1..r_step (valid ones)."""
    keep = (s.mask[:, 1:] & s.mask[:, :-1])[:, :step]
    a, b = fwd(p)[:, :step], base[:, :step]
    same = (a == b) | (a.isnan() & b.isnan())  # NaN or inf in one pass only: moved
    diff = (a - b).abs().nan_to_num(nan=float("inf")).masked_fill(same, 0.0)
    return float(diff[keep].max()) if keep.any() else 0.0


def audit_steps() -> list[int]:
    return sorted({1, 2, L // 3, L // 2, L - 2, L - 1})


def causality(
    fwd: Forward, s: Seqs, atol: float, channels: tuple[str, ...] = ("r", "q", "t"), trials: int = 2
) -> tuple[float, int | None, int | None]:
    """(max change, worst s, first leaking s) over the audited steps."""
    g = torch.Generator().manual_seed(0)
    base = fwd(s)
    worst, worst_s, first = 0.0, None, None
    for step in audit_steps():
        for _ in range(trials):
            d = past_change(fwd, base, s, perturb(s, step, g, channels), step)
            if d > worst:
                worst, worst_s = d, step
            if d > atol and first is None:
                first = step
    return worst, worst_s, first


def future_change(fwd: Forward, s: Seqs) -> float:
    """The positive control: redrawing the responses at steps >= s must move the predictions
    scored against r_{s+1}.. (else the model reads no history and the audit proves nothing)."""
    g = torch.Generator().manual_seed(0)
    base = fwd(s)
    keep = s.mask[:, 1:] & s.mask[:, :-1]
    moved = 0.0
    for step in [st for st in audit_steps() if st < L - 1]:
        diff = (fwd(perturb(s, step, g, ("r",))) - base).abs()[:, step:][keep[:, step:]]
        moved = max(moved, float(diff.max()) if diff.numel() else 0.0)
    return moved


def leak_via(fwd: Forward, s: Seqs, atol: float) -> list[str]:
    """For each input that leaks, the nearest future step through which it does: r[s+k] (k>=0)
    or q[s+k] / t[s+k] (k>=1) changed alone moves a prediction scored against r_1..r_s."""
    base = fwd(s)
    found = []
    for ch, k0 in (("r", 0), ("q", 1), ("t", 1)):
        if causality(fwd, s, atol, (ch,))[0] <= atol:
            continue
        for k in range(k0, L):
            steps = [st for st in audit_steps() if st + k < L]
            if any(past_change(fwd, base, s, flip_one(s, ch, st + k), st) > atol for st in steps):
                found.append(f"{ch}[s+{k}]")
                break
        else:
            found.append(f"{ch}[>s]")
    return found


def alignment(fwd: Forward, s: Seqs, atol: float) -> tuple[bool, float, list[int]]:
    """Does the prediction scored against r_s move when q_s (and c_s) alone changes?"""
    base = fwd(s)
    unmoved, smallest = [], math.inf
    for step in [st for st in audit_steps() if st >= 1]:
        rows = s.mask[:, step] & s.mask[:, step - 1]
        diff = (fwd(flip_one(s, "q", step))[:, step - 1] - base[:, step - 1]).abs()
        moved = float(diff[rows].max()) if rows.any() else math.inf
        smallest = min(smallest, moved)
        if moved <= atol:
            unmoved.append(step)
    return not unmoved, smallest, unmoved


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def forward_fn(name: str, model, train: bool, seed: int | None = 0) -> Forward:
    """The scored predictions as a function of the sequences; the RNG is reseeded before each
    pass (the same dropout and sampling draws) unless `seed` is None."""

    @torch.no_grad()
    def fwd(s: Seqs) -> torch.Tensor:
        set_mode(model, train)
        if seed is None:
            return scored(name, model, pykt_batch(s)).double()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return scored(name, model, pykt_batch(s)).double()

    return fwd


def audit_model(name: str, mods: dict, version: str | None = None) -> dict:
    """One model's row: leak (eval or train), max change, leak_via, aligned, notes. `mods` maps
    pykt's file names to their modules (or to the error that kept one from loading)."""
    row = {"model": name, "pykt_version": version or pykt_version()}
    file = {**SHIPPED, **REPO}[name]
    if isinstance(mods.get(file), str):
        row.update(ran=mods[file], leak=None, max_change=None, leak_via=None, aligned=None)
        return row
    s = random_seqs(0)
    err = None
    for dtype, atol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        try:
            quiet = contextlib.redirect_stdout(io.StringIO())
            with default_dtype(dtype), quiet, cuda_calls_in_place(name):
                torch.manual_seed(0)
                model = build(name, mods).to(dtype)
                res = {m: causality(forward_fn(name, model, m == "train"), s, atol) for m in MODES}
                eval_fwd = forward_fn(name, model, False)
                aligned, min_move, unmoved = alignment(eval_fwd, s, atol)
                control = future_change(eval_fwd, s)
                free = forward_fn(name, model, False, seed=None)  # eval without reseeding
                torch.manual_seed(1)
                eval_random = float((free(s) - free(s)).abs().max())
                leaking = [m for m in MODES if res[m][0] > atol]
                via = []
                if leaking:
                    via = leak_via(forward_fn(name, model, leaking[0] == "train"), s, atol)
            break
        except Exception as e:  # noqa: BLE001 - a model that cannot run is a finding to record
            err = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    else:
        row.update(ran=err, leak=None, max_change=None, leak_via=None, aligned=None)
        return row
    row.update(
        ran=True,
        leak=bool(leaking),
        max_change=max(res[m][0] for m in MODES),
        leak_via=via,
        aligned=aligned,
        dtype=str(dtype).removeprefix("torch."),
        atol=atol,
        leak_modes=leaking,
        first_leak_s={m: res[m][2] for m in leaking},
        worst_s={m: res[m][1] for m in leaking},
        future_change=control,  # > 0: past responses reach later predictions
        min_alignment_move=min_move,
        unaligned_steps=unmoved,
        eval_random_change=eval_random,  # two eval passes differ: the model samples at eval
        params=sum(p.numel() for p in model.parameters()),
    )
    with default_dtype(dtype), contextlib.redirect_stdout(io.StringIO()):
        row.update(probe(name, model, mods))
    return row


MODES = ("eval", "train")
# -- the table --------------------------------------------------------------------------------


def read_rows(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def _yes_no(x) -> str:
    return "-" if x is None else ("yes" if x else "no")


def markdown(rows: list[dict]) -> str:
    """The audit as a markdown table, one row per model (those that did not run say why)."""
    head = "| model | ran | leak | max change | leaks via | aligned (reads q_s) | notes |"
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        ran = "yes" if r["ran"] is True else str(r["ran"])
        mc = "-" if r.get("max_change") is None else f"{r['max_change']:.1e}"
        via = ", ".join(r.get("leak_via") or []) or "-"
        notes = str(r.get("notes") or "").replace("|", "/")
        cells = [r["model"], ran, _yes_no(r.get("leak")), mc, via, _yes_no(r.get("aligned")), notes]
        lines.append("| " + " | ".join(cells) + " |")
    v = sorted({str(r.get("pykt_version")) for r in rows})
    lines.append("")
    lines.append(
        f"pykt-toolkit {', '.join(v)}; s is the step whose response r_s pykt scores the prediction "
        "against; `r[s+0]`: the response being predicted reaches its own prediction."
    )
    return "\n".join(lines)


def load_each(names: list[str], src: str | None) -> dict:
    """{file: module or the error that kept it from loading}, one file at a time."""
    mods: dict = {}
    for file in sorted({{**SHIPPED, **REPO}[n] for n in names}):
        try:
            if src is None:
                mods.update(load_pykt("cpu", (file,)))
            else:
                mods.update(load_pykt("cpu", (file,), root=Path(src), pkg="_pykt_src_models"))
        except SystemExit as e:  # a module the file imports is missing
            mods[file] = str(e)
    return mods


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="*", choices=[*SHIPPED, *REPO], default=None)
    p.add_argument("--out", default="benchmarks/results/peer_audit_cpu.json")
    p.add_argument("--markdown", action="store_true", help="print the table from --out and exit")
    p.add_argument("--pykt-src", default=None, help="a checkout's pykt/models: audit its files")
    p.add_argument("--src-label", default="repository", help="pykt_version for --pykt-src rows")
    a = p.parse_args()
    if a.markdown:
        print(markdown(read_rows(a.out)))
        return
    if a.pykt_src is None and find_pykt_models() is None:
        print(f"skipped: pykt-toolkit is not installed ({INSTALL})")
        return
    if a.pykt_src is None and pykt_version() != PYKT_VERSION:
        print(f"warning: pykt-toolkit {pykt_version()} installed, {PYKT_VERSION} expected")
    every = list(SHIPPED) + (list(REPO) if a.pykt_src else [])
    names = a.models or every
    if a.pykt_src is None and set(names) & set(REPO):
        p.error(f"{sorted(set(names) & set(REPO))} are not in the 0.0.38 wheel: use --pykt-src")
    torch.set_num_threads(1)
    version = a.src_label if a.pykt_src else pykt_version()
    mods = load_each(names, a.pykt_src)
    rows = []
    for name in names:
        row = audit_model(name, mods, version)
        row["notes"] = NOTES.get(name, "")
        print(json.dumps(row), flush=True)
        rows.append(row)
    if names == every:  # the complete list: say what was not audited and why
        skipped = {} if a.pykt_src else dict.fromkeys(UNWIRED, "not wired in init_model")
        if a.pykt_src is None:
            skipped.update(dict.fromkeys(REPO, "not in the 0.0.38 wheel"))
        for name, why in skipped.items():
            empty = dict.fromkeys(("leak", "max_change", "leak_via", "aligned"))
            rows.append({"model": name, "pykt_version": version, "ran": why, **empty, "notes": ""})
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
