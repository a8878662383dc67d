"""Reference models fitted on training students, giving per-step targets for alignment losses.

# B batch, L steps
Contract: `fit(train)` sees training students only; `targets(batch)` returns tensors [B, L]
(or per-skill/per-student lookups) that are causal: the target at step t is computed from the
responses at steps < t only, never from r_t or later.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from ..data.dataset import Batch, KTDataset
from ..registry import Registry

REFERENCES: Registry = Registry("reference model")


class ReferenceModel(ABC):
    """A model fitted once on training data whose outputs the interpretable heads align to."""

    fitted: bool = False

    @abstractmethod
    def fit(self, train: KTDataset) -> ReferenceModel:
        """Fit on training students only; returns self."""

    @abstractmethod
    def targets(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Causal per-batch targets, on the batch's device."""

    def check_fitted(self) -> None:
        if not self.fitted:
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit(train) first")


def build_reference(name: str, **kwargs) -> ReferenceModel:
    """Build a registered reference model ('bkt', 'irt', ...)."""
    return REFERENCES[name](**kwargs)
