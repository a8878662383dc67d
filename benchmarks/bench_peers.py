"""Our DKT, SAKT and AKT against pykt-toolkit 0.0.38's, same run, same batch, same step.

    pip install --no-deps pykt-toolkit==0.0.38      # once; not a project dependency
    python benchmarks/bench_peers.py [--models dkt sakt akt] [--repeats 7] [--out FILE.json]
    python benchmarks/bench_peers.py --device cuda [--precision bf16] [--backend cuda]
    python benchmarks/bench_peers.py --batch 8 --len 50 --repeats 2    # smoke test

Setting: B=64, L=200, 100 skills, no problem ids, one batch of `kt_lib.audit.random_batch`
(seed 0, full rows) fed to both. Ours: the registry models at the paper preset, built by
bench_models' helper (`time_ours`). Theirs: pykt's classes with pykt's configs/kt_config.json
sizes (DKT emb 200 dropout 0.1; SAKT emb 256, 8 heads, dropout 0.2, 1 block, seq_len L; AKT
d_model 256, 1 block, dropout 0.05, d_ff 256, kq_same 1, final_fc_dim 512, 8 heads,
separate_qa False, l2 1e-5) and pykt's training-time inputs and loss (pykt.models.train_model:
DKT(c, r) gathered at the next concept, SAKT(c, r, c_next), AKT(q, r) dropping the first step;
binary_cross_entropy on the masked predictions in float64, outside autocast). Both sides time
the same thing: forward + loss + backward + AdamW step, and a no-grad forward.

Each model runs in a fresh subprocess (ours then theirs); `--device`, `--precision` and
`--backend` as in bench_models (pykt runs inside the same precision context; the attention
backend only concerns ours). Prints one JSON line per model: ours, theirs (time medians over
--repeats after a warm-up, params, kernels_per_step and peak_gpu_mb on CUDA, ops_per_step on
CPU) and `ours_over_theirs`, the time ratio (below 1: ours is faster), for the train step and
the inference pass; all lines are also written to --out.

pykt is loaded without `import pykt` by benchmarks/pykt_loader.py (pykt/models/{utils,dkt,
sakt,akt}.py executed by path, their module-level `device` set to `--device`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import torch
import torch.nn.functional as F
from bench_models import (
    NUM_C,
    B,
    L,
    add_device_args,
    device_argv,
    on_device,
    run_all,
    setting,
    time_ours,
)
from pykt_loader import PYKT_VERSION, load_pykt, pykt_models_dir, pykt_version
from timing import measure

MODELS = ("dkt", "sakt", "akt")


def pykt_sizes(name: str, n: int) -> dict:
    """pykt's configs/kt_config.json entry for `name` (with the constructors' other defaults)."""
    return {
        "dkt": {"emb_size": 200, "dropout": 0.1},
        "sakt": {"seq_len": n, "emb_size": 256, "num_attn_heads": 8, "dropout": 0.2, "num_en": 1},
        "akt": {
            "n_pid": 0,
            "d_model": 256,
            "n_blocks": 1,
            "dropout": 0.05,
            "d_ff": 256,
            "kq_same": 1,
            "final_fc_dim": 512,
            "num_attn_heads": 8,
            "separate_qa": False,
            "l2": 1e-5,
        },
    }[name]


def build_theirs(name: str, mods: dict, device: str, n: int):
    torch.manual_seed(0)
    kw = pykt_sizes(name, n)
    if name == "dkt":
        model = mods["dkt"].DKT(NUM_C, **kw)
    elif name == "sakt":
        model = mods["sakt"].SAKT(NUM_C, **kw)
    else:
        model = mods["akt"].AKT(NUM_C, **kw)
    return model.to(device)


def pykt_step_and_inference(name: str, model, batch, device: str):
    """(step, infer) closures as pykt.models.train_model's model_forward and cal_loss: inputs
    are the window without its last step (DKT, SAKT) or whole (AKT), predictions are for the
    next step, the loss a float64 BCE on the masked predictions (plus AKT's Rasch term)."""
    q, r, m = batch.q, batch.r, batch.mask
    c, cr, cshft, rshft, sm = q[:, :-1], r[:, :-1], q[:, 1:], r[:, 1:], m[:, 1:]
    kind = torch.device(device).type
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def predict():
        if name == "dkt":
            y = model(c, cr)
            return (y * F.one_hot(cshft, model.num_c)).sum(-1), 0.0
        if name == "sakt":
            return model(c, cr, cshft), 0.0
        y, reg = model(q, r, None)
        return y[:, 1:], reg

    def step():
        model.train()
        y, reg = predict()
        # probabilities into binary_cross_entropy: autocast refuses it, so pykt's loss runs
        # at full precision (float64, as theirs)
        with torch.autocast(kind, enabled=False):
            y = torch.masked_select(y, sm).double()
            loss = F.binary_cross_entropy(y, torch.masked_select(rshft, sm).double()) + reg
        opt.zero_grad()
        loss.backward()
        opt.step()

    def infer():
        model.eval()
        with torch.no_grad():
            predict()

    return step, infer


def _side(model, m: dict, sizes: str, config: dict) -> dict:
    out = {"params": sum(p.numel() for p in model.parameters()), "sizes": sizes, "config": config}
    out["train_step_s"] = round(m["train_step_s"], 4)
    out["inference_s"] = round(m["inference_s"], 4)
    out.update({k: v for k, v in m.items() if k not in out})
    return out


def bench_pair(
    name: str,
    repeats: int,
    device: str = "cpu",
    precision: str | None = None,
    backend: str | None = None,
    b: int = B,
    n: int = L,
) -> dict:
    mods = load_pykt(device, MODELS)
    with on_device(device, precision, backend) as prec:
        ours, batch, m_ours = time_ours(name, repeats, device, None, b, n)
        theirs = build_theirs(name, mods, device, n)
        step, infer = pykt_step_and_inference(name, theirs, batch, device)
        m_theirs = measure(step, infer, repeats, device)
    o = _side(ours, m_ours, "kt_lib paper preset", _config(ours))
    t = _side(theirs, m_theirs, "pykt configs/kt_config.json", pykt_sizes(name, n))
    res = {
        "model": name,
        "ours_over_theirs": {
            "train_step": round(m_ours["train_step_s"] / m_theirs["train_step_s"], 3),
            "inference": round(m_ours["inference_s"] / m_theirs["inference_s"], 3),
        },
        "ours": o,
        "theirs": t,
        "pykt": pykt_version(),
    }
    res.update(setting(device, prec, backend, b, n))
    return res


def _config(model) -> dict:
    skip = {"num_c", "num_pid", "K"}
    return {k: v for k, v in dataclasses.asdict(model.config).items() if k not in skip}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="*", choices=MODELS, default=list(MODELS))
    add_device_args(p)
    p.add_argument("--out", default="benchmarks/results/peers.json")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    pykt_models_dir()  # exits with the install command when pykt-toolkit is missing
    if a.one:
        res = bench_pair(a.one, a.repeats, a.device, a.precision, a.backend, a.batch, a.len)
        print(json.dumps(res))
        return
    if pykt_version() != PYKT_VERSION:
        print(
            f"warning: pykt-toolkit {pykt_version()} installed, {PYKT_VERSION} expected",
            file=sys.stderr,
        )
    run_all(__file__, a.models, device_argv(a), a.out)


if __name__ == "__main__":
    main()
