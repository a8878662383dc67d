"""The models both kt_lib and pykt-toolkit have, for bench_peers: our registry name -> pyKT's
model name, pyKT's constructor sizes taken from our `paper` preset, and what stays unmatched.

pyKT's models are built by peer_models.build (the wheel's classes, sizes by keyword) and trained
and called by peer_models.training_loss / scored (pykt's train_model.py and evaluate_model.py),
so this table only says which sizes go where. Each of pyKT's size arguments is read from the
first of our config fields that exists (`SIZES`: their argument -> our candidate fields, then
pyKT's configs/kt_config.json value, used when our config has none of them: a mismatch noted in
the row). A model of ours that is not registered, or whose pyKT model the installed wheel lacks,
is skipped with the reason (`availability`), so models landing later need no edit here; the
repository-only ones run against a checkout's files (bench_peers --pykt-src). Where pyKT ties
sizes ours keeps apart (the DKVMN family's one dim_s for key, value and summary), ours is built
at pyKT's tied sizes for the speed pair (`tied_sets`), so both sides hold the same parameters.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from peer_models import REPO, SHIPPED

NUM_PID = 1000  # problem ids of the batch for the models that need them (needs_pid)
_ATTN = {
    "d_model": (("d",), 256),
    "n_blocks": (("n_blocks",), 1),
    "dropout": (("dropout",), 0.05),
    "d_ff": (("d_ff",), 256),
    "num_attn_heads": (("n_heads",), 8),
    "final_fc_dim": (("final_fc_dim",), 512),
}
_MEMORY = {
    "dim_s": (("dim_s", "d_value", "d"), 200),  # pyKT ties key, value and summary dims
    "size_m": (("size_m", "memory_size", "n_slots", "m"), 50),
    "dropout": (("dropout",), 0.2),
}
_TIED_MEMORY = {"d_key": "d_value", "d_summary": "d_value"}  # pyKT's dim_s is all three


@dataclass(frozen=True)
class Peer:
    pykt: str  # pyKT's model name (init_model.py / model_forward), a key of peer_models' tables
    sizes: dict[str, tuple[tuple[str, ...], object]]  # their argument -> (our fields, kt_config)
    fixed: dict[str, object] = field(default_factory=dict)  # their arguments set outright
    needs_pid: bool = False  # ours needs problem ids: the batch carries NUM_PID of them
    note: str = ""  # what differs whatever the sizes
    # our field -> our field whose value it takes for the speed pair (pyKT ties the two)
    tied: dict[str, str] = field(default_factory=dict)


SHARED: dict[str, Peer] = {
    "dkt": Peer("dkt", {"emb_size": (("d",), 200), "dropout": (("dropout",), 0.1)},
                note="one LSTM layer in pyKT (ours: n_layers)"),
    "dkt_plus": Peer("dkt+", {
        "emb_size": (("d",), 200), "dropout": (("dropout",), 0.1),
        "lambda_r": (("lambda_r",), 0.2), "lambda_w1": (("lambda_w1",), 1.0),
        "lambda_w2": (("lambda_w2",), 10.0)}),
    "sakt": Peer("sakt", {
        "emb_size": (("d",), 256), "num_attn_heads": (("n_heads",), 8),
        "dropout": (("dropout",), 0.2), "num_en": (("n_blocks",), 1)},
        note="pyKT's FFN inner size is emb_size (ours: d_ff); seq_len = L"),
    "saint": Peer("saint", {
        "emb_size": (("d",), 256), "num_attn_heads": (("n_heads",), 8),
        "dropout": (("dropout",), 0.2), "n_blocks": (("n_blocks",), 2)},
        note="pyKT's FFN inner size is emb_size (ours: d_ff, None = d); num_q 0 (no problem "
        "ids, as ours); seq_len = L"),
    "akt": Peer("akt", {**_ATTN, "kq_same": (("kq_same",), 1), "l2": (("l2",), 1e-5)},
                fixed={"separate_qa": False},
                note="n_pid 0 (no problem ids, no Rasch term on either side); pyKT's second "
                "output layer is fixed at 256 (ours: final_fc_dim2); pyKT builds an FFN in each "
                "of its 3 layers and runs 2 (apply_pos False in one): 526,080 more parameters, "
                "never used"),
    "atkt": Peer("atktfix", {
        k: ((k,), v) for k, v in {"skill_dim": 80, "answer_dim": 80, "hidden_dim": 80,
                                  "attention_dim": 80, "epsilon": 10, "beta": 0.2,
                                  "dropout": 0.2}.items()},
        note="pyKT's atktfix (the causal softmax), as ours"),
    "qdkt": Peer("qdkt", {"emb_size": (("d",), 200), "dropout": (("dropout",), 0.1)},
                 needs_pid=True, note="pyKT's QDKT, emb_type qaid; problem ids as questions"),
    "dimkt": Peer("dimkt", {"emb_size": (("d",), 128), "dropout": (("dropout",), 0.2),
                            "difficult_levels": (("difficult_levels",), 100)}, needs_pid=True,
                  note="pyKT's difficulty levels: peer_models' fixed table (1-10 per id), not "
                  "counted from training logs as ours"),
    "atdkt": Peer("atdkt", {"emb_size": (("d",), 300), "dropout": (("dropout",), 0.05),
                            "num_attn_heads": (("n_heads",), 5), "num_layers": (("n_layers",), 2)},
                  fixed={"emb_type": "qiddelxembhistranscembpredcurc"}, needs_pid=True,
                  note="pyKT's QT encoder FFN is torch's default 2048 (no argument; ours d_ff) "
                  "and its dropout torch's 0.1 (ours qt_dropout); l1=l2=l3=0.5 (ours: weights "
                  "relative to the BCE, 1 and 1); historycorrs: running correct ratio"),
    "iekt": Peer("iekt", {
        "emb_size": (("d",), 64), "n_layer": (("mlp_layers",), 1),
        "cog_levels": (("cog_levels",), 10), "acq_levels": (("acq_levels",), 10),
        "dropout": (("dropout",), 0.0), "gamma": (("gamma",), 0.93),
        "lamb": (("pg_weight",), 40)}, needs_pid=True,
        note="pyKT's IEKT, emb_type qid (qc_merge); it samples both levels in eval (ours: "
        "eval_action) and holds 78,656 parameters it never reads at d 64"),
    "rekt": Peer("rekt", {"d": (("d",), 128), "dropout": (("dropout",), 0.4)}, needs_pid=True,
                 note="pyKT's ReKT: 200 gap rows and 199-step state tables (windows <= 200; "
                 "ours: max_gap, any length)"),
    "simplekt": Peer("simplekt", {**_ATTN, "final_fc_dim2": (("final_fc_dim2",), 256)},
                     note="n_pid 0 (no problem ids on either side)"),
    "sparsekt": Peer("sparsekt", {**_ATTN, "final_fc_dim2": (("final_fc_dim2",), 256),
                                  "k_index": (("k_index", "k"), 5),
                                  "sparse_ratio": (("ratio",), 0.8)},
                     fixed={"emb_type": "qid_sparseattn"},
                     note="n_pid 0 (no problem ids on either side); top-k attention"),
    "folibikt": Peer("folibikt", {**_ATTN, "kq_same": (("kq_same",), 1), "l2": (("l2",), 1e-5)},
                     fixed={"emb_type": "qid_alibi"},
                     note="n_pid 0 (no problem ids, no Rasch term on either side); pyKT's second "
                     "output layer is fixed at 256 (ours: final_fc_dim2)"),
    "extrakt": Peer("extrakt", {**_ATTN, "kq_same": (("kq_same",), 1), "l2": (("l2",), 1e-5)},
                    note="n_pid 0 (no problem ids, no Rasch term on either side); pyKT's second "
                    "output layer is fixed at 256 (ours: final_fc_dim2); pyKT builds decay rates "
                    "(unread under emb_type qid) and an FFN in each question layer (never run); "
                    "extrakt.py calls .cuda() unconditionally: a no-op on CPU here"),
    "robustkt": Peer("robustkt", {**_ATTN, "kq_same": (("kq_same",), 1), "l2": (("l2",), 1e-5),
                                  "ks": (("window",), 5)},
                     note="n_pid 0 (no problem ids, no Rasch term on either side); pyKT's second "
                     "output layer is fixed at 256 (ours: final_fc_dim2); pyKT builds an FFN in "
                     "each question layer (never run)"),
    "stablekt": Peer("stablekt", {**_ATTN, "final_fc_dim2": (("final_fc_dim2",), 256),
                                  "r": (("radius",), 0.5), "gamma": (("gamma",), 0.7)},
                     note="n_pid 0 (no problem ids, no difficulty on either side); pyKT's "
                     "stablekt.py calls .cuda() unconditionally: a no-op on CPU here"),
    "cl4kt": Peer("cl4kt", {"d_model": (("d",), 64), "n_blocks": (("n_blocks",), 2),
                            "dropout": (("dropout",), 0.2), "d_ff": (("d_ff",), 1024),
                            "num_attn_heads": (("n_heads",), 8)}),
    "dkvmn": Peer("dkvmn", dict(_MEMORY), tied=dict(_TIED_MEMORY)),
    "deep_irt": Peer("deep_irt", dict(_MEMORY), tied=dict(_TIED_MEMORY),
                     note="pyKT's DeepIRT builds DKVMN's output layer p_layer too (dim_s + 1 "
                     "parameters), never used"),
    "skvmn": Peer("skvmn", dict(_MEMORY), tied=dict(_TIED_MEMORY)),
    "gkt": Peer("gkt", {"hidden_dim": (("hidden_dim", "d"), 32),
                        "emb_size": (("emb_size", "emb"), 32), "dropout": (("dropout",), 0.5)},
                fixed={"graph_type": "dense"},
                note="pyKT's dense graph here is a random [C, C] matrix (seed 1)"),
    "kqn": Peer("kqn", {"n_hidden": (("n_hidden", "d"), 128),
                        "n_rnn_hidden": (("d_rnn",), 128),
                        "n_mlp_hidden": (("d_mlp",), 128),
                        "n_rnn_layers": (("n_rnn_layers", "n_layers"), 1),
                        "rnn_type": (("rnn",), "lstm"),
                        "dropout": (("dropout",), 0.4)}),
}  # fmt: skip
IGNORED = {"num_c", "num_pid", "K"}  # the vocabulary, set by the benchmark on both sides


def their_sizes(name: str, config) -> tuple[dict, list[str]]:
    """pyKT's constructor size arguments for our `config` (a dataclass or dict) of model `name`,
    and notes: each argument our config has no field for (kt_config.json's value used), each of
    our fields pyKT has no argument for, and the table's note."""
    ours = config if isinstance(config, dict) else dataclasses.asdict(config)
    peer = SHARED[name]
    kw, notes, used = dict(peer.fixed), [], set(IGNORED)
    for arg, (fields, default) in peer.sizes.items():
        hit = next((f for f in fields if f in ours and ours[f] is not None), None)
        if hit is None:
            kw[arg] = default
            notes.append(f"{arg}={default!r}: kt_config.json (ours has no {'/'.join(fields)})")
        else:
            kw[arg] = int(ours[hit]) if isinstance(ours[hit], bool) else ours[hit]
            used.add(hit)
    extra = sorted(k for k in ours if k not in used)
    if extra:
        notes.append("no pyKT argument for ours: " + ", ".join(f"{k}={ours[k]!r}" for k in extra))
    if peer.note:
        notes.append(peer.note)
    return kw, notes


def tied_sets(name: str, config) -> tuple[dict, list[str]]:
    """The fields to set on our `config` (a dataclass or dict of model `name`) so that ours has
    pyKT's tied sizes (`Peer.tied`: DKVMN, Deep-IRT and SKVMN take d_key = d_summary = d_value,
    pyKT's one dim_s), only those that differ, and a note saying so (none when nothing does)."""
    ours = config if isinstance(config, dict) else dataclasses.asdict(config)
    tied = SHARED[name].tied
    sets = {f: ours[src] for f, src in tied.items() if f in ours and ours[f] != ours[src]}
    if not sets:
        return {}, []
    was = ", ".join(f"{f} {ours[f]} -> {v}" for f, v in sets.items())
    srcs = "/".join(sorted({tied[f] for f in sets}))
    note = (
        f"ours built at pyKT's tied sizes, not its paper preset's: {was} (= {srcs}; pyKT's one "
        "dim_s sets key, value and summary sizes), so both sides have the same sizes"
    )
    return sets, [note]


def availability(name: str, registered, shipped_files, repo_files=()) -> str | None:
    """None if `name` can be benchmarked, else why not: ours not registered, or pyKT's model
    neither among `shipped_files` (the installed pykt/models file stems) nor, for the
    repository-only models, among `repo_files` (a checkout's, bench_peers --pykt-src)."""
    peer = SHARED[name]
    if name not in registered:
        return f"ours not registered (yet): no kt_lib model {name!r}"
    if peer.pykt in REPO:
        if REPO[peer.pykt] in repo_files:
            return None
        return (
            f"pyKT's {peer.pykt!r} is not in the installed pykt-toolkit wheel "
            "(pykt-team/pykt-toolkit's repository only: --pykt-src CHECKOUT/pykt/models)"
        )
    file = SHIPPED.get(peer.pykt)
    if file is None:  # CL4KT (Lee et al. 2022) has no model file in pyKT's wheel or repository
        return f"pyKT has no {peer.pykt!r} (neither its wheel nor its repository)"
    if file not in shipped_files:
        return f"pyKT's {peer.pykt!r} is not in the installed pykt-toolkit wheel"
    return None
