"""The `kt` command: subcommands, --help, --version, one-line input errors, and the python -m
forms that run the same code."""

from __future__ import annotations

import functools
import json
import sys

import pytest
from cli_helpers import run_many

from kt_lib.cli import COMMANDS, main

FORMS = [
    (("kt_lib.cli", "run", "--help"), "--data-format"),
    (("kt_lib.cli", "leaderboard", "results/ordinal.json", "--no-published"), "| assist2009 |"),
    (("kt_lib.cli", "study", "list"), "ordinal"),
    (("kt_lib.runs.experiment", "--help"), "--data-format"),
    (("kt_lib.runs.studies", "list"), "ordinal"),
]


@functools.cache
def ran() -> dict[tuple[str, ...], tuple[int, str, str]]:
    """Each form as `python -m ...`, all in one fresh interpreter."""
    return dict(zip([a for a, _ in FORMS], run_many([["-m", *a] for a, _ in FORMS]), strict=True))


@pytest.mark.parametrize("args, expected", FORMS)
def test_kt_subcommands_and_python_m_forms(args, expected):
    code, out, err = ran()[args]
    assert code == 0, err
    assert expected in out


def test_kt_help_lists_every_subcommand_and_each_answers_help(capsys):
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    for name in COMMANDS:
        assert f"  {name} " in listed
        assert main([name, "--help"]) == 0, name
    capsys.readouterr()
    assert main(["--version"]) == 0 and capsys.readouterr().out.startswith("kt ")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "--models", "no_such_model"], "unknown model 'no_such_model'"),
        (["run", "--models", "dkt", "--epochs", "-3"], "argument --epochs: must be >= 1, got -3"),
        (["run", "--models", "dkt", "--lr", "nan"], "argument --lr: must be finite > 0"),
        (["run", "--models", "dkt", "--momentum", "0.9"], "momentum 0.9 is SGD's"),
        (["run", "--models", "dkt", "--lr-decay", "0.5"], "go together"),
        (["run", "--models", "dkt", "--data-dir", "/no/such/folder"], "/no/such/folder"),
        (["nope"], "unknown command 'nope'"),
        (["bench", "nope"], "no benchmark 'nope'"),
        # found in a review (2026-11-28): each trained, lost its result or said nothing before
        (["run", "--models", "dkt", "sakt", "dkt"], "--models names dkt more than once"),
        (["run", "--models", "dkt", "--seeds", "0", "0"], "--seeds names 0 more than once"),
        (["run", "--models", "dkt", "--out", "/"], "is a folder"),
        (["run", "--models", "dkt", "--out", "/no/such/dir/x.json"], "does not exist"),
        (["run", "--models", "dkt", "--precision", "tf32"], "tf32 is a CUDA matrix-product"),
        (["run", "--models", "dtransformer"], "pass --max-len 64, or --set max_len=200"),
        (["run", "--models", "sakt", "--set", "dropout=[1"], "the value is not YAML"),
        (
            [
                "run",
                "--models",
                "dkt",
                "--data-format",
                "pykt",
                "--data-dir",
                "/x",
                "--columns",
                "user=u",
            ],
            "--columns names the columns of a log file",
        ),  # fmt: skip
        (["memory", "build", "--out", "/tmp/kt_nobank", "--set", "foo"], "--set takes KEY=VALUE"),
        (
            ["memory", "build", "--out", "/tmp/kt_nobank", "--data-dir", "/x", "--seq-len", "5"],
            "--seq-len: simulator settings",
        ),  # fmt: skip
        (["memory", "build", "--out", "/tmp/kt_nobank", "--d", "0"], "--d 0: must be >= 1"),
        (
            [
                "memory",
                "build",
                "--out",
                "/tmp/kt_nobank",
                "--similarity",
                "no_inter_student",
                "--preset",
                "tiny",
            ],
            "nothing to build",
        ),  # fmt: skip
        (["study", "run", "leaderboard", "--threads", "0"], "must be >= 1, got 0"),
        (["study", "render", "pairs", "--write", "--out", "/tmp/other.json"], "is another file"),
    ],
)
def test_input_errors_are_one_line_and_exit_2(argv, message, capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["caller"])
    assert main(argv) == 2
    assert sys.argv == ["caller"]  # `kt NAME` named argparse's program, then left
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("error: "), err
    assert "usage: kt run" not in err  # no usage block before a bad flag's line
    assert sum(line.startswith("error: ") for line in err.splitlines()) == 1


def test_run_trains_with_an_authors_optimiser_and_records_it(tmp_path, capsys):
    out = tmp_path / "sgd.json"
    argv = ["run", "--models", "dkt", "--epochs", "2", "--optimizer", "sgd", "--momentum", "0.9",
            "--lr", "0.5", "--lr-decay", "0.5", "--lr-decay-every", "1", "--grad-clip", "5",
            "--loss-per", "window", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    (row,) = json.loads(out.read_text())["results"]
    t = row["train"]
    assert (t["optimizer"], t["momentum"], t["lr_decay"], t["lr_decay_every"]) == (
        "sgd",
        0.9,
        0.5,
        1,
    )
    assert (t["lr"], t["grad_clip"], t["loss_per"]) == (0.5, 5.0, "window")
    assert row["epochs"] == 2


def test_cuda_is_refused_before_any_data_on_a_machine_without_one(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["run", "--models", "dkt", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_runs_with_other_set_fields_are_kept_side_by_side(tmp_path, capsys):
    """--set is part of a row's identity: a rerun with another dropout adds a row (it used to
    replace the first, unrecorded); the same command again replaces its own row, and says so."""
    out = tmp_path / "runs.json"
    base = ["run", "--models", "dkt", "--epochs", "1", "--out", str(out)]
    for value in ("0.1", "0.3", "0.3"):
        assert main([*base, "--set", f"dropout={value}"]) == 0
    rows = json.loads(out.read_text())["results"]
    assert sorted(r["set"]["dropout"] for r in rows) == [0.1, 0.3]
    assert "replaces the earlier row of dkt seed 0" in capsys.readouterr().err
