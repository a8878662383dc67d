"""Batches (kt_lib.data.dataset)."""

from __future__ import annotations

import torch

from kt_lib.audit import random_batch
from kt_lib.data.dataset import Batch


def test_batch_to_and_clone_are_independent():
    b = random_batch(5, B=2, L=4)
    c = b.clone()
    c.r[:] = 1
    assert not torch.equal(b.r, c.r)
    assert isinstance(b.to("cpu"), Batch)
