"""benchmarks/device_lease.sh: a lease's one call runs the check, then the study's cells, and
packs what must come back within the device tool's limits (a stand-in python: no GPU here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the stand-in python: logs its arguments; as the study, writes a checkpoint of $CKPT_BYTES bytes
# (none when 0; and a half-written .tmp one) and exits $STUDY_RC
FAKE_PYTHON = """#!/bin/sh
echo "$@" >> "$OUT/calls.txt"
case "$1" in
benchmarks/gpu_check.py) mkdir -p "$OUT/gpu_check_parts"; echo check ran; exit 0;;
esac
[ "$CKPT_BYTES" -gt 0 ] && head -c "$CKPT_BYTES" /dev/urandom > runs/checkpoints/toy/new_last.pt
echo half > runs/checkpoints/toy/.new_best.pt.tmp
exit "$STUDY_RC"
"""


def _lease(tmp_path: Path, *args: str, ckpt_bytes: int = 1000, study_rc: int = 0):
    repo, out = tmp_path / "repo", tmp_path / "out"
    (repo / "benchmarks").mkdir(parents=True)
    shutil.copy(ROOT / "benchmarks" / "device_lease.sh", repo / "benchmarks")
    (repo / "results").mkdir()
    (repo / "results" / "toy.json").write_text('{"results": []}')
    ckpt = repo / "runs" / "checkpoints" / "toy"
    ckpt.mkdir(parents=True)
    (ckpt / "old_last.pt").write_bytes(b"carried in, untouched by the study")
    os.utime(ckpt / "old_last.pt", (0, 0))
    out.mkdir()
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    # TMPDIR nowhere: the stamp must lie beside the checkpoints (one filesystem's clock)
    env = {**os.environ, "OUT": str(out), "DEVICE": "cpu", "PYTHON": str(fake),
           "CKPT_BYTES": str(ckpt_bytes), "STUDY_RC": str(study_rc),
           "TMPDIR": str(tmp_path / "no-such-dir")}  # fmt: skip
    p = subprocess.run(
        ["bash", str(repo / "benchmarks" / "device_lease.sh"), *args],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    return p, out


def test_the_lease_checks_then_runs_the_study_and_packs_what_comes_back(tmp_path):
    p, out = _lease(tmp_path, "30", "20", "toy", "--models", "gkt", "--workers", "6")
    assert p.returncode == 0, p.stderr
    calls = (out / "calls.txt").read_text().splitlines()
    assert calls[0].startswith("benchmarks/gpu_check.py --device cpu --zoo")
    assert "--budget 30" in calls[0] and "--data-dir .devcarry/data/assist2009" in calls[0]
    assert calls[1] == (
        "-m kt_lib.runs.studies run toy --device cpu --data-root .devcarry/data "
        "--models gkt --workers 6"
    )
    assert not (out / "gpu_check_parts").exists()  # its rows live in gpu_check.json
    assert (out / "toy.json").read_text() == '{"results": []}'
    with tarfile.open(out / "checkpoints.tgz") as tar:
        # what the study wrote, not what was carried in (it would overwrite newer ones here)
        # nor a save cut off half-way
        assert tar.getnames() == ["runs/checkpoints/toy/new_last.pt"]
    assert "study toy: exit 0" in p.stdout


def test_checkpoints_over_the_tools_file_limit_come_back_in_parts(tmp_path):
    p, out = _lease(tmp_path, "0", "20", "toy", ckpt_bytes=17_000_000)
    assert p.returncode == 0, p.stderr
    assert "gpu_check" not in (out / "calls.txt").read_text()  # CHECK_SECONDS 0: no check
    parts = sorted(out.glob("checkpoints.tgz.*"))
    assert [q.name for q in parts] == ["checkpoints.tgz.0", "checkpoints.tgz.1"]
    assert all(q.stat().st_size <= 15_000_000 for q in parts)
    joined = tmp_path / "joined.tgz"
    joined.write_bytes(b"".join(q.read_bytes() for q in parts))
    with tarfile.open(joined) as tar:
        member = tar.getmember("runs/checkpoints/toy/new_last.pt")
        assert member.size == 17_000_000


def test_checkpoints_over_three_parts_are_left_behind_and_said_so(tmp_path):
    p, out = _lease(tmp_path, "0", "20", "toy", ckpt_bytes=46_000_000)
    assert p.returncode == 0, p.stderr
    assert not list(out.glob("checkpoints.tgz*"))
    assert "over 45 MB packed, left behind" in p.stdout


def test_a_study_that_wrote_no_checkpoint_says_so(tmp_path):
    p, out = _lease(tmp_path, "0", "20", "toy", ckpt_bytes=0)
    assert p.returncode == 0, p.stderr
    assert not list(out.glob("checkpoints.tgz*"))
    # the half-written .tmp and the carried-in checkpoint are there, the stamp is gone
    assert "checkpoints of toy: none written since the study began (2 files in" in p.stdout
    left = tmp_path / "repo" / "runs" / "checkpoints" / "toy"
    assert not list(left.glob(".lease-stamp.*"))


def test_a_stopped_study_still_comes_back_and_its_status_is_the_calls(tmp_path):
    p, out = _lease(tmp_path, "0", "20", "toy", study_rc=124)
    assert p.returncode == 124 and "study toy: exit 124" in p.stdout
    assert (out / "toy.json").exists() and (out / "checkpoints.tgz").exists()


def test_bad_arguments_print_the_usage(tmp_path):
    script = str(ROOT / "benchmarks" / "device_lease.sh")
    env = {**os.environ, "OUT": str(tmp_path)}
    for args, says in (
        (["30"], ""),
        (["390.5", "140", "toy"], "whole numbers, got 390.5"),
        (["0", "140", "../toy"], "a study's name (letters, digits, _ and -), got '../toy'"),
    ):
        p = subprocess.run(["bash", script, *args], capture_output=True, text=True, env=env)
        assert p.returncode == 2 and says in p.stderr
        assert "device_lease.sh CHECK_SECONDS STUDY_SECONDS STUDY" in p.stderr
