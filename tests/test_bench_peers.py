"""benchmarks/bench_peers.py and its table (benchmarks/peer_zoo.py): the table checked against
the registry (always), and - only where pykt-toolkit is installed, which CI does not do - pyKT's
training loss for every wheel model the table names, and the smoke setting end to end for two
models (one with problem ids) plus a skipped one; with a checkout of pyKT's repository named by
$PYKT_SRC (its pykt/models), the training loss of the repository-only models at bench_peers'
sizes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import timing  # noqa: E402
from bench_peers import (  # noqa: E402
    one_argv,
    our_sets,
    pair_row,
    parse_args,
    stray_tensors_to,
    their_config,
)
from peer_models import REPO, SHIPPED, SIZED, build, training_loss  # noqa: E402
from peer_zoo import IGNORED, SHARED, availability, their_sizes, tied_sets  # noqa: E402
from pykt_loader import find_pykt_models, load_pykt  # noqa: E402

from kt_lib.models import MODELS, build_model, list_models  # noqa: E402

needs_pykt = pytest.mark.skipif(
    find_pykt_models() is None, reason="pykt-toolkit is not installed (not a dependency)"
)
PYKT_SRC = os.environ.get("PYKT_SRC")  # a checkout's pykt/models (bench_peers --pykt-src)
needs_src = pytest.mark.skipif(
    not (PYKT_SRC and (Path(PYKT_SRC) / "utils.py").is_file()),
    reason="$PYKT_SRC names no checkout of pyKT's pykt/models",
)


def test_table_names_registered_models_or_skips_them():
    registered = set(list_models())
    files = set(SHIPPED.values())  # as if every wheel file were installed
    for name, peer in SHARED.items():
        assert peer.pykt in SHIPPED or peer.pykt in REPO or peer.pykt == "cl4kt", name
        why = availability(name, registered, files)
        if name not in registered:
            assert why is not None and why.startswith("ours not registered"), name
            continue
        assert (
            why is None
            or "not in the installed pykt-toolkit wheel" in why
            or (why.startswith("pyKT has no"))
        ), (name, why)
        if MODELS[name].config_cls.PRESETS.get("paper") is None:
            continue
        config = MODELS[name].config_cls.preset("paper")
        kw, notes = their_sizes(name, config)
        assert set(peer.sizes) <= set(kw), name  # every size pyKT takes is set
        assert all(isinstance(n, str) for n in notes)
    # the models on main when the table was written are all in it
    assert {"dkt", "sakt", "akt", "saint", "atkt", "qdkt", "dimkt", "atdkt"} <= set(SHARED)


def test_their_sizes_notes_what_does_not_match():
    ours = {"num_c": 100, "num_pid": 0, "d": 64, "n_heads": 4, "kq_same": True, "extra": 3}
    kw, notes = their_sizes("akt", ours)
    assert kw["d_model"] == 64 and kw["num_attn_heads"] == 4 and kw["kq_same"] == 1
    assert kw["separate_qa"] is False  # fixed
    assert kw["d_ff"] == 256  # kt_config.json's, and said so
    assert any(n.startswith("d_ff=256: kt_config.json") for n in notes)
    assert any("no pyKT argument for ours: extra=3" == n for n in notes)
    assert not any(f"{k}=" in n for n in notes for k in IGNORED)  # the vocabulary is no size


def test_kqn_sizes_map_to_pykts_own_arguments():
    """Our KQN's encoder sizes are d_rnn and d_mlp and its cell `rnn`; pyKT's n_rnn_hidden and
    n_mlp_hidden were read from d (equal only at the paper preset), rnn_type never (a review)."""
    ours = dataclasses.asdict(MODELS["kqn"].config_cls.preset("paper"))
    kw, notes = their_sizes("kqn", {**ours, "d_rnn": 64, "d_mlp": 32, "rnn": "gru"})
    assert (kw["n_hidden"], kw["n_rnn_hidden"], kw["n_mlp_hidden"]) == (ours["d"], 64, 32)
    assert kw["rnn_type"] == "gru"
    assert not any("no pyKT argument" in n and "d_rnn" in n for n in notes)


def test_availability_reasons():
    assert "not registered" in availability("dkt", set(), {"dkt"})
    assert availability("dkt", {"dkt"}, {"dkt"}) is None
    assert "repository only" in availability("simplekt", {"simplekt"}, {"dkt"})
    assert "--pykt-src" in availability("simplekt", {"simplekt"}, {"dkt"})
    assert availability("simplekt", {"simplekt"}, {"dkt"}, {"simplekt"}) is None  # a checkout
    assert "pyKT has no" in availability("cl4kt", {"cl4kt"}, {"dkt"}, set(REPO.values()))
    # every repository-only model in the table can be built at bench sizes
    assert {SHARED[n].pykt for n in SHARED if SHARED[n].pykt in REPO} <= set(SIZED)


def test_repo_model_sizes():
    """The repository-only rows set what pyKT's constructors take (AT-DKT has no d_ff)."""
    kw, notes = their_sizes("atdkt", {"d": 300, "n_heads": 5, "n_layers": 2, "d_ff": 2048})
    assert "d_ff" not in kw and kw["emb_type"] == "qiddelxembhistranscembpredcurc"
    assert any("d_ff=2048" in n for n in notes)
    kw, _ = their_sizes("sparsekt", {"d": 64, "k": 3, "ratio": 0.5})
    assert (kw["k_index"], kw["sparse_ratio"], kw["emb_type"]) == (3, 0.5, "qid_sparseattn")
    kw, _ = their_sizes("stablekt", {"radius": 0.5, "gamma": 0.7})
    assert (kw["r"], kw["gamma"]) == (0.5, 0.7)


def test_pykt_src_option(tmp_path):
    a = parse_args(["--models", "simplekt"])
    assert a.pykt_src is None and "--pykt-src" not in one_argv(a)
    with pytest.raises(SystemExit) as e:  # not a pykt/models folder
        parse_args(["--pykt-src", str(tmp_path)])
    assert e.value.code == 2
    (tmp_path / "utils.py").write_text("")
    a = parse_args(["--pykt-src", str(tmp_path), "--src-label", "repo@abc", "--repeats", "2"])
    argv = one_argv(a)
    assert argv[argv.index("--pykt-src") + 1] == str(tmp_path)
    assert argv[argv.index("--src-label") + 1] == "repo@abc" and "--repeats" in argv


@needs_src
def test_training_loss_runs_for_every_repo_model_at_bench_sizes():
    """pyKT's training loss backpropagates for each repository-only model of the table, built
    by bench_peers' rule (our tiny preset's sizes, problem ids where ours needs them; L 60:
    AT-DKT's IK term starts at step 50)."""
    from bench_peers import build_theirs, load_theirs, pykt_inputs
    from peer_models import cuda_calls_in_place, set_mode

    from kt_lib.audit import random_batch

    for name in [n for n in SHARED if SHARED[n].pykt in REPO and n in MODELS]:
        config = dataclasses.asdict(MODELS[name].config_cls.preset("tiny"))
        config = {k: v for k, v in config.items() if k not in IGNORED}
        num_pid = 1000 if SHARED[name].needs_pid else 0
        batch = random_batch(100, B=4, L=60, num_pid=num_pid, seed=0, ragged=False)
        with cuda_calls_in_place(SHARED[name].pykt):
            mods = load_theirs(name, "cpu", PYKT_SRC)
            model, kw, _ = build_theirs(name, mods, "cpu", 60, config)
            set_mode(model, True)
            loss = training_loss(SHARED[name].pykt, model, pykt_inputs(batch, "cpu"))
            loss.backward()
        assert loss.ndim == 0 and torch.isfinite(loss), name
        assert any(p.grad is not None for p in model.parameters()), name


@needs_pykt
def test_training_loss_runs_for_every_wheel_model_in_the_table():
    """pyKT's training loss (train_model's model_forward + cal_loss) backpropagates for each
    model of the wheel the table names, at the audit's tiny sizes."""
    from peer_models import pykt_batch, random_seqs, set_mode

    names = sorted({p.pykt for p in SHARED.values() if p.pykt in SHIPPED})
    mods = load_pykt("cpu", tuple(sorted({SHIPPED[n] for n in names})))
    d = pykt_batch(random_seqs(0))
    for name in names:
        torch.manual_seed(0)
        model = build(name, mods)
        set_mode(model, True)
        loss = training_loss(name, model, d)
        assert loss.ndim == 0 and torch.isfinite(loss), name
        loss.backward()
        assert any(p.grad is not None for p in model.parameters()), name


@needs_pykt
def test_smoke_end_to_end(tmp_path):
    out = tmp_path / "peers.json"
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # pykt's too
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_peers.py"), "--models", "dkt"]
    cmd += ["qdkt", "cl4kt", "--batch", "8", "--len", "50", "--repeats", "2", "--out", str(out)]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    rows = {r["model"]: r for r in json.loads(out.read_text())}
    printed = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert [r["model"] for r in printed] == ["dkt", "qdkt", "cl4kt"]
    assert "skipped" in rows["cl4kt"] and rows["cl4kt"]["pykt_model"] == "cl4kt"
    for name, num_pid in (("dkt", 0), ("qdkt", 1000)):
        r = rows[name]
        assert "error" not in r, r
        assert r["pykt_model"] == name and r["num_pid"] == num_pid
        assert (r["device"], r["B"], r["L"]) == ("cpu", 8, 50)
        assert isinstance(r["notes"], list) and r["pykt"]
        for side in ("ours", "theirs"):
            s = r[side]
            assert s["params"] > 0 and isinstance(s["config"], dict)
            assert s["train_step_s"] > 0 and s["inference_s"] > 0 and s["ops_per_step"] > 0
            assert 0 < s["matmul_share"] <= 1  # DKT's LSTM and output layer are products
        for key, field in (("train_step", "train_step_s"), ("inference", "inference_s")):
            ratio = r["ours"][field] / r["theirs"][field]
            assert r["ours_over_theirs"][key] == pytest.approx(ratio, rel=0.05, abs=2e-3)
            assert r["ours_over_theirs_per_round"][key] > 0
            assert all(len(r[side][f"{key}_rounds_s"]) == 2 for side in ("ours", "theirs"))
        assert r["rounds"] == 2 and "VmHWM" in r["peak_memory_method"]
        assert all(r[side]["peak_rss_mb"] > 0 for side in ("ours", "theirs"))
        floor = r["ours"]["matmul_share"] * r["ours"]["train_step_s"] / r["theirs"]["train_step_s"]
        assert r["train_step_matmul_floor"] == pytest.approx(floor, rel=0.01, abs=2e-3)
        assert r["train_step_matmul_floor"] <= r["ours_over_theirs"]["train_step"] + 2e-3
    # same sizes where both have them: DKT's and qDKT's parameter counts agree exactly
    assert rows["dkt"]["ours"]["params"] == rows["dkt"]["theirs"]["params"]
    assert rows["dkt"]["theirs"]["config"] == {"emb_size": 200, "dropout": 0.1}


def test_stray_tensors_follow_the_model_to_its_device():
    """pyKT 0.0.38's KQN keeps its one-hot tables as plain attributes; `.to()` skips them, so its
    forward fails on a GPU. The benchmark moves them, and names them in the row's notes."""

    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.eye = torch.eye(2)  # a plain attribute, as in pyKT's kqn.py

    model = torch.nn.Sequential(Inner())
    model.two_eye = torch.eye(4)
    assert stray_tensors_to(model, "meta") == ["two_eye", "0.eye"]
    assert model.two_eye.is_meta and model[0].eye.is_meta
    assert model[0].lin.weight.device.type == "cpu"  # parameters are `.to()`'s business
    assert stray_tensors_to(model, "meta") == []


def test_alternate_rounds_swap_the_order():
    """One warm-up call each, then one call per side per round, theirs first on odd rounds: load
    that comes and goes lands on both sides (the old benchmark ran all of ours, then theirs)."""
    calls = []
    fns = [lambda: calls.append("ours"), lambda: calls.append("theirs")]
    times = timing.alternate(fns, 4)
    assert calls == ["ours", "theirs"] + ["ours", "theirs", "theirs", "ours"] * 2
    assert [len(t) for t in times] == [4, 4]


def test_measure_pair_reports_medians_and_the_median_per_round_ratio(monkeypatch):
    """Medians per side over the rounds (the docs' ours_over_theirs is their ratio) and the
    median of the rounds' own ratios, which differ when a round's load hits both sides."""
    script = {  # seconds per call, the warm-up first
        "ours_step": iter([9, 1, 4, 3]), "theirs_step": iter([9, 2, 2, 6]),
        "ours_infer": iter([9, 1, 1, 1]), "theirs_infer": iter([9, 2, 4, 8]),
    }  # fmt: skip
    monkeypatch.setattr(timing, "seconds", lambda fn, device="cpu": fn())
    fn = {k: (lambda k=k: next(script[k])) for k in script}
    pair = ((fn["ours_step"], fn["ours_infer"]), (fn["theirs_step"], fn["theirs_infer"]))
    ours, theirs, per_round = timing.measure_pair(*pair, 3, "cpu", count=False)
    assert (ours["train_step_s"], theirs["train_step_s"]) == (3, 2)  # medians: ratio 1.5
    assert per_round["train_step"] == 0.5  # rounds' ratios 0.5, 2, 0.5
    assert ours["train_step_rounds_s"] == [1, 4, 3] and theirs["inference_rounds_s"] == [2, 4, 8]
    assert (ours["inference_s"], theirs["inference_s"], per_round["inference"]) == (1, 4, 0.25)
    assert "peak_rss_mb" not in ours  # one process holds both sides: no memory figure here
    row = pair_row(((torch.nn.Linear(3, 1), {}, "a"), (torch.nn.Linear(4, 1), {})),
                   ours, theirs, per_round)  # fmt: skip
    assert row["ours_over_theirs"] == {"train_step": 1.5, "inference": 0.25}
    assert row["ours_over_theirs_per_round"] == {"train_step": 0.5, "inference": 0.25}
    assert (row["ours"]["params"], row["theirs"]["params"]) == (4, 5)
    assert row["params_ours_over_theirs"] == 0.8


def _fake_side(mb: int) -> None:
    """A side of the pair at fake sizes: a model, a training step, `mb` MB of activations."""
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.ones(mb << 18)  # touched: resident
    model(x[:8]).sum().backward()
    opt.step()


def test_peak_memory_of_a_side_leaves_out_what_this_process_holds():
    """A side's peak comes from a fresh process of its own: the 1 GB this process holds (as
    the timing process holds ours while pyKT is measured) is not in it. ru_maxrss would be: a
    spawned process inherits its parent's mark on Linux."""
    ballast = torch.ones(1 << 28)  # 1 GiB, resident
    assert timing.peak_rss_mb() >= 1024
    peak = timing.peak_in_fresh_process(_fake_side, 64)
    assert 64 <= peak["peak_rss_mb"] < 1024, peak
    del ballast


def _dkvmn_params(name: str, c: int, d: int, m: int) -> int:
    """pyKT's DKVMN / DeepIRT at dim_s d (key, value and summary all d), c concepts, m slots:
    embeddings 3cd, the two memories 2md, summary 2d*d + d, erase and add 2(d*d + d), then one
    output layer (DKVMN) or the ability and difficulty layers (DeepIRT)."""
    return 3 * c * d + 2 * m * d + 4 * d * d + 3 * d + (d + 1 if name == "dkvmn" else 2 * d + 2)


@pytest.mark.parametrize("name", ["dkvmn", "deep_irt"])
def test_memory_models_are_built_at_pyKTs_tied_sizes(name):
    """pyKT's dim_s is key, value and summary size alike: ours is built with d_key = d_summary
    = d_value for the pair (paper preset: 50 and 200 / 100), so the parameter counts agree
    (DKVMN: 228,801 both; ours at the paper preset, 143,001; pyKT's DeepIRT holds one unused
    layer more, said in the row's notes)."""
    sets, notes = our_sets(name, 0)
    d = MODELS[name].config_cls.preset("paper").d_value
    assert sets == {"d_key": d, "d_summary": d} and "tied" in notes[0]
    config = their_config(name, sets, 0)
    kw, _ = their_sizes(name, config)
    assert kw["dim_s"] == d
    ours = MODELS[name](MODELS[name].config_cls.preset("paper", num_c=100, **sets))
    count = sum(p.numel() for p in ours.parameters())
    assert count == _dkvmn_params(name, 100, d, kw["size_m"])
    root = find_pykt_models() or (Path(PYKT_SRC) if PYKT_SRC else None)
    if root is not None and (root / f"{name}.py").is_file():  # pyKT's own count, where it is
        mods = load_pykt("cpu", (name,), root=root, pkg="_pykt_tied_check")
        theirs = build(name, mods, nc=100, **kw)
        unused = d + 1 if name == "deep_irt" else 0  # pyKT's DeepIRT builds p_layer, unread
        assert sum(p.numel() for p in theirs.parameters()) == count + unused
    assert tied_sets("skvmn", MODELS["skvmn"].config_cls.preset("paper")) == ({}, [])  # tied


@needs_src
def test_bench_pair_end_to_end_with_a_checkout():
    """bench_pair at tiny batch sizes on a repository-only model: alternating rounds, each
    side's peak memory from its own process, the per-round ratio next to the docs' keys."""
    from bench_peers import bench_pair

    r = bench_pair("simplekt", 3, b=2, n=20, src=PYKT_SRC, label="checkout")
    assert r["rounds"] == 3 and r["pykt"] == "checkout"
    for key in ("train_step", "inference"):
        assert r["ours_over_theirs"][key] > 0 and r["ours_over_theirs_per_round"][key] > 0
    for side in ("ours", "theirs"):
        assert 0 < r[side]["peak_rss_mb"] < timing.peak_rss_mb() + 1
        assert len(r[side]["train_step_rounds_s"]) == 3 and r[side]["params"] > 0
    assert "fresh process" in r["peak_memory_method"] and r["ours"]["sets"] == {}


def test_a_run_cut_off_keeps_the_rows_that_finished(tmp_path, monkeypatch):
    """The JSON is rewritten after each model: a lease's `timeout` that stops the run during
    the second model leaves the first one's row in `--out` (the 2026-11-28 lease lost two)."""
    import bench_peers

    def one(script, name, argv):
        if name == "sakt":
            raise KeyboardInterrupt  # stands for the lease's timeout
        return {"model": name, "ours_over_theirs": {"train_step": 0.5}}

    monkeypatch.setattr(bench_peers, "run_subprocess", one)
    monkeypatch.setattr(bench_peers, "skipped", lambda names, src=None: {})
    out = tmp_path / "peers.json"
    (tmp_path / "utils.py").write_text("")  # a stand-in checkout's pykt/models
    argv = ["bench_peers.py", "--models", "dkt", "sakt", "--pykt-src", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out)])
    with pytest.raises(KeyboardInterrupt):
        bench_peers.main()
    assert json.loads(out.read_text()) == [
        {"model": "dkt", "ours_over_theirs": {"train_step": 0.5}}
    ]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_our_timed_step_clips_the_gradient_as_fit_does(monkeypatch):
    """`fit` clips the gradient norm (TrainConfig.grad_clip, 1.0) every step; the benchmarks'
    step did not, a few small ops in our favour against pyKT's step, which clips none for most
    models as pyKT trains them (a review)."""
    from kt_lib.audit import random_batch

    calls = []
    clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_",
                        lambda params, norm: calls.append(norm) or clip(params, norm))  # fmt: skip
    model = build_model("dkt", preset="tiny", num_c=5)
    batch = random_batch(5, B=2, L=6)
    step, _ = timing.model_step_and_inference(model, batch)
    step()
    timing.model_step_and_inference(model, batch, grad_clip=None)[0]()
    assert calls == [timing.GRAD_CLIP] == [1.0]
