"""SimAKT's memory banks (kt_lib.memory): farthest-first, position-weighted similarity,
encodings, round trips, short logs, KMeans restarts, the influence rule, the bank CLI."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kt_lib.checkpoint import load_model, save_model
from kt_lib.data.dataset import KTDataset, StudentSeq, Window, collate
from kt_lib.data.synthetic import simulate
from kt_lib.heads.simakt_config import MemoryConfig
from kt_lib.memory import (
    Bank,
    ClusterBank,
    GraphBank,
    KNNBank,
    farthest_first,
    position_weighted_similarity,
    position_weights,
)
from kt_lib.models import build_model
from kt_lib.models.simakt import load_simakt_config
from kt_lib.train import fit
from tests.simakt_support import (
    CLUSTER,
    DATA,
    KNN,
    NUM_C,
    NUM_PID,
    batch_of,
    dual,
    encoded,
    simakt,
    students,
)

# -- banks ------------------------------------------------------------------------------------


def naive_farthest_first(x: torch.Tensor, k: int, first: int) -> list[int]:
    """The seed's loops (reference only)."""
    selected = [first]
    for _ in range(k - 1):
        best, best_d = -1, -1.0
        for i in range(len(x)):
            if i in selected:
                continue
            d = min(float(torch.norm(x[i] - x[j])) for j in selected)
            if d > best_d:
                best, best_d = i, d
        selected.append(best)
    return selected


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_farthest_first_matches_naive_reference(seed):
    x = torch.randn(60, 5, generator=torch.Generator().manual_seed(seed))
    first = seed * 7
    assert farthest_first(x, 12, first=first).tolist() == naive_farthest_first(x, 12, first)
    assert farthest_first(x, 60, first=first).unique().numel() == 60
    with pytest.raises(ValueError, match="k must be in"):
        farthest_first(x, 61)


def naive_position_similarity(cur, mem, valid, decay, fw):
    """Seed 000's compute_weighted_similarity as loops (reference only)."""
    B, Lc, _ = cur.shape
    M, S, _ = mem.shape
    out = torch.zeros(B, Lc, M, dtype=torch.float64)
    for b in range(B):
        for t in range(Lc):
            pos = t + 1  # steps known at row t
            for m in range(M):
                num = den = 0.0
                for i in range(S):
                    if not valid[m, i]:
                        continue
                    if i < pos:
                        if i >= Lc:
                            continue
                        w = decay ** (pos - i - 1)
                        s = float(F.cosine_similarity(cur[b, i : i + 1], mem[m, i : i + 1]))
                    else:
                        w = fw * decay ** (i - pos)
                        if i == 0:
                            s = 0.5
                        elif not valid[m, i - 1]:
                            continue
                        else:
                            s = float(F.cosine_similarity(mem[m, i - 1 : i], mem[m, i : i + 1]))
                    num, den = num + w * s, den + w
                out[b, t, m] = num / den if den > 0 else 0.0
    return out


@pytest.mark.parametrize("S", [9, 4])
@pytest.mark.parametrize("fw", [0.0, 0.3, 1.0])
def test_position_weighted_similarity_matches_naive_loop(S, fw):
    g = torch.Generator().manual_seed(S)
    cur, mem = torch.randn(3, 6, 5, generator=g), torch.randn(4, S, 5, generator=g)
    valid = torch.rand(4, S, generator=g) > 0.2
    valid[0] = False  # an empty memory sequence gives 0
    fast = position_weighted_similarity(cur, mem, valid, 0.9, fw)
    slow = naive_position_similarity(cur, mem, valid, 0.9, fw)
    assert torch.allclose(fast.double(), slow, atol=1e-5)
    past, future = position_weights(6, S, 0.9, fw)
    assert past[3, :4].tolist() == pytest.approx([0.9**3, 0.9**2, 0.9, 1.0])
    assert (future[:, 0] == 0).all() and future[0, 1] == pytest.approx(fw)


def test_position_weighted_similarity_ignores_the_current_future():
    g = torch.Generator().manual_seed(0)
    cur, mem = torch.randn(2, 8, 4, generator=g), torch.randn(3, 8, 4, generator=g)
    base = position_weighted_similarity(cur, mem, None, 0.95, 1.0)
    cur2 = cur.clone()
    cur2[:, 5:] = torch.randn(2, 3, 4, generator=g)
    assert torch.equal(position_weighted_similarity(cur2, mem, None, 0.95, 1.0)[:, :5], base[:, :5])


def test_encodings_and_cluster_bank_are_exact_means():
    enc = encoded()
    s = enc.dataset.students[3]
    manual = (enc.states_fn(batch_of(enc.dataset, [3]))[0, : len(s)]).mean(0)
    assert torch.allclose(enc.encodings[3], manual, atol=1e-5)  # chunks of 5 pooled exactly
    bank = ClusterBank.build(enc, 4, seed=0, n_init=2)
    for c in range(4):
        members = (bank.labels == c).nonzero().squeeze(1)
        assert torch.allclose(bank.centroids[c], enc.encodings[members].mean(0), atol=1e-5)
        states, valid = enc.states(members)
        mean = (states * valid.unsqueeze(-1)).sum(0) / valid.sum(0).clamp(min=1).unsqueeze(-1)
        assert torch.allclose(bank.sequences[c], mean, atol=1e-5)
        assert torch.equal(bank.seq_counts[c], valid.sum(0).float())
    stats = bank.stats()
    assert stats["students"] == 30 and stats["clusters"] == 4
    assert stats["size_min"] >= 1 and stats["variance_mean"] > 0


def test_bank_states_are_each_chunk_at_its_place_in_the_log():
    enc = encoded()  # logs of 8-16 steps, chunks of 5: up to four windows each
    longest = max(len(s) for s in enc.dataset.students)
    assert enc.seq_len == -(-longest // 5) * 5
    index = [3, 0, 7]
    states, valid = enc.states(index)
    for row, i in enumerate(index):
        n = len(enc.dataset.students[i])
        assert valid[row].tolist() == [True] * n + [False] * (enc.seq_len - n)
        for a in range(0, n, 5):
            stop = min(a + 5, n)
            chunk = enc.states_fn(collate(enc.dataset, [Window(i, a, stop)], 5))[0, : stop - a]
            assert torch.allclose(states[row, a:stop], chunk), (i, a)


def test_banks_save_load_round_trip(tmp_path):
    enc = encoded()
    banks = {
        "cluster": ClusterBank.build(enc, 3, seed=1, n_init=1),
        "knn": KNNBank.build(enc, 6, seed=1),
        "graph": GraphBank.build(enc),
    }
    for name, bank in banks.items():
        bank.save(tmp_path / name)
        loaded = Bank.load(tmp_path / name)
        assert type(loaded) is type(bank) and loaded.stats() == bank.stats()
        for key, value in bank.to_tensors().items():
            assert torch.equal(value, loaded.to_tensors()[key]), (name, key)
    assert KNNBank.build(enc, 6, seed=1).uids.tolist() == banks["knn"].uids.tolist()  # seeded


def test_model_banks_round_trip(tmp_path):
    train = students()
    model = simakt(dual(0.3), train)
    batch = batch_of(train, range(5))
    with torch.no_grad():
        expected = model(batch).logits
    model.save_banks(tmp_path / "banks")
    fresh = simakt(dual(0.3))
    fresh.load_state_dict(model.state_dict())
    fresh.load_banks(tmp_path / "banks")
    with torch.no_grad():
        assert torch.equal(fresh(batch).logits, expected)
    save_model(tmp_path / "ckpt", model)
    loaded, _, _ = load_model(tmp_path / "ckpt")
    with torch.no_grad():
        assert torch.equal(loaded.eval()(batch).logits, expected)
    assert not model.bank_stats().empty


def test_block2_encoder_refreshes_banks():
    train = students()
    model = simakt(dual(0.3, encoder="block2", update_frequency=2), train)
    before = model.inter.heads[0].banks[0].centroids.clone()
    with torch.no_grad():
        model.block2.attn.v_proj.weight.mul_(3.0)
    model.on_epoch_start(1, train)
    assert torch.equal(model.inter.heads[0].banks[0].centroids, before)  # not a refresh epoch
    model.on_epoch_start(2, train)
    assert not torch.allclose(model.inter.heads[0].banks[0].centroids, before)


def test_fit_trains_simakt_with_banks():
    sim = simulate(80, 16, num_c=NUM_C, problems_per_c=3, seed=0)
    train = sim.data.subset(range(60))
    valid = sim.data.subset(range(60, 80))
    torch.manual_seed(0)
    model = build_model("simakt", preset="tiny", dataset=train, max_len=16)
    result = fit(model, train, valid, epochs=2, max_len=16, batch_size=32, progress=False)
    assert len(result.history) == 2 and np.isfinite(result.best_metric)
    assert result.model.folds is not None and result.model.inter.heads[0].has_banks


def test_cluster_agreement_scores():
    from kt_lib.memory import cluster_agreement

    scores = cluster_agreement([0, 0, 1, 1, 2, 2], [0, 0, 0, 1, 1, 1])
    assert scores["purity"] == pytest.approx(5 / 6) and scores["clusters"] == 3
    assert cluster_agreement([1, 1, 0, 0], [0, 0, 1, 1])["adjusted_rand"] == pytest.approx(1.0)


# -- banks: short logs, KMeans restarts, influence rule, learning rates, the CLI ---------------


def test_short_logs_stay_out_of_the_banks_and_kmeans_restarts(monkeypatch):
    import kt_lib.memory.banks as banks

    seen = []
    real = banks.KMeans
    monkeypatch.setattr(banks, "KMeans", lambda **kw: seen.append(kw["n_init"]) or real(**kw))
    train = students()
    short = [
        StudentSeq(500 + i, np.zeros(4, int), np.ones(4, int), np.zeros(4, int)) for i in range(6)
    ]
    train = KTDataset(train.students + short, num_c=NUM_C, num_pid=NUM_PID, name="t")
    cfg = {**dual(), "memory": {}}  # defaults: kmeans_n_init 10, min_length 5
    model = simakt(cfg, train)
    assert seen and set(seen) == {10}
    for head in model.inter.heads:
        for bank in head.banks:
            assert (bank.uids < 500).all()
    assert model.folds.fold_of(torch.tensor([500])).item() in (0, 1)  # still assigned a fold
    model = simakt({**dual(), "memory": {"min_length": 1, "kmeans_n_init": 1}}, train)
    assert any((b.uids >= 500).any() for h in model.inter.heads for b in h.banks)


def test_influence_rule_of_example_4_follows_the_training_set_size(tmp_path):
    raw = json.loads((DATA / "seed000" / "influence_example4_dataset_size.json").read_text())
    raw.update(
        cluster_config={"n_clusters": 4},
        knn_config={"memory_size": 8, "k_neighbors": 3},
        memory={"kmeans_n_init": 1},
    )
    small = simakt(raw, students(n=60))
    assert small.inter.weights == [0.6, 1.5]
    large = simakt({**raw, "large_dataset_min_students": 50}, students(n=60))
    assert large.inter.weights == [1.8, 0.7]
    save_model(tmp_path / "m", large)
    loaded, _, _ = load_model(tmp_path / "m")
    assert loaded.inter.weights == [1.8, 0.7]
    step2 = load_simakt_config(
        {
            "intra_heads": 6,
            "inter_heads": [CLUSTER, KNN],
            "influence_rule": {"large": {"knn": 2.0}, "small": {"cluster": 0.0}},
        }
    )
    assert step2.influence_rule.weights_for(step2.heads, 5) == [0.0, 1.0]
    assert step2.influence_rule.weights_for(step2.heads, 5000) == [1.0, 2.0]


def test_param_groups_scale_learning_rates_inversely_with_influence():
    cfg = {
        "intra_heads": 6,
        "memory": {"kmeans_n_init": 1},
        "lr_scaling": "inverse_influence",
        "inter_heads": [
            {**CLUSTER, "influence_weight": 2.0},
            {**KNN, "influence_weight": 0.5},
        ],
    }
    model = simakt(cfg, students())
    groups = model.param_groups(1e-3)
    assert [(g["name"], g["lr"]) for g in groups] == [
        ("model", 1e-3),
        ("cluster", 5e-4),
        ("knn", 2e-3),
    ]
    ids = [id(p) for g in groups for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())  # each parameter once
    torch.optim.AdamW(groups, lr=1e-3)
    plain = simakt(dual(), students()).param_groups(1e-3)
    assert len(plain) == 1 and plain[0]["lr"] == 1e-3


def test_bank_cli_builds_banks_the_model_loads_by_dataset_name(tmp_path, capsys):
    from kt_lib.cli.memory import main
    from kt_lib.data import load_bundle

    settings = ["--set", "n_clusters=4", "--set", "memory_size=8", "--set", "k_neighbors=3"]
    args = ["build", "--data-format", "synthetic", "--num-students", "60", "--seq-len", "12"]
    args += ["--out", str(tmp_path), "--preset", "tiny", "--max-len", "16"]
    path = main([*args, "--similarity", "dual_modular", *settings])
    assert path.with_suffix(".pt").is_file() and path.with_suffix(".json").is_file()
    assert "training students" in capsys.readouterr().out
    train = load_bundle(None, "synthetic", seed=0, num_students=60, seq_len=12).train
    sim = load_simakt_config("dual_modular").with_settings(
        n_clusters=4, memory_size=8, k_neighbors=3
    )

    def model_with(memory_sim):
        torch.manual_seed(0)
        m = build_model("simakt", preset="tiny", dataset=train, max_len=16, similarity=memory_sim)
        m.prepare(train)
        return m.eval()

    loaded = model_with(sim.with_settings(bank_dir=str(tmp_path)))
    built = model_with(sim)
    batch = collate(train, [Window(i, 0, len(train.students[i])) for i in range(4)], 16)
    with torch.no_grad():
        assert torch.equal(loaded(batch).logits, built(batch).logits)
    with pytest.raises(ValueError, match="other training students"):
        loaded.load_banks(path, train.subset(range(10)))
    # same uids, same count, other logs (another fold's train{k} file numbers its students
    # 0..n-1 too): refused, or its students could read banks holding their own logs
    swapped = [dataclasses.replace(s, r=1 - s.r) for s in train.students]
    with pytest.raises(ValueError, match="another fold"):
        loaded.load_banks(path, dataclasses.replace(train, students=swapped))
    other = build_model(
        "simakt",
        preset="tiny",
        dataset=train,
        max_len=16,
        similarity=sim.with_settings(n_clusters=5),
    )
    with pytest.raises(ValueError, match="banks were built for similarity"):
        other.load_banks(path)
    data = bytearray(path.with_suffix(".pt").read_bytes())
    data[-20] ^= 0xFF
    path.with_suffix(".pt").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="SHA-256 differs"):
        loaded.load_banks(path)
    with pytest.raises(FileNotFoundError, match="no prebuilt banks"):
        model_with(sim.with_settings(bank_dir=str(tmp_path / "empty")))
    with pytest.raises(ValueError, match="bank_dir needs the heuristic encoder"):
        MemoryConfig(encoder="block2", bank_dir="x").validate()


def test_bank_cli_refuses_a_seed_where_the_files_fix_the_split(tmp_path):
    """`--seed` moves a seeded split (synthetic, log, a line folder's held-out part); on pyKT's
    folds or a line folder's fold files no seed changes the split, so it is refused, not ignored."""
    from kt_lib.cli.memory import main
    from kt_lib.data import load_bundle

    sizes = ["--out", str(tmp_path), "--preset", "tiny", "--max-len", "16"]
    pykt = tmp_path / "pk"
    pykt.mkdir()
    seq = f'"{",".join("123" * 4)}","{",".join("101" * 4)}"'
    rows = ["fold,uid,concepts,responses", *(f"{i % 5},{i},{seq}" for i in range(20))]
    (pykt / "train_valid.csv").write_text("\n".join(rows) + "\n")
    (pykt / "test.csv").write_text("\n".join([rows[0], *(f"0,{i},{seq}" for i in range(5))]))
    with pytest.raises(SystemExit, match="--seed 3: this split is fixed by the files"):
        main(["build", "--data-dir", str(pykt), "--data-format", "pykt", "--seed", "3", *sizes])
    assert not load_bundle(pykt, "pykt").seeded
    assert load_bundle(None, "synthetic", num_students=20, seq_len=8).seeded
