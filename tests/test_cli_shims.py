"""The `kt` command: subcommands, --help, --version, one-line input errors, and the python -m
forms that run the same code."""

from __future__ import annotations

import functools
import json

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
    ],
)
def test_input_errors_are_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
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
