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


def test_repeats_count_steps_that_repeat_the_previous_skill_and_response():
    import numpy as np

    from kt_lib.data.dataset import KTDataset, StudentSeq

    a = StudentSeq(0, np.array([1, 1, 1, 2]), np.array([0, 0, 1, 1]))  # 3 steps after the first
    b = StudentSeq(1, np.array([3, 3]), np.array([1, 1]))  # 1 step
    one = StudentSeq(2, np.array([4]), np.array([1]))  # no step after its first: not counted
    rep = KTDataset([a, b, one], num_c=5).repeats()
    # same skill at 3 of 4 steps (a: 1->1, 1->1; b: 3->3); same response at 2 of those 3
    assert rep == {"same_skill": 0.75, "same_response": 2 / 3}
    assert np.isnan(KTDataset([one], num_c=5).repeats()["same_skill"])
