"""Train a pyKT repository model under the workbook's recipe and protocol, to test whether a
published figure comes from a version of pyKT's code that reads the future.

    python benchmarks/peer_train.py --pykt-src CHECKOUT/pykt/models --label "pykt@fcbbe72" \
        --model sparsekt --data-dir ../shared/data/assist2015 --fold 0 \
        --out benchmarks/results/peer_train_sparsekt.json

`CHECKOUT` is any checkout of pykt-team/pykt-toolkit (`git archive REV pykt/models` is enough):
the question is the same model file at two revisions. pyKT's model is wrapped in a `KTModel`
(below) and trained by `kt_lib.train.fit` exactly as the studies train ours (the workbook recipe:
AdamW 1e-3, batches of 64 bucketed by length, clipping at 1, early stopping on the validation
AUC with patience 5, 30 epochs at most), on the same fold, then scored on the test file by
`kt_lib.evaluate` (per-question window AUC, pyKT's protocol). Only the model differs. One JSON
line per run is appended to --out (model, pykt label, sizes, best epoch, valid and test metrics,
seconds, machine); the causality audit of the same files is `bench_peer_audit.py`.

Models: sparsekt (top-k, emb_type qid_sparseattn) and sparsekt_soft (qid_accumulative_attn), at
our `sparsekt` paper preset's sizes mapped to pyKT's arguments by peer_zoo.their_sizes (d_model
256, 2 blocks, 4 heads, d_ff 256, final layers 256/256, dropout 0.1, k 5, ratio 0.8: the sizes
of our sparsekt rows in results/baselines.json; each row records them under `kwargs`); sakt
(pyKT's sakt.py at our `sakt` paper preset's sizes: 256, 8 heads, one block, dropout 0.5).
pyKT's SAKT predicts a window's steps 1.. only (its queries are the shifted questions): its step 0
is given p = 0.5, so compare it on `test["after_window_start"]`, every scored step but the first
of each 200-step window (`auc@pos2+`, every step but the student's first, also holds the first
steps of later windows: ASSIST2015's 47 test students past 200 steps).
`--side ours` trains our model of the same name and sizes instead, under the same recipe, and
`--side both` trains ours and then pyKT's: one row each, `side` says whose.
pyKT is not a project dependency: this script is run by hand (minutes to hours on one CPU core).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from peer_zoo import their_sizes  # noqa: E402
from pykt_loader import load_pykt  # noqa: E402

from kt_lib.data import load_bundle  # noqa: E402
from kt_lib.evaluate import (  # noqa: E402
    DEFAULT_PROTOCOL,
    evaluate,
    evaluate_protocols,
    predict,
    question_rows,
)
from kt_lib.metrics import binary_metrics  # noqa: E402
from kt_lib.models import build_model  # noqa: E402
from kt_lib.models.base import BaseConfig, KTModel, ModelOutput  # noqa: E402
from kt_lib.provenance import device_name  # noqa: E402
from kt_lib.train import TrainConfig, fit  # noqa: E402

# name -> (pyKT's file and class, its emb_type or None, whether its constructor takes a problem
# count after num_c, our registered model and its settings: the baselines study's rows')
TOPK, SOFT = {"selection": "topk", "k": 5}, {"selection": "soft", "ratio": 0.8}
PEERS = {
    "sparsekt": ("sparsekt", "sparseKT", "qid_sparseattn", True, "sparsekt", TOPK),
    "sparsekt_soft": ("sparsekt", "sparseKT", "qid_accumulative_attn", True, "sparsekt", SOFT),
    "sakt": ("sakt", "SAKT", None, False, "sakt", {}),
}
EPS = 1e-6  # pyKT's models return probabilities; logits of them clamped away from 0 and 1


@dataclass
class PeerConfig(BaseConfig):
    """The wrapped model's vocabulary (BaseConfig) and pyKT's constructor arguments."""

    model: str = "sparsekt"
    kwargs: dict | None = None


class PyktPeer(KTModel):
    """pyKT's model behind the workbook's API: batch -> pyKT's dcur -> logits for every step.

    pyKT's dcur holds x[:, :-1] and shft_x = x[:, 1:], each zeroed where it is padding (right
    padding: pyKT's `masks` on shft_x); sparseKT rebuilds the whole window as
    cat(x[:, :1], shft_x) and returns the prediction for each step t, so logits[:, t] is scored
    against r_t as ours are."""

    registry_name = "pykt_peer"
    config_cls = PeerConfig
    attends = False

    def __init__(self, config: PeerConfig, inner: torch.nn.Module):
        super().__init__(config)
        self.inner = inner

    def forward(self, batch, return_attention: bool = False) -> ModelOutput:
        m = batch.mask
        if self.config.model == "sakt":  # SAKT(q, r, qry): the prediction for steps 1.. only
            return ModelOutput(self._from_step1(batch))
        d = {"masks": m[:, 1:], "smasks": m[:, 1:]}
        for key, x in (("qseqs", batch.q), ("cseqs", batch.q), ("rseqs", batch.r)):
            d[key] = x[:, :-1] * m[:, :-1]  # a window of one step keeps its step 0
            d["shft_" + key] = x[:, 1:] * m[:, 1:]
        y = self.inner(d)
        p = (y[0] if isinstance(y, tuple) else y).clamp(EPS, 1 - EPS)
        return ModelOutput(torch.logit(p))

    def _from_step1(self, batch) -> torch.Tensor:
        """pyKT's SAKT on (x[:, :-1], shft_q): its row t-1 predicts step t; step 0, which it
        never predicts, gets logit 0 (p = 0.5) and no gradient."""
        m, B = batch.mask, batch.q.shape[0]
        first = torch.zeros(B, 1, device=m.device)
        if batch.q.shape[1] == 1:  # a batch of one-step windows: nothing for pyKT to read
            return first
        q, r = batch.q[:, :-1] * m[:, :-1], batch.r[:, :-1] * m[:, :-1]
        p = self.inner(q, r, batch.q[:, 1:] * m[:, 1:]).clamp(EPS, 1 - EPS)
        return torch.cat((first, torch.logit(p)), 1)


def after_window_start(model, data, max_len: int) -> dict[str, float]:
    """Per-question metrics over the scored steps that do not open a window of `max_len`
    (`step % max_len != 0`): the steps pyKT's SAKT predicts, on both sides alike."""
    pred = predict(model, data, max_len=max_len)
    keep = question_rows(pred) & (pred["step"] % max_len != 0)
    return binary_metrics(pred["y_true"][keep], pred["prob"][keep])


def build_peer(name: str, src: Path, num_c: int, max_len: int) -> tuple[PyktPeer, dict]:
    """pyKT's model `name` from the checkout `src` at our paper preset's sizes."""
    file, cls, emb_type, takes_pid, base, settings = PEERS[name]
    kw, _ = their_sizes(base, build_model(base, preset="paper", num_c=num_c, **settings).config)
    if emb_type is not None:
        kw["emb_type"] = emb_type
    mods = load_pykt("cpu", (file,), root=src, pkg=f"_peer_{abs(hash(str(src)))}")
    vocab = (num_c, 0) if takes_pid else (num_c,)  # no problem ids on either side
    inner = getattr(mods[file], cls)(*vocab, seq_len=max_len, **kw)
    return PyktPeer(PeerConfig(num_c=num_c, model=name, kwargs=kw), inner), kw


def build_ours(name: str, num_c: int) -> tuple[torch.nn.Module, dict]:
    """Our model of `name` at the paper preset (the settings that make it pyKT's variant)."""
    *_, base, settings = PEERS[name]
    model = build_model(base, preset="paper", num_c=num_c, **settings)
    return model, dataclasses.asdict(model.config)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pykt-src", required=True, help="a checkout's pykt/models")
    p.add_argument("--label", required=True, help="which revision, recorded in each row")
    p.add_argument("--model", choices=sorted(PEERS), default="sparsekt")
    p.add_argument("--side", choices=("pykt", "ours", "both"), default="pykt",
                   help="whose model to train (both: ours, then pyKT's)")  # fmt: skip
    p.add_argument("--data-dir", required=True)
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--patience", type=int, default=5)
    p.add_argument("--max-students", type=int, default=None, help="a quick trial on fewer")
    p.add_argument("--out", default="benchmarks/results/peer_train_sparsekt.json")
    a = p.parse_args()
    torch.set_num_threads(1)
    bundle = load_bundle(a.data_dir, "pykt", fold=a.fold)
    train, valid, test = bundle.train, bundle.valid, bundle.test
    if a.max_students:
        train, valid, test = (
            s.subset(range(min(a.max_students, len(s)))) for s in (train, valid, test)
        )
    cfg = TrainConfig.recipe(
        "workbook", epochs=a.epochs, patience=a.patience, progress=False, verbose=True
    )
    for side in ("ours", "pykt") if a.side == "both" else (a.side,):
        torch.manual_seed(0)
        if side == "ours":
            model, kw = build_ours(a.model, train.num_c)
        else:
            model, kw = build_peer(a.model, Path(a.pykt_src), train.num_c, cfg.max_len)
        t0 = time.perf_counter()
        res = fit(model, train, valid, cfg, seed=0)
        row = {
            "model": a.model,
            "side": side,
            "pykt": a.label,
            "data": Path(a.data_dir).name,
            "fold": a.fold,
            "kwargs": kw,
            "max_students": a.max_students,
            "best_epoch": res.best_epoch,
            "epochs_run": len(res.history),
            "valid": evaluate(res.model, valid),
            # the default protocol with AUC by position (auc@pos2+: all but the first steps)
            "test": evaluate_protocols(res.model, test)[DEFAULT_PROTOCOL]
            | {"after_window_start": after_window_start(res.model, test, cfg.max_len)},
            "seconds": round(time.perf_counter() - t0, 1),
            "machine": device_name("cpu"),
            "history": res.history.to_dict("records"),
        }
        brief = {k: row[k] for k in ("model", "side", "pykt", "best_epoch")}
        brief["test"] = {k: row["test"][k] for k in ("auc", "auc@pos2+", "after_window_start")}
        print(json.dumps(brief), flush=True)
        with open(a.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
