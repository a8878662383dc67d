"""pykt-toolkit 0.0.38's models under our causality audit and q_t alignment check.

    pip install --no-deps pykt-toolkit==0.0.38      # once; not a project dependency
    python benchmarks/bench_peer_audit.py [--models dkt atkt] [--out FILE.json]
    python benchmarks/bench_peer_audit.py --markdown [--out FILE.json]   # the table from the JSON

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
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from pykt_loader import INSTALL, PYKT_VERSION, find_pykt_models, load_pykt, pykt_version

# B batch, L steps (window), NQ questions, NC concepts
B, L, NQ, NC, D = 4, 20, 30, 10, 16
# what init_model.py builds in 0.0.38, with the pykt file that holds it
SHIPPED = {
    "dkt": "dkt",
    "dkt+": "dkt_plus",
    "dkt_forget": "dkt_forget",
    "kqn": "kqn",
    "dkvmn": "dkvmn",
    "deep_irt": "deep_irt",
    "skvmn": "skvmn",
    "sakt": "sakt",
    "saint": "saint",
    "akt": "akt",
    "atkt": "atkt",
    "atktfix": "atkt",
    "gkt": "gkt",
    "lpkt": "lpkt",
    "hawkes": "hawkes",
    "iekt": "iekt",
    "qdkt": "qdkt",
}
# files in 0.0.38 that neither init_model nor model_forward/evaluate wire up
UNWIRED = ("akt_que", "dkt_que", "iekt_ce", "saint_plus_plus")
# compared against in KT papers: in pykt-team/pykt-toolkit's repository (whose setup.py also
# says 0.0.38) but not in the 0.0.38 package on PyPI
NOT_SHIPPED = (
    "simplekt",
    "sparsekt",
    "folibikt",
    "stablekt",
    "dimkt",
    "atdkt",
    "bakt_time",
    "qikt",
    "dtransformer",
    "extrakt",
    "robustkt",
)
GAP_BUCKETS = 8  # DKT-forget's repeat gap, sequence gap and past count, capped


@dataclass
class Seqs:
    """A window of L steps per student (pykt's loader cuts it into x[:, :-1] and x[:, 1:])."""

    q: torch.Tensor  # [B, L] question ids
    r: torch.Tensor  # [B, L] responses 0/1
    t: torch.Tensor  # [B, L] timestamps (seconds), non-decreasing
    mask: torch.Tensor  # [B, L] bool, valid steps (right-padded)

    @property
    def c(self) -> torch.Tensor:  # [B, L] the question's concept (one per question)
        return (self.q % NC) * self.mask

    def clone(self) -> Seqs:
        return Seqs(self.q.clone(), self.r.clone(), self.t.clone(), self.mask)


def random_seqs(seed: int = 0) -> Seqs:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([L, *torch.randint(L // 2, L + 1, (B - 1,), generator=g).tolist()])
    mask = torch.arange(L)[None] < lengths[:, None]
    q = torch.randint(0, NQ, (B, L), generator=g) * mask
    r = torch.randint(0, 2, (B, L), generator=g) * mask
    t = torch.randint(1, 4000, (B, L), generator=g).cumsum(1) * mask
    return Seqs(q, r, t, mask)


def _buckets(x: torch.Tensor) -> torch.Tensor:
    return torch.log2(x.clamp(min=1).double()).long().clamp(0, GAP_BUCKETS - 1)


def pykt_batch(s: Seqs) -> dict[str, torch.Tensor]:
    """pykt's KTDataset item, batched: x[:, :-1] and shft_x = x[:, 1:], both zeroed by `masks`."""
    m = s.mask[:, 1:] & s.mask[:, :-1]  # [B, L-1]
    # LPKT's interval time (minutes since the previous step, bucketed) and DKT-forget's gaps:
    # features of step j computed from steps <= j, as pykt's preprocessing does
    it = torch.cat([torch.zeros_like(s.t[:, :1]), (s.t[:, 1:] - s.t[:, :-1]) // 60], 1)
    c = s.c
    same = c[:, :, None] == c[:, None, :]  # [B, L, L] same concept
    before = torch.ones(L, L).tril(-1).bool()  # key strictly before the query
    idx = torch.arange(L)
    last = torch.where(same & before, idx[None, None], -1).amax(-1)  # [B, L]
    raw = {
        "qseqs": s.q,
        "cseqs": c,
        "rseqs": s.r,
        "tseqs": s.t,
        "itseqs": _buckets(it + 1),
        "rgaps": torch.where(last >= 0, _buckets(idx - last) + 1, 0),
        "sgaps": _buckets(torch.cat([torch.zeros_like(s.t[:, :1]), s.t.diff(dim=1)], 1) // 60),
        "pcounts": (same & before).sum(-1).clamp(max=GAP_BUCKETS - 1),
    }
    d = {}
    for k, x in raw.items():
        d[k] = x[:, :-1] * m
        d["shft_" + k] = x[:, 1:] * m
    d["masks"], d["smasks"] = m, m
    return d


# -- building pykt's models at tiny sizes, and calling them as evaluate() does ----------------


def build(name: str, mods: dict):
    """pykt's class for `name` at tiny sizes (kt_config.json's structure, d 16)."""
    m = mods[SHIPPED[name]]
    if name == "dkt":
        return m.DKT(NC, D, dropout=0.1)
    if name == "dkt+":
        return m.DKTPlus(NC, D, lambda_r=0.01, lambda_w1=0.003, lambda_w2=3.0, dropout=0.1)
    if name == "dkt_forget":
        return m.DKTForget(NC, GAP_BUCKETS, GAP_BUCKETS, GAP_BUCKETS, D, dropout=0.1)
    if name == "kqn":
        return m.KQN(NC, D, D, D, dropout=0.1)
    if name in ("dkvmn", "deep_irt", "skvmn"):
        cls = {"dkvmn": "DKVMN", "deep_irt": "DeepIRT", "skvmn": "SKVMN"}[name]
        return getattr(m, cls)(NC, D, 5, dropout=0.1)
    if name == "sakt":
        return m.SAKT(NC, L, D, 2, 0.1, num_en=1)
    if name == "saint":
        return m.SAINT(NQ, NC, L, D, 2, 0.1, n_blocks=1)
    if name == "akt":
        return m.AKT(NC, NQ, D, 1, 0.1, d_ff=D, final_fc_dim=D, num_attn_heads=2)
    if name in ("atkt", "atktfix"):
        return m.ATKT(NC, D, D, D, attention_dim=D, dropout=0.1, fix=name == "atktfix")
    if name == "gkt":
        graph = torch.rand(NC, NC, generator=torch.Generator().manual_seed(1))
        return m.GKT(NC, D, D, graph_type="dense", graph=graph, dropout=0.1)
    if name == "lpkt":
        # pykt's lpkt_utils.generate_qmatrix: [num_q + 1, num_c + 1], the last column unused
        qm = F.pad(F.one_hot(torch.arange(NQ + 1) % NC, NC), (0, 1)).to(torch.get_default_dtype())
        return m.LPKT(GAP_BUCKETS, GAP_BUCKETS, NQ, NC, D, D, D, dropout=0.1, q_matrix=qm)
    if name == "hawkes":
        model = m.HawkesKT(NC, NQ, D, time_log=5)
        model.apply(model.init_weights)
        model.gpu = ""  # hawkes.py:98 calls mask.cuda() unless gpu == "": it cannot run on CPU
        return model
    if name == "iekt":
        return m.IEKT(NQ, NC, D, max_concepts=1, dropout=0.1, device="cpu")
    if name == "qdkt":
        return m.QDKT(NQ, NC, D, dropout=0.1, device="cpu")
    raise KeyError(name)


def scored(name: str, model, d: dict) -> torch.Tensor:
    """y [B, L-1]: y[:, s-1] is what evaluate()'s branch for `name` scores against r_s."""
    q, c, r = d["qseqs"], d["cseqs"], d["rseqs"]
    qs, cs, rs = d["shft_qseqs"], d["shft_cseqs"], d["shft_rseqs"]
    cq, cc, cr = (torch.cat((x[:, :1], xs), 1) for x, xs in ((q, qs), (c, cs), (r, rs)))
    if name in ("dkt", "dkt+"):
        return (model(c, r) * F.one_hot(cs, NC)).sum(-1)
    if name == "dkt_forget":
        return (model(c, r, d) * F.one_hot(cs, NC)).sum(-1)
    if name in ("dkvmn", "deep_irt", "skvmn"):
        return model(cc, cr)[:, 1:]
    if name in ("kqn", "sakt"):
        return model(c, r, cs)
    if name == "saint":
        return model(cq, cc, r)[:, 1:]
    if name == "akt":
        return model(cc, cr, cq)[0][:, 1:]
    if name in ("atkt", "atktfix"):
        return (model(c, r)[0] * F.one_hot(cs, NC)).sum(-1)
    if name == "gkt":
        return model(cc, cr)
    if name == "lpkt":
        cit = torch.cat((d["itseqs"][:, :1], d["shft_itseqs"]), 1)
        return model(cq, cr, cit)[:, 1:]
    if name == "hawkes":
        ct = torch.cat((d["tseqs"][:, :1], d["shft_tseqs"]), 1)
        return model(cc, cq, ct, cr)[:, 1:]
    # iekt, qdkt (que_type_models): predict_one_step on the batch, concepts as [B, L-1, 1]
    dq = dict(d, cseqs=c[..., None], shft_cseqs=cs[..., None])
    return model.predict_one_step(dq)


def set_mode(model, train: bool) -> None:
    # pykt's que models (iekt, qdkt) override .train() with a training loop; their net is .model
    net = model.model if hasattr(model, "predict_one_step") else model
    net.train(train)


# -- the audit --------------------------------------------------------------------------------

Forward = Callable[[Seqs], torch.Tensor]


def perturb(
    s: Seqs, step: int, g: torch.Generator, channels: tuple[str, ...] = ("r", "q", "t")
) -> Seqs:
    """Copy of `s` with r[:, step:] and q[:, step+1:], t[:, step+1:] redrawn (`channels` only)."""
    p = s.clone()
    n = L - step - 1
    if "r" in channels:
        p.r[:, step:] = torch.randint(0, 2, (B, L - step), generator=g) * s.mask[:, step:]
    if n > 0 and "q" in channels:
        p.q[:, step + 1 :] = torch.randint(0, NQ, (B, n), generator=g) * s.mask[:, step + 1 :]
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
    diff = (fwd(p)[:, :step] - base[:, :step]).abs()
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


def audit_model(name: str, mods: dict) -> dict:
    """One model's row: leak (eval or train), max change, leak_via, aligned, notes."""
    row = {"model": name, "pykt_version": pykt_version()}
    s = random_seqs(0)
    err = None
    for dtype, atol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        try:
            with default_dtype(dtype), contextlib.redirect_stdout(io.StringIO()):
                torch.manual_seed(0)
                model = build(name, mods).to(dtype)
                res = {m: causality(forward_fn(name, model, m == "train"), s, atol) for m in MODES}
                eval_fwd = forward_fn(name, model, False)
                aligned, min_move, unmoved = alignment(eval_fwd, s, atol)
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
        min_alignment_move=min_move,
        unaligned_steps=unmoved,
        eval_random_change=eval_random,  # two eval passes differ: the model samples at eval
        params=sum(p.numel() for p in model.parameters()),
    )
    return row


MODES = ("eval", "train")
# how evaluate() calls each model (cX = the whole window, X = steps 0..L-2, Xshft = 1..L-1), and
# what the audit found in pykt 0.0.38's code (line numbers of pykt/models/<file>.py)
NOTES: dict[str, str] = {
    "dkt": "DKT(c, r) gathered at cshft",
    "dkt+": "DKTPlus(c, r) gathered at cshft; the training loss also scores y gathered at c_t "
    "against r_t (lambda_r reconstruction term), a regulariser, not a prediction",
    "dkt_forget": "DKTForget(c, r, gaps) gathered at cshft; gaps (repeat, sequence, count) of "
    "step s built here from steps <= s",
    "kqn": "KQN(c, r, cshft)",
    "dkvmn": "DKVMN(cc, cr)[:, 1:]",
    "deep_irt": "DeepIRT(cc, cr)[:, 1:]",
    "skvmn": "SKVMN(cc, cr)[:, 1:]; leak: the Hop-LSTM writes hx[j,:] in place (skvmn.py:469) "
    "into the tensor already stored as hidden_state[s] (:474; cx is cloned first, hx is not), "
    "so a hop at s+1, chosen from q_{s+1}, rewrites the state behind the prediction for r_s",
    "sakt": "SAKT(c, r, cshft)",
    "saint": "SAINT(cq, cc, r)[:, 1:]",
    "akt": "AKT(cc, cr, cq)[0][:, 1:], Rasch on question ids",
    "atkt": "ATKT(c, r) gathered at cshft; leak: softmax over the whole sequence "
    "(atkt.py:57, nn.Softmax(dim=1)), so later LSTM outputs (r_s, c_{s+1}, ...) move the "
    "normaliser; train mode audits the plain forward (the adversarial pass is a loss term)",
    "atktfix": "ATKT(fix=True)(c, r) gathered at cshft: ut_mask before the softmax",
    "gkt": "GKT(cc, cr), a random dense graph",
    "lpkt": "LPKT(cq, cr, cit)[:, 1:], q_matrix as generate_qmatrix; draws its initial state "
    "with xavier_uniform_ in every forward (lpkt.py:74), eval included: random eval predictions",
    "hawkes": "HawkesKT(cc, cq, ct, cr)[:, 1:]; hawkes.py:98 calls mask.cuda() unless "
    "self.gpu == '' (it holds the module device): fails on a CPU-only machine; gpu='' set here",
    "iekt": "IEKT.predict_one_step (cq, cc, cr); samples cognition and acquisition levels "
    "(Categorical) in eval too: eval predictions are random",
    "qdkt": "QDKT.predict_one_step: QDKTNet(cq, cc, cr) gathered at qshft",
}


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="*", choices=list(SHIPPED), default=list(SHIPPED))
    p.add_argument("--out", default="benchmarks/results/peer_audit_cpu.json")
    p.add_argument("--markdown", action="store_true", help="print the table from --out and exit")
    a = p.parse_args()
    if a.markdown:
        print(markdown(read_rows(a.out)))
        return
    if find_pykt_models() is None:
        print(f"skipped: pykt-toolkit is not installed ({INSTALL})")
        return
    if pykt_version() != PYKT_VERSION:
        print(f"warning: pykt-toolkit {pykt_version()} installed, {PYKT_VERSION} expected")
    torch.set_num_threads(1)
    mods = load_pykt("cpu", tuple(sorted(set(SHIPPED.values()))))
    rows = []
    for name in a.models:
        row = audit_model(name, mods)
        row["notes"] = NOTES.get(name, "")
        print(json.dumps(row), flush=True)
        rows.append(row)
    for name in (*UNWIRED, *NOT_SHIPPED) if a.models == list(SHIPPED) else ():
        ran = "not wired in init_model" if name in UNWIRED else "not in the 0.0.38 wheel"
        rows.append(
            {
                "model": name,
                "pykt_version": pykt_version(),
                "ran": ran,
                "leak": None,
                "max_change": None,
                "leak_via": None,
                "aligned": None,
                "notes": "",
            }
        )
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
