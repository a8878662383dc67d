"""The command lines keep their names: python -m kt_lib.experiment / .leaderboard / .studies run
the kt_lib.runs modules."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kt_lib.provenance import ROOT


def run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    "args, expected",
    [
        (("kt_lib.experiment", "--help"), "--data-format"),
        (("kt_lib.leaderboard", "results/ordinal.json", "--no-published"), "| assist2009 |"),
        (("kt_lib.studies", "list"), "ordinal"),
    ],
)
def test_the_command_lines_keep_their_names(args, expected):
    assert expected in run(*args)
