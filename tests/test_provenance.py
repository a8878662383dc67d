"""kt_lib.provenance: the commit a row records, versions and the device."""

from __future__ import annotations

import pytest

from kt_lib import provenance


def test_kt_commit_names_a_copy_without_git_and_unknown_becomes_none(monkeypatch):
    monkeypatch.setenv("KT_COMMIT", "abc1234")
    assert provenance.git_commit() == "abc1234" == provenance.run_commit()
    monkeypatch.setenv("KT_COMMIT", "")
    monkeypatch.setattr(provenance, "git_commit", lambda: "unknown")
    assert provenance.run_commit() is None


def test_versions_cores_and_device():
    found = provenance.versions()
    assert found["python"].count(".") == 2 and set(provenance.PACKAGES) <= set(found)
    assert provenance.cpu_cores() >= 1
    assert provenance.device_name("cpu")


def test_device_kind_tells_gpus_from_cpus():
    for gpu in (
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H200",
        "Tesla V100-SXM2-16GB",
        "AMD Instinct MI300X",
    ):
        assert provenance.device_kind(gpu) == "gpu", gpu
    for cpu in ("AMD EPYC", "Intel(R) Xeon(R) Processor @ 2.50GHz", "arm64"):
        assert provenance.device_kind(cpu) == "cpu", cpu


@pytest.mark.parametrize(
    "name, kind",
    [("NVIDIA H200", "gpu"), ("AMD Instinct MI300X", "gpu"), ("AMD Radeon RX 7900 XTX", "gpu"),
     ("AMD Ryzen 7 5800H with Radeon Graphics", "cpu"),
     ("AMD Ryzen 9 7940HS w/ Radeon 780M Graphics", "cpu"),
     ("AMD EPYC", "cpu"), (None, "unknown"), (float("nan"), "unknown"), ("", "unknown")],
)  # fmt: skip
def test_device_kind_reads_integrated_graphics_as_a_cpu_and_missing_names_as_unknown(name, kind):
    assert provenance.device_kind(name) == kind


def test_contains_reads_git_ancestry_and_refuses_the_unknown():
    import subprocess

    def rev(ref):
        out = subprocess.run(["git", "rev-parse", "--short", ref], cwd=provenance.ROOT,
                             capture_output=True, text=True)  # fmt: skip
        if out.returncode:
            pytest.skip("no git history here")
        return out.stdout.strip()

    head, parent = rev("HEAD"), rev("HEAD~1")
    assert provenance.contains(head, parent) and provenance.contains(f"{head}+dirty", parent)
    assert provenance.contains(head, head)
    assert not provenance.contains(parent, head)
    for later, earlier in ((None, parent), (head, None), ("unknown", parent), ("zzz", parent)):
        assert not provenance.contains(later, earlier)
