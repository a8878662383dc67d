"""Process settings (kt_lib.runtime)."""

from __future__ import annotations

import sys

import torch


def test_keep_freed_memory_applies_once_on_glibc():
    import platform

    from kt_lib import runtime

    expected = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert runtime.keep_freed_memory() is expected
    assert runtime.keep_freed_memory() is expected  # idempotent
    x = torch.ones(64 << 20 >> 2)  # 64 MB: above glibc's default mmap threshold
    del x
    assert torch.ones(8).sum() == 8  # allocation still works after the settings
