"""How pykt-toolkit's models are built and called, for bench_peer_audit.

pykt's data convention (its KTDataset cuts a window of L steps into x[:, :-1] and shft_x =
x[:, 1:], zeroed past each student's end), each model built at tiny sizes, and each model called
as pykt/models/evaluate_model.py `evaluate` calls it, returning y [B, L-1] with y[:, s-1] the
prediction pykt scores against r_s. Models of the 0.0.38 package on PyPI (SHIPPED) and models
only in pykt-team/pykt-toolkit's repository (REPO, loaded from a checkout's pykt/models).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F

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
# says 0.0.38) but not in the 0.0.38 package on PyPI; audited from a checkout (--pykt-src)
REPO = {
    "simplekt": "simplekt",
    "sparsekt": "sparsekt",
    "sparsekt_soft": "sparsekt",  # the same file, emb_type qid_accumulative_attn
    "stablekt": "stablekt",
    "folibikt": "folibikt",
    "extrakt": "extrakt",
    "robustkt": "robustkt",
    "dtransformer": "dtransformer",
    "dimkt": "dimkt",
    "atdkt": "atdkt",
    "qikt": "qikt",
    "rekt": "rekt",
}
GAP_BUCKETS = 8  # DKT-forget's repeat gap, sequence gap and past count, capped
LEVELS = 10  # DIMKT's difficulty levels
# DIMKT's question and concept difficulty levels: pykt computes them per id from training logs;
# here one fixed random level per id (a table lookup reads no other step)
_G = torch.Generator().manual_seed(2)
Q_LEVEL, C_LEVEL = (torch.randint(1, LEVELS + 1, (n,), generator=_G) for n in (NQ, NC))


@dataclass
class Seqs:
    """A window of L steps per student (pykt's loader cuts it into x[:, :-1] and x[:, 1:])."""

    q: torch.Tensor  # [B, L] question ids
    r: torch.Tensor  # [B, L] responses 0/1
    t: torch.Tensor  # [B, L] timestamps (seconds), non-decreasing
    mask: torch.Tensor  # [B, L] bool, valid steps (right-padded)
    concepts: torch.Tensor | None = None  # [B, L] each step's concept; None: q mod NC

    @property
    def c(self) -> torch.Tensor:  # [B, L] the question's concept (one per question)
        return (self.q % NC if self.concepts is None else self.concepts) * self.mask

    def clone(self) -> Seqs:
        return Seqs(self.q.clone(), self.r.clone(), self.t.clone(), self.mask, self.concepts)


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
    c, n = s.c, s.q.shape[1]
    same = c[:, :, None] == c[:, None, :]  # [B, L, L] same concept
    before = torch.ones(n, n, device=c.device).tril(-1).bool()  # key strictly before the query
    idx = torch.arange(n, device=c.device)
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
        "qdseqs": Q_LEVEL.to(c.device)[s.q % NQ] * s.mask,  # ids past the table wrap around
        "sdseqs": C_LEVEL.to(c.device)[c % NC] * s.mask,
    }
    d = {}
    for k, x in raw.items():
        d[k] = x[:, :-1] * m
        d["shft_" + k] = x[:, 1:] * m
    d["masks"], d["smasks"] = m, m
    return d


# -- building pykt's models at tiny sizes, and calling them as evaluate() does ----------------


# the wheel's constructors' size arguments at the tiny sizes the audit builds (by keyword;
# `build(..., **sizes)` puts other sizes over them)
TINY: dict[str, dict] = {
    "dkt": {"emb_size": D, "dropout": 0.1},
    "dkt+": {"emb_size": D, "lambda_r": 0.01, "lambda_w1": 0.003, "lambda_w2": 3.0, "dropout": 0.1},
    "dkt_forget": {"emb_size": D, "dropout": 0.1},
    "kqn": {"n_hidden": D, "n_rnn_hidden": D, "n_mlp_hidden": D, "dropout": 0.1},
    "dkvmn": {"dim_s": D, "size_m": 5, "dropout": 0.1},
    "deep_irt": {"dim_s": D, "size_m": 5, "dropout": 0.1},
    "skvmn": {"dim_s": D, "size_m": 5, "dropout": 0.1},
    "sakt": {"emb_size": D, "num_attn_heads": 2, "dropout": 0.1, "num_en": 1},
    "saint": {"emb_size": D, "num_attn_heads": 2, "dropout": 0.1, "n_blocks": 1},
    "akt": {"d_model": D, "n_blocks": 1, "dropout": 0.1, "d_ff": D, "final_fc_dim": D,
            "num_attn_heads": 2},
    "atkt": {"skill_dim": D, "answer_dim": D, "hidden_dim": D, "attention_dim": D, "dropout": 0.1},
    "atktfix": {"skill_dim": D, "answer_dim": D, "hidden_dim": D, "attention_dim": D,
                "dropout": 0.1},
    "gkt": {"hidden_dim": D, "emb_size": D, "graph_type": "dense", "dropout": 0.1},
    "lpkt": {"d_a": D, "d_e": D, "d_k": D, "dropout": 0.1},
    "hawkes": {"emb_size": D, "time_log": 5},
    "iekt": {"emb_size": D, "max_concepts": 1, "dropout": 0.1},
    "qdkt": {"emb_size": D, "dropout": 0.1},
}  # fmt: skip


def build(name: str, mods: dict, nc: int = NC, nq: int = NQ, n: int = L, device="cpu", **sizes):
    """pykt's class for `name`: `nc` concepts, `nq` questions (problem ids; 0: none where the
    class allows it), windows of `n` steps, and the constructor's size arguments `sizes` over
    TINY's (kt_config.json's structure, d 16). Repository-only models: those of SIZED at any
    size (bench_peers --pykt-src), the others at tiny sizes only."""
    if name in REPO:
        if name not in SIZED and ((nc, nq, n) != (NC, NQ, L) or sizes):
            raise NotImplementedError(f"{name}: repository-only models are built at tiny sizes")
        return build_repo(name, mods, nc, nq, n, **sizes)
    m = mods[SHIPPED[name]]
    kw = {**TINY[name], **sizes}
    if name == "dkt":
        return m.DKT(nc, **kw)
    if name == "dkt+":
        return m.DKTPlus(nc, **kw)
    if name == "dkt_forget":
        return m.DKTForget(nc, GAP_BUCKETS, GAP_BUCKETS, GAP_BUCKETS, **kw)
    if name == "kqn":
        return m.KQN(nc, **kw)
    if name in ("dkvmn", "deep_irt", "skvmn"):
        cls = {"dkvmn": "DKVMN", "deep_irt": "DeepIRT", "skvmn": "SKVMN"}[name]
        return getattr(m, cls)(nc, **kw)
    if name == "sakt":
        return m.SAKT(nc, n, **kw)
    if name == "saint":
        return m.SAINT(nq, nc, n, **kw)
    if name == "akt":
        return m.AKT(nc, nq, **kw)
    if name in ("atkt", "atktfix"):
        return m.ATKT(nc, fix=name == "atktfix", **kw)
    if name == "gkt":
        graph = torch.rand(nc, nc, generator=torch.Generator().manual_seed(1))
        return m.GKT(nc, graph=graph, **kw)
    if name == "lpkt":
        # pykt's lpkt_utils.generate_qmatrix: [num_q + 1, num_c + 1], the last column unused
        qm = F.pad(F.one_hot(torch.arange(nq + 1) % nc, nc), (0, 1)).to(torch.get_default_dtype())
        return m.LPKT(GAP_BUCKETS, GAP_BUCKETS, nq, nc, q_matrix=qm, **kw)
    if name == "hawkes":
        model = m.HawkesKT(nc, nq, **kw)
        model.apply(model.init_weights)
        model.gpu = ""  # hawkes.py:98 calls mask.cuda() unless gpu == "": it cannot run on CPU
        return model
    if name == "iekt":
        return m.IEKT(nq, nc, device=device, **kw)
    if name == "qdkt":
        return m.QDKT(nq, nc, device=device, **kw)
    raise KeyError(name)


# the repository-only models bench_peers builds at its sizes (peer_zoo's table names them)
SIZED = (
    "simplekt",
    "sparsekt",
    "stablekt",
    "folibikt",
    "extrakt",
    "robustkt",
    "dimkt",
    "atdkt",
    "rekt",
)


def build_repo(name: str, mods: dict, nc: int = NC, nq: int = NQ, n: int = L, **sizes):
    """The repository-only models, with the emb_type of pykt's examples/wandb_<name>_train.py,
    at tiny sizes unless `sizes` (constructor keywords, SIZED models only) say otherwise."""
    m = mods[REPO[name]]
    attn = {"d_model": D, "n_blocks": 2, "d_ff": D, "final_fc_dim": D, "num_attn_heads": 2}
    attn["dropout"] = 0.1
    if name in ("simplekt", "stablekt"):
        cls = {"simplekt": "simpleKT", "stablekt": "stableKT"}[name]
        return getattr(m, cls)(nc, nq, seq_len=n, **{**attn, "final_fc_dim2": D, **sizes})
    if name in ("sparsekt", "sparsekt_soft"):  # top-k (k = 5) or soft selection (ratio 0.8)
        emb = "qid_sparseattn" if name == "sparsekt" else "qid_accumulative_attn"
        kw = {"final_fc_dim2": D, "emb_type": emb, "k_index": 5, "sparse_ratio": 0.8}
        return m.sparseKT(nc, nq, seq_len=n, **{**attn, **kw, **sizes})
    if name == "folibikt":
        return m.folibiKT(nc, nq, **{**attn, "emb_type": "qid_alibi", **sizes})
    if name == "extrakt":  # emb_type "qid": ALiBi's bias, no decay
        return m.extraKT(nc, nq, seq_len=n, **{**attn, **sizes})
    if name == "robustkt":
        return m.Robustkt(nc, nq, **{**attn, **sizes})
    if name == "dtransformer":
        kw = {"n_know": 4, "n_blocks": 3, "emb_type": "qid_cl", "proj": True}
        return m.DTransformer(NC, NQ, D, D, num_attn_heads=2, dropout=0.1, **kw)
    if name == "dimkt":
        kw = {"dropout": 0.1, "emb_size": D, "difficult_levels": LEVELS, "emb_type": "qid"}
        kw.update(sizes)
        return m.DIMKT(nq, nc, batch_size=B, num_steps=n - 1, **kw)
    if name == "atdkt":
        kw = {"emb_size": D, "dropout": 0.1, "emb_type": "qid", "num_attn_heads": 2, **sizes}
        return m.ATDKT(nq, nc, n, **kw)
    if name == "rekt":
        return m.ReKT(nc, nq, **{"d": D, "dropout": 0.1, "emb_type": "qid", **sizes})
    if name == "qikt":
        cfg = {"output_mode": "an", "output_c_next_lambda": 1, "output_q_next_lambda": 0}
        kw = {"max_concepts": 1, "mlp_layer_num": 2, "other_config": cfg}
        return m.QIKT(NQ, NC, D, dropout=0.1, emb_type="iekt", device="cpu", **kw)
    raise KeyError(name)


def scored(name: str, model, d: dict) -> torch.Tensor:
    """y [B, L-1]: y[:, s-1] is what evaluate()'s branch for `name` scores against r_s."""
    q, c, r = d["qseqs"], d["cseqs"], d["rseqs"]
    qs, cs, rs = d["shft_qseqs"], d["shft_cseqs"], d["shft_rseqs"]
    cq, cc, cr = (torch.cat((x[:, :1], xs), 1) for x, xs in ((q, qs), (c, cs), (r, rs)))
    if name in ("dkt", "dkt+"):
        return (model(c, r) * F.one_hot(cs, model.num_c)).sum(-1)
    if name == "dkt_forget":
        return (model(c, r, d) * F.one_hot(cs, model.num_c)).sum(-1)
    if name in ("dkvmn", "deep_irt", "skvmn"):
        return model(cc, cr)[:, 1:]
    if name in ("kqn", "sakt"):
        return model(c, r, cs)
    if name == "saint":
        return model(cq, cc, r)[:, 1:]
    if name == "akt":
        return model(cc, cr, cq)[0][:, 1:]
    if name in ("atkt", "atktfix"):
        return (model(c, r)[0] * F.one_hot(cs, model.num_c)).sum(-1)
    if name == "gkt":
        return model(cc, cr)
    if name == "lpkt":
        cit = torch.cat((d["itseqs"][:, :1], d["shft_itseqs"]), 1)
        return model(cq, cr, cit)[:, 1:]
    if name == "hawkes":
        ct = torch.cat((d["tseqs"][:, :1], d["shft_tseqs"]), 1)
        return model(cc, cq, ct, cr)[:, 1:]
    if name == "atdkt":
        return (model(d) * F.one_hot(cs, model.num_c)).sum(-1)
    if name in ("simplekt", "stablekt", "sparsekt", "sparsekt_soft"):
        y = model(d)
        # evaluate() slices model(dcur)[:, 1:]; sparseKT returns (preds, attn) in eval, a tuple
        # that slice cannot index, so its preds are taken
        return (y[0] if isinstance(y, tuple) else y)[:, 1:]
    if name in ("folibikt", "extrakt", "robustkt"):
        return model(cc, cr, cq)[0][:, 1:]
    if name == "dtransformer" and model.training:  # model_forward: the qid_cl path
        return model.get_cl_loss(cc, cr, cq)[0][:, 1:]
    if name == "dtransformer":
        return torch.sigmoid(model.predict(cc, cr, cq)[0])[:, 1:]
    if name == "rekt":  # evaluate_model.py: y = model(dcur), already [B, L-1]
        return model(d)
    if name == "dimkt":
        diff = (d[k] for k in ("sdseqs", "qdseqs", "shft_sdseqs", "shft_qdseqs"))
        sd, qd, sds, qds = diff
        return model(q, c, sd, qd, r, qs, cs, sds, qds)
    # iekt, qdkt, qikt (que_type_models): predict_one_step, concepts as [B, L-1, 1]
    dq = dict(d, cseqs=c[..., None], shft_cseqs=cs[..., None])
    return model.predict_one_step(dq)


QUE_MODELS = ("iekt", "qdkt", "qikt")  # pykt.config que_type_models: train_one_step


def _bce(y: torch.Tensor, r: torch.Tensor, sm: torch.Tensor) -> torch.Tensor:
    """cal_loss's binary_cross_entropy on the masked predictions, in float64 (outside autocast,
    which refuses binary_cross_entropy)."""
    with torch.autocast(y.device.type, enabled=False):
        y, t = torch.masked_select(y, sm).double(), torch.masked_select(r, sm).double()
        return F.binary_cross_entropy(y, t)


def training_loss(name: str, model, d: dict) -> torch.Tensor:
    """The loss pykt/models/train_model.py trains `name` on (model_forward + cal_loss, train
    mode): BCE of `scored`'s predictions against rshft, plus AKT's Rasch regulariser, DKT+'s
    reconstruction and waviness terms, ATKT's adversarial pass; the que models' train_one_step."""
    c, r, q = d["cseqs"], d["rseqs"], d["qseqs"]
    cs, rs, sm = d["shft_cseqs"], d["shft_rseqs"], d["smasks"]
    if name in QUE_MODELS:
        # pykt's loader hands responses over as floats (data_loader.py: FloatTensor), which
        # IEKT's BCEWithLogitsLoss needs as targets; qDKT casts them back with .long()
        dq = dict(d, cseqs=c[..., None], shft_cseqs=cs[..., None], rseqs=r.float())
        dq["shft_rseqs"] = rs.float()
        return model.train_one_step(dq)[1]
    if name == "akt":
        cc, cr, cq = (torch.cat((x[:, :1], d["shft_" + k]), 1) for k, x in
                      (("cseqs", c), ("rseqs", r), ("qseqs", q)))  # fmt: skip
        y, reg = model(cc, cr, cq)
        return _bce(y[:, 1:], rs, sm) + reg
    if name == "dkt+":
        y = model(c, r)
        y_next = (y * F.one_hot(cs, model.num_c)).sum(-1)
        y_curr = (y * F.one_hot(c, model.num_c)).sum(-1)
        loss_r = _bce(y_curr, r, sm)
        wave = y[:, 1:] - y[:, :-1]
        w1 = torch.masked_select(torch.norm(wave, p=1, dim=-1), sm[:, 1:]).mean() / model.num_c
        w2 = torch.masked_select(torch.norm(wave, p=2, dim=-1) ** 2, sm[:, 1:]).mean()
        w2 = w2 / model.num_c
        loss = _bce(y_next, rs, sm) + model.lambda_r * loss_r
        return loss + model.lambda_w1 * w1 + model.lambda_w2 * w2
    if name in ("atkt", "atktfix"):
        y, features = model(c, r)
        loss = _bce((y * F.one_hot(cs, model.num_c)).sum(-1), rs, sm)
        (g,) = torch.autograd.grad(loss, features, retain_graph=True)
        normalize = sys.modules[type(model).__module__]._l2_normalize_adv
        p_adv = (model.epsilon * normalize(g.data.float())).to(g.device)
        adv, _ = model(c, r, p_adv)
        return loss + model.beta * _bce((adv * F.one_hot(cs, model.num_c)).sum(-1), rs, sm)
    if name == "atdkt":  # model_forward: the emb_type's QT and IK terms too (zero with "qid")
        y, y2, y3 = model(d, train=True)
        if model.emb_type.endswith("predcurc"):  # cal_loss: l1 BCE + l2 QT (+ l3 IK: "his")
            loss = model.l1 * _bce((y * F.one_hot(cs, model.num_c)).sum(-1), rs, sm)
            return loss + model.l2 * y2 + (model.l3 * y3 if "his" in model.emb_type else 0)
        return _bce((y * F.one_hot(cs, model.num_c)).sum(-1), rs, sm)
    if name == "lpkt":  # cal_loss: BCELoss(reduction="none") summed, in the model's dtype
        y = torch.masked_select(scored(name, model, d), sm)
        return F.binary_cross_entropy(y, torch.masked_select(rs, sm).to(y.dtype), reduction="sum")
    return _bce(scored(name, model, d), rs, sm)


def probe(name: str, model, mods: dict) -> dict:
    """Checks beyond the audit, {field: finding}: sparseKT under evaluate()'s own slice, and
    DTransformer's training path without the contrastive loss (model_forward calls get_loss
    when emb_type is not qid_cl)."""
    d = pykt_batch(random_seqs(0))
    cc, cr, cq = (torch.cat((d[k][:, :1], d["shft_" + k]), 1) for k in ("cseqs", "rseqs", "qseqs"))
    try:
        if name in ("sparsekt", "sparsekt_soft"):
            set_mode(model, False)
            model(d)[:, 1:]  # evaluate_model.py: y = model(dcur); y = y[:,1:]
            return {"evaluate_branch": "ran"}
        if name == "dtransformer":
            kw = {"n_know": 4, "n_blocks": 3, "emb_type": "qid"}
            other = mods["dtransformer"].DTransformer(NC, NQ, D, D, num_attn_heads=2, **kw)
            other.get_loss(cc, cr, cq)
            return {"get_loss": "ran"}
    except Exception as e:  # noqa: BLE001 - the finding is the error
        key = "get_loss" if name == "dtransformer" else "evaluate_branch"
        return {key: f"{type(e).__name__}: {e}"}
    return {}


# the files that call .cuda() unconditionally (stablekt.py:313-318, folibikt.py:308-313,
# extrakt.py:312-317, dimkt.py:81)
CUDA_CALLS = ("stablekt", "folibikt", "extrakt", "dimkt")


@contextlib.contextmanager
def cuda_calls_in_place(name: str):
    """Without CUDA, `.cuda()` returns the tensor where it is while `name` in CUDA_CALLS is
    audited (restored after), so those models run on CPU in float64."""
    if name not in CUDA_CALLS or torch.cuda.is_available():
        yield
        return
    cuda = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *a, **k: self
    try:
        yield
    finally:
        torch.Tensor.cuda = cuda


def set_mode(model, train: bool) -> None:
    # pykt's que models (iekt, qdkt) override .train() with a training loop; their net is .model
    net = model.model if hasattr(model, "predict_one_step") else model
    net.train(train)


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
    # the repository-only models (pykt/models/<file>.py of the checkout audited)
    "simplekt": "simpleKT(dcur)[:, 1:]",
    "sparsekt": "sparseKT(dcur), emb_type qid_sparseattn: in eval it returns (preds, attn), which "
    "evaluate()'s y = model(dcur); y[:,1:] cannot slice (TypeError, evaluate_model.py:104-106); "
    "its preds are audited",
    "sparsekt_soft": "sparseKT(dcur), emb_type qid_accumulative_attn (soft selection, sparse_ratio "
    "0.8); returns (preds, attn) in eval as the top-k branch does: its preds are audited",
    "stablekt": "stableKT(dcur)[:, 1:]; calls .cuda() unconditionally (stablekt.py:313-318): "
    "run here with .cuda() a no-op",
    "folibikt": "folibiKT(cc, cr, cq)[0][:, 1:], emb_type qid_alibi; .cuda() unconditionally "
    "(folibikt.py:308-313): run here with .cuda() a no-op",
    "extrakt": "extraKT(cc, cr, cq)[0][:, 1:]; .cuda() unconditionally (extrakt.py:312-317): "
    "run here with .cuda() a no-op",
    "robustkt": "Robustkt(cc, cr, cq)[0][:, 1:]",
    "dtransformer": "eval: sigmoid(predict(cc, cr, cq)[0])[:, 1:]; train: get_cl_loss (qid_cl). "
    "get_loss, the path without CL (emb_type not qid_cl, or batches shorter than MIN_SEQ_LEN), "
    "reads pid before setting it (dtransformer.py:225-226, parameter named pids): "
    "UnboundLocalError, so that path cannot train",
    "dimkt": "DIMKT(q, c, sd, qd, r, qshft, cshft, sdshft, qdshft); difficulty levels from a "
    "fixed table per id here (pykt computes them from the training logs); .cuda() "
    "unconditionally (dimkt.py:81): run here with .cuda() a no-op",
    "atdkt": "ATDKT(dcur) gathered at cshft, emb_type qid",
    "qikt": "QIKT.predict_one_step, emb_type iekt, output_mode an",
    "rekt": "ReKT(dcur), already aligned to shft; reads shft_* only (step 0 of a window is never "
    "read); a problem or concept new to the window reads slot 0 of its state table, which step 0 "
    "overwrote (rekt.py: last_*_time starts at 0); state tables of 199 rows and 200 gap rows: "
    "windows longer than 200 steps fail",
}
