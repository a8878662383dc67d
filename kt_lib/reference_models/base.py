"""Reference models fitted on training students, giving per-step targets for alignment losses.

# B batch, L steps
Contract: `fit(train)` sees training students only; `targets(batch)` returns tensors [B, L]
(or per-skill/per-student lookups) that are causal: the target at step t is computed from the
responses at steps < t only, never from r_t or later.

Each reference declares the target names it returns in `provides`, so a head can tell at build
time whether a reference carries what it aligns to (iKT3's mastery head needs "mastery"; its
difficulty and ability terms use "beta" and "theta_student"/"seen" where a reference has them).
Shared names mean the same thing in every reference (padded steps hold no meaning):
    mastery        [B, L] mastery of the skill asked at t from the responses before t, in (0, 1)
                          (IRT: sigmoid(theta_<t - beta); BKT: P(mastered))
    beta           [B, L] difficulty of the skill asked at t (logit scale)
    theta_student  [B]    ability of the training student `uid`, with `seen` [B] bool (needs uid)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch

from ..data.dataset import Batch, KTDataset
from ..registry import Registry

REFERENCES: Registry = Registry("reference model")


class ReferenceModel(ABC):
    """A model fitted once on training data whose outputs the interpretable heads align to."""

    fitted: bool = False
    provides: ClassVar[frozenset[str]] = frozenset()  # names of the tensors `targets` returns

    @abstractmethod
    def fit(self, train: KTDataset) -> ReferenceModel:
        """Fit on training students only; returns self."""

    @abstractmethod
    def targets(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Causal per-batch targets, on the batch's device."""

    def check_fitted(self) -> None:
        if not self.fitted:
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit(train) first")


def references_providing(*names: str) -> list[str]:
    """Registered references whose targets include every one of `names`."""
    return [n for n in REFERENCES.names() if set(names) <= REFERENCES[n].provides]


def build_reference(name: str, **kwargs) -> ReferenceModel:
    """Build a registered reference model ('bkt', 'irt', ...)."""
    return REFERENCES[name](**kwargs)
