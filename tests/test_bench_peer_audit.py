"""benchmarks/bench_peer_audit.py: the markdown table from a fixture JSON (always), and - only
where pykt-toolkit is installed, which CI does not do - the audit on pyKT's DKT (no leak) and
on pyKT's ATKT without the fix (leaks through its whole-sequence softmax)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_peer_audit as bpa  # noqa: E402
from peer_models import cuda_calls_in_place  # noqa: E402
from pykt_loader import find_pykt_models  # noqa: E402

needs_pykt = pytest.mark.skipif(
    find_pykt_models() is None, reason="pykt-toolkit is not installed (not a dependency)"
)

FIXTURE = [
    {
        "model": "dkt",
        "pykt_version": "0.0.38",
        "ran": True,
        "leak": False,
        "max_change": 0.0,
        "leak_via": [],
        "aligned": True,
        "notes": "DKT(c, r) gathered at cshft",
    },
    {
        "model": "atkt",
        "pykt_version": "0.0.38",
        "ran": True,
        "leak": True,
        "max_change": 1.9e-4,
        "leak_via": ["r[s+0]", "q[s+1]"],
        "aligned": True,
        "notes": "softmax | whole sequence",
    },
    {
        "model": "lpkt",
        "pykt_version": "0.0.38",
        "ran": "RuntimeError: boom",
        "leak": None,
        "max_change": None,
        "leak_via": None,
        "aligned": None,
        "notes": "",
    },
    {"model": "simplekt", "pykt_version": "0.0.38", "ran": "not shipped", "leak": None},
]


def test_markdown_from_fixture(tmp_path):
    path = tmp_path / "audit.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in FIXTURE))
    table = bpa.markdown(bpa.read_rows(path)).splitlines()
    assert table[0].startswith("| model | ran | leak | max change | leaks via | aligned")
    assert set(table[1]) <= {"|", "-"} and table[1].count("|") == table[0].count("|")
    rows = {line.split(" | ")[0].strip("| "): line for line in table[2:6]}
    assert rows["dkt"] == "| dkt | yes | no | 0.0e+00 | - | yes | DKT(c, r) gathered at cshft |"
    assert "| atkt | yes | yes | 1.9e-04 | r[s+0], q[s+1] | yes |" in rows["atkt"]
    assert "softmax / whole sequence" in rows["atkt"]  # a "|" in a note would split the cell
    assert rows["lpkt"].startswith("| lpkt | RuntimeError: boom | - | - | - | - |")
    assert rows["simplekt"].startswith("| simplekt | not shipped | - | - | - | - |")
    assert all(line.count("|") == table[0].count("|") for line in table[2:6])
    assert "pykt-toolkit 0.0.38" in table[-1]


def test_markdown_cli_reads_the_json(tmp_path):
    path = tmp_path / "audit.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in FIXTURE[:2]))
    out = subprocess.run(
        [sys.executable, str(BENCH / "bench_peer_audit.py"), "--markdown", "--out", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.splitlines()[3].startswith("| atkt | yes | yes |")


def test_scored_column_maps_to_the_next_response():
    """pykt's window split: y[:, s-1] is scored against r_s = rshft[:, s-1]."""
    s = bpa.random_seqs(0)
    d = bpa.pykt_batch(s)
    m = d["smasks"]
    assert m.shape == (bpa.B, bpa.L - 1)
    assert torch.equal(d["shft_rseqs"][m], s.r[:, 1:][m])
    assert torch.equal(d["rseqs"][m], s.r[:, :-1][m])
    # the gap features of a step read no later step
    p = s.clone()
    p.q[:, 10:] = (p.q[:, 10:] + 3) % bpa.NQ
    dp = bpa.pykt_batch(p)
    for k in ("rgaps", "sgaps", "pcounts", "itseqs"):
        assert torch.equal(dp[k][:, :10], d[k][:, :10]), k


def test_the_audit_catches_a_planted_leak_and_misalignment():
    """The audit's own machinery on hand-made forwards (no pykt needed)."""
    s = bpa.random_seqs(0)

    def causal(x):  # prediction for r_s from r_{<s} and q_s: y[:, s-1]
        return (x.r[:, :-1].double().cumsum(1) + x.q[:, 1:]).double()

    def peeks(x):  # also reads r_s
        return causal(x) + 1e-3 * x.r[:, 1:]

    def blind(x):  # never reads q_s
        return x.r[:, :-1].double().cumsum(1)

    assert bpa.causality(causal, s, 1e-10)[0] == 0.0
    assert bpa.future_change(causal, s) > 0
    change, _, first = bpa.causality(peeks, s, 1e-10)
    assert change == pytest.approx(1e-3) and first == 1
    assert bpa.leak_via(peeks, s, 1e-10) == ["r[s+0]"]
    assert bpa.alignment(causal, s, 1e-10)[0]
    aligned, _, unmoved = bpa.alignment(blind, s, 1e-10)
    assert not aligned and unmoved == bpa.audit_steps()


def test_skips_cleanly_without_pykt(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(bpa, "find_pykt_models", lambda: None)
    monkeypatch.setattr(sys, "argv", ["x", "--out", str(tmp_path / "a.json")])
    bpa.main()
    assert "not installed" in capsys.readouterr().out
    assert not (tmp_path / "a.json").exists()


@needs_pykt
def test_pykt_dkt_has_no_leak():
    mods = bpa.load_pykt("cpu", ("dkt",))
    row = bpa.audit_model("dkt", mods)
    assert row["ran"] is True and row["dtype"] == "float64"
    assert row["leak"] is False and row["max_change"] == 0.0 and row["aligned"] is True
    assert row["future_change"] > 1e-4  # earlier responses do reach later predictions


@needs_pykt
def test_pykt_atkt_without_the_fix_leaks():
    mods = bpa.load_pykt("cpu", ("atkt",))
    row = bpa.audit_model("atkt", mods)
    assert row["ran"] is True and row["leak"] is True
    assert row["max_change"] > 1e-6 and set(row["leak_modes"]) == {"eval", "train"}
    assert row["leak_via"][0] == "r[s+0]"  # the response being predicted reaches its prediction
    fixed = bpa.audit_model("atktfix", mods)
    assert fixed["leak"] is False and fixed["aligned"] is True


def test_repository_models_need_a_source(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["x", "--models", "simplekt", "--out", str(tmp_path / "a")])
    monkeypatch.setattr(bpa, "find_pykt_models", lambda: tmp_path)
    with pytest.raises(SystemExit) as e:
        bpa.main()
    assert e.value.code == 2  # argparse's usage error, naming --pykt-src


def test_cuda_calls_are_restored():
    cuda = torch.Tensor.cuda
    with cuda_calls_in_place("stablekt"):
        if not torch.cuda.is_available():
            x = torch.ones(2)
            assert x.cuda() is x  # the hard-coded .cuda() of that file stays on CPU
    with cuda_calls_in_place("dkt"):  # any other model: untouched
        assert torch.Tensor.cuda is cuda
    assert torch.Tensor.cuda is cuda


def test_a_model_that_cannot_load_is_a_row_not_a_crash():
    row = bpa.audit_model("stablekt", {"stablekt": "pykt's stablekt.py cannot be loaded: einops"})
    assert row["ran"].endswith("einops") and row["leak"] is None
