"""Every model both we and pykt-toolkit 0.0.38 have, ours against theirs, same run, same batch.

    pip install --no-deps pykt-toolkit==0.0.38      # once; not a project dependency
    python benchmarks/bench_peers.py [--models dkt sakt akt] [--repeats 7] [--out FILE.json]
    python benchmarks/bench_peers.py --device cuda [--precision bf16] [--backend cuda]
    python benchmarks/bench_peers.py --batch 8 --len 50 --repeats 2    # smoke test
    python benchmarks/bench_peers.py --pykt-src CHECKOUT/pykt/models [--src-label LABEL]

The models: benchmarks/peer_zoo.py's SHARED table (our registry name -> pyKT's model, pyKT's
constructor sizes read from our `paper` preset where both have the size, kt_config.json's
otherwise). A model of ours not registered, or whose pyKT model the installed wheel lacks
(simpleKT, DIMKT, AT-DKT, ... live only in pyKT's repository), gets a row with `skipped` and the
reason, so models registered later are benchmarked with no edit. `--pykt-src` names a checkout's
pykt/models: the repository-only models (peer_models.SIZED) are then built from its files (their
rows' `pykt` is `--src-label`), the wheel's from the wheel; CL4KT is in neither. stableKT,
foliBiKT and extraKT import einops (not a project dependency: put it on PYTHONPATH).

Setting: B=64, L=200, 100 skills, one batch of `kt_lib.audit.random_batch` (seed 0, full rows)
fed to both; no problem ids, except for the models that need them (qdkt, dimkt, atdkt, iekt,
rekt: 1000 problem ids, drawn apart from the skills; pyKT gets them as its questions). Ours: the
registry model at the
paper preset, built by bench_models' helper (`build_ours`). Theirs: built by peer_models.build
at those sizes, trained on the loss pykt.models.train_model computes (peer_models.
training_loss: model_forward's inputs, the window without its last step or whole, predictions
for the next step, float64 BCE on the masked predictions, plus AKT's Rasch term, DKT+'s
regularisers, ATKT's adversarial pass, the que models' train_one_step) and called for
inference as evaluate_model does (peer_models.scored). Both sides time the same thing: forward
+ loss + backward + AdamW step, and a no-grad forward.

Each model runs in a fresh subprocess, both sides built there and timed in alternating rounds
(timing.measure_pair: one warm-up call each, then --repeats rounds of one call per side, ours
first on even rounds, theirs on odd ones), so background load lands on both alike; each side's
peak memory comes from a fresh process of its own that builds that side alone (`side_peaks`),
so neither includes the other's model, batch, gradients or our scratch pool. DKVMN, Deep-IRT
and SKVMN: ours is built at pyKT's tied sizes (d_key = d_summary = d_value = pyKT's dim_s;
peer_zoo.tied_sets), said in `notes` and `ours.sets`. `--device`, `--precision` and `--backend`
as in bench_models (pykt runs inside the same precision context; the attention backend only
concerns ours). Prints one JSON line per model: pykt_model, ours, theirs (time medians over the
rounds and each round's seconds, params, sizes, kernels_per_step and peak_gpu_mb on CUDA,
ops_per_step, matmul_share and peak_rss_mb on CPU), notes (every size the two could not match,
and what differs besides), `ours_over_theirs`, the ratio of the two medians (below 1: ours is
faster), and `ours_over_theirs_per_round`, the median of the rounds' ratios, for the train
step and the inference pass; `params_ours_over_theirs`; `rounds`, `timing_method` and
`peak_memory_method`; on CPU also `train_step_matmul_floor` (the ratio our matrix products
alone would give: `matmul_floor`); all lines are also written to --out.

pykt is loaded without `import pykt` by benchmarks/pykt_loader.py (pykt/models/<file>.py
executed by path, their module-level `device` set to `--device`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch
from bench_models import (
    NUM_C,
    B,
    L,
    add_device_args,
    build_ours,
    device_argv,
    on_device,
    run_subprocess,
    setting,
    write_rows,
)
from peer_models import (
    REPO,
    SHIPPED,
    Seqs,
    build,
    cuda_calls_in_place,
    pykt_batch,
    scored,
    set_mode,
    training_loss,
)
from peer_zoo import IGNORED, NUM_PID, SHARED, availability, their_sizes, tied_sets
from pykt_loader import PYKT_VERSION, find_pykt_models, load_pykt, pykt_models_dir, pykt_version
from timing import is_cuda, measure_pair, model_step_and_inference, peak_in_fresh_process, sync

MODELS = tuple(SHARED)
SRC_PKG = "_pykt_src_models"  # the stand-in package a checkout's files load under


def pykt_inputs(batch, device: str) -> dict:
    """pykt's KTDataset batch of our `batch`: questions are the problem ids where there are any
    (else the concepts), concepts our q; one timestamp a minute."""
    b, n = batch.q.shape
    t = torch.arange(n, device=batch.q.device).expand(b, n) * 60
    q = batch.q if batch.pid is None else batch.pid
    s = Seqs(q.long(), batch.r.long(), t, batch.mask, concepts=batch.q.long())
    d = pykt_batch(s)
    # AT-DKT's IK target (pykt's atdkt dataloader): the running correct ratio, steps <= j
    r, m = (d[k].to(torch.get_default_dtype()) for k in ("rseqs", "masks"))
    d["historycorrs"] = (r * m).cumsum(1) / m.cumsum(1).clamp(min=1) * m
    return {k: v.to(device) for k, v in d.items()}


def build_theirs(name: str, mods: dict, device: str, n: int, config: dict):
    """pyKT's model for our `name` at the sizes of our `config`; (model, sizes, notes)."""
    peer = SHARED[name]
    kw, notes = their_sizes(name, config)
    nq = NUM_PID if peer.needs_pid else 0
    torch.manual_seed(0)
    model = build(peer.pykt, mods, nc=NUM_C, nq=nq, n=n, device=device, **kw).to(device)
    moved = stray_tensors_to(model, device)
    if moved:
        why = "plain tensor attributes, which `.to()` leaves behind (pyKT's KQN fails without)"
        notes = [*notes, f"moved {', '.join(moved)} to {device}: {why}"]
    return model, kw, notes


def stray_tensors_to(model: torch.nn.Module, device: str) -> list[str]:
    """Moves the tensors a module keeps as plain attributes (neither parameters nor buffers, so
    `.to()` skips them: pyKT 0.0.38's KQN keeps its one-hot tables so) onto `device`; their
    names where any was elsewhere."""
    target, moved = torch.empty(0, device=device).device, []  # "cuda" -> cuda:0, as tensors say
    for prefix, mod in model.named_modules():
        for attr, value in list(vars(mod).items()):
            if isinstance(value, torch.Tensor) and value.device != target:
                setattr(mod, attr, value.to(device))
                moved.append(f"{prefix}.{attr}" if prefix else attr)
    return moved


def pykt_step_and_inference(name: str, model, d: dict):
    """(step, infer) closures: an AdamW step on pykt's training loss, a no-grad scored pass."""
    pykt = SHARED[name].pykt
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        set_mode(model, True)
        loss = training_loss(pykt, model, d)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def infer():
        set_mode(model, False)
        with torch.no_grad():
            scored(pykt, model, d)

    return step, infer


def _side(model, m: dict, sizes: str, config: dict) -> dict:
    out = {"params": sum(p.numel() for p in model.parameters()), "sizes": sizes, "config": config}
    out["train_step_s"] = round(m["train_step_s"], 4)
    out["inference_s"] = round(m["inference_s"], 4)
    out.update({k: v for k, v in m.items() if k not in out})
    return out


def load_theirs(name: str, device: str, src: str | None) -> dict:
    """pyKT's module for `name`: a checkout's file for the repository-only models, else the
    wheel's."""
    pykt = SHARED[name].pykt
    if pykt in REPO:
        if src is None:
            raise SystemExit(f"{name}: pyKT's {pykt} is in its repository only: use --pykt-src")
        return load_pykt(device, (REPO[pykt],), root=Path(src), pkg=SRC_PKG)
    return load_pykt(device, (SHIPPED[pykt],))


def matmul_floor(m_ours: dict, m_theirs: dict) -> dict:
    """On CPU: `train_step_matmul_floor`, the train-step ratio ours / theirs if everything of our
    step but its matrix products cost nothing (our step x its `matmul_share`, over their step).
    Both sides run the same products at the same sizes, so a target ratio below this floor
    cannot be met by faster attention or elementwise code, only by fewer or cheaper products."""
    share = m_ours.get("matmul_share")
    if share is None:
        return {}
    return {"train_step_matmul_floor": round(share * m_ours["train_step_s"]
                                             / m_theirs["train_step_s"], 3)}  # fmt: skip


SIDES = ("ours", "theirs")
MEMORY_STEPS = 3  # training steps (the first included) a side's memory process runs
TIMING_METHOD = (
    "alternating rounds in one process, both sides built: one warm-up call each, then --repeats "
    "rounds of one call per side, ours first on even rounds and theirs first on odd ones; train "
    "steps first, then inference; each side's time is its median over the rounds; "
    "ours_over_theirs = the ratio of the two medians, ours_over_theirs_per_round = the median "
    "of the rounds' ratios"
)
MEMORY_METHOD = {
    "cpu": f"peak_rss_mb: each side in a fresh process of its own (multiprocessing spawn) that "
    f"imports, builds that side alone (ours: prepared as in the timing) and runs {MEMORY_STEPS} "
    "training steps; that process's VmHWM (/proc/self/status; not ru_maxrss, which a spawned "
    "process inherits from its parent on Linux), so neither side's memory includes the other's",
    "cuda": f"peak_gpu_mb: each side in a fresh process of its own (multiprocessing spawn) that "
    f"builds that side alone, resets the peak and runs {MEMORY_STEPS} training steps; "
    "torch.cuda.max_memory_allocated there, so neither side's memory includes the other's",
}


def paper_config(name: str, num_pid: int, **sets):
    """Our config of `name` as build_ours makes it: the paper preset, `sets` over it."""
    from kt_lib.models import MODELS, make_config

    k = 4 if MODELS[name].ordinal else 2
    return make_config(name, None, None, "paper", num_c=NUM_C, num_pid=num_pid, K=k, **sets)


def our_sets(name: str, num_pid: int) -> tuple[dict, list[str]]:
    """Our fields set over the paper preset for the pair (peer_zoo.tied_sets: pyKT's tied sizes)
    and the note saying so."""
    return tied_sets(name, paper_config(name, num_pid))


def their_config(name: str, sets: dict, num_pid: int) -> dict:
    """Our config's sizes (vocabulary left out) as built for the pair: pyKT's are read from it."""
    config = dataclasses.asdict(paper_config(name, num_pid, **sets))
    return {k: v for k, v in config.items() if k not in IGNORED}


def side_memory(name: str, side: str, device, precision, backend, b: int, n: int, src) -> None:
    """One side of the pair alone, as the timing builds it, then MEMORY_STEPS training steps:
    run by `peak_in_fresh_process`, which reads that process's peak afterwards (on CUDA from
    the reset here on: the steps, with the model resident)."""
    peer = SHARED[name]
    num_pid = NUM_PID if peer.needs_pid else 0
    sets, _ = our_sets(name, num_pid)
    mods = load_theirs(name, device, src) if side == "theirs" else None
    with on_device(device, precision, backend), cuda_calls_in_place(peer.pykt):
        if side == "ours":
            model, batch = build_ours(name, device, sets, b, n, num_pid)
            step, _ = model_step_and_inference(model, batch)
        else:
            from kt_lib.audit import random_batch

            k = paper_config(name, num_pid).K
            batch = random_batch(NUM_C, B=b, L=n, num_pid=num_pid, K=k, seed=0, ragged=False)
            batch = batch.to(device)  # build_ours' batch, without our model
            model, _, _ = build_theirs(name, mods, device, n, their_config(name, sets, num_pid))
            step, _ = pykt_step_and_inference(name, model, pykt_inputs(batch, device))
        if is_cuda(device):
            sync(device)
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(MEMORY_STEPS):
            step()
        sync(device)


def side_peaks(name: str, device, precision, backend, b: int, n: int, src) -> dict:
    """{side: peak memory} of each side in its own fresh process (`side_memory`)."""
    args = (device, precision, backend, b, n, src)
    return {s: peak_in_fresh_process(side_memory, name, s, *args, device=device) for s in SIDES}


def pair_row(models, m_ours: dict, m_theirs: dict, per_round: dict) -> dict:
    """The row's timing part: the ratios, the floor and each side's figures (`_side` adds the
    parameters; `models`: (ours, theirs), their configs and sizes notes)."""
    (ours, config, sizes), (theirs, kw) = models
    side_o = _side(ours, m_ours, sizes, config)
    side_t = _side(theirs, m_theirs, "ours where pyKT has the size, else kt_config.json", kw)
    return {
        "ours_over_theirs": {
            "train_step": round(m_ours["train_step_s"] / m_theirs["train_step_s"], 3),
            "inference": round(m_ours["inference_s"] / m_theirs["inference_s"], 3),
        },
        "ours_over_theirs_per_round": {k: round(v, 3) for k, v in per_round.items()},
        **matmul_floor(m_ours, m_theirs),
        "params_ours_over_theirs": round(side_o["params"] / side_t["params"], 3),
        "ours": side_o,
        "theirs": side_t,
    }


def bench_pair(
    name: str,
    repeats: int,
    device: str = "cpu",
    precision: str | None = None,
    backend: str | None = None,
    b: int = B,
    n: int = L,
    src: str | None = None,
    label: str | None = None,
    memory: bool = True,
) -> dict:
    """One model's row: both sides timed in `repeats` alternating rounds (timing.measure_pair)
    in this process; with `memory`, each side's peak memory from a process of its own, run
    first (`side_peaks`)."""
    peer = SHARED[name]
    num_pid = NUM_PID if peer.needs_pid else 0
    sets, tie_notes = our_sets(name, num_pid)
    peaks = side_peaks(name, device, precision, backend, b, n, src) if memory else {}
    mods = load_theirs(name, device, src)
    # stableKT, foliBiKT, extraKT and DIMKT call .cuda() unconditionally: a no-op without CUDA
    with on_device(device, precision, backend) as prec, cuda_calls_in_place(peer.pykt):
        ours, batch = build_ours(name, device, sets, b, n, num_pid)
        config = their_config(name, sets, num_pid)
        theirs, kw, notes = build_theirs(name, mods, device, n, config)
        fns_o = model_step_and_inference(ours, batch)
        fns_t = pykt_step_and_inference(name, theirs, pykt_inputs(batch, device))
        m_ours, m_theirs, per_round = measure_pair(fns_o, fns_t, repeats, device)
    m_ours.update(peaks.get("ours", {}))
    m_theirs.update(peaks.get("theirs", {}))
    sizes = "kt_lib paper preset" + (", pyKT's tied sizes over it (notes)" if sets else "")
    how = MEMORY_METHOD["cuda" if is_cuda(device) else "cpu"] if memory else "not measured"
    res = {"model": name, "pykt_model": peer.pykt}
    res.update(pair_row(((ours, config, sizes), (theirs, kw)), m_ours, m_theirs, per_round))
    res["ours"]["sets"] = sets
    res.update(
        {
            "notes": [*tie_notes, *notes],
            "num_pid": num_pid,
            "pykt": label if peer.pykt in REPO else pykt_version(),
            "rounds": repeats,
            "timing_method": TIMING_METHOD,
            "peak_memory_method": how,
        }
    )
    res.update(setting(device, prec, backend, b, n))
    return res


def skipped(names: list[str], src: str | None = None) -> dict[str, str]:
    """{name: why} for the models that cannot run here (see peer_zoo.availability); `src`: a
    checkout's pykt/models, for the repository-only models."""
    from kt_lib.models import list_models

    root = find_pykt_models()
    files = {p.stem for p in root.glob("*.py")} if root else set()
    repo = {p.stem for p in Path(src).glob("*.py")} if src else set()
    why = {name: availability(name, set(list_models()), files, repo) for name in names}
    return {k: v for k, v in why.items() if v}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="*", choices=MODELS, default=list(MODELS))
    add_device_args(p)
    p.add_argument("--out", default="benchmarks/results/peers.json")
    p.add_argument(
        "--pykt-src",
        default=None,
        help="a checkout's pykt/models: the repository-only models are built from its files",
    )
    p.add_argument("--src-label", default="repository", help="`pykt` of the --pykt-src rows")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.pykt_src is not None and not (Path(a.pykt_src) / "utils.py").is_file():
        p.error(f"--pykt-src {a.pykt_src}: not a pykt/models folder (no utils.py)")
    return a


def one_argv(a: argparse.Namespace) -> list[str]:
    """The flags the per-model subprocess needs."""
    src = ["--pykt-src", a.pykt_src, "--src-label", a.src_label] if a.pykt_src else []
    return device_argv(a) + src


def main() -> None:
    a = parse_args()
    if a.pykt_src is None:
        pykt_models_dir()  # exits with the install command when pykt-toolkit is missing
    if a.one:
        args = (a.repeats, a.device, a.precision, a.backend, a.batch, a.len)
        print(json.dumps(bench_pair(a.one, *args, a.pykt_src, a.src_label)))
        return
    if find_pykt_models() is not None and pykt_version() != PYKT_VERSION:
        print(
            f"warning: pykt-toolkit {pykt_version()} installed, {PYKT_VERSION} expected",
            file=sys.stderr,
        )
    skip = skipped(a.models, a.pykt_src)
    results = []
    for name in a.models:
        if name in skip:
            res = {"model": name, "pykt_model": SHARED[name].pykt, "skipped": skip[name]}
        else:
            res = run_subprocess(__file__, name, one_argv(a))
        print(json.dumps(res), flush=True)
        results.append(res)
        write_rows(a.out, results)  # after each model: a run cut off keeps what finished


if __name__ == "__main__":
    main()
