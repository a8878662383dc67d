"""Warnings for seed settings that are allowed but suspect (every layer may import them).

`SeedRangeWarning`: a value lies outside the range its seed states (SAKT's hyperparameters,
seed 004 section 6.1; SimAKT's memory sizes, seed 000). `SeedSettingWarning`: a setting that the
seed's own example sets has no effect where it is given (e.g. `cluster_config.similarity_metric`
under a temporal strategy); other values of such settings are refused with a ValueError.
Each distinct message is raised once per process (`warn_once`): Python's own "once per place"
memory is reset whenever any code changes the warning filters (catch_warnings does). The
library silences these warnings with `quiet()`, never with catch_warnings: a warning silenced
there is not used up, so the user still sees it once where the same setting is given.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class SeedRangeWarning(UserWarning):
    """A hyperparameter lies outside the range its seed states."""


class SeedSettingWarning(UserWarning):
    """A setting the seed's own example gives has no effect where it is given."""


_SEEN: set[tuple[type, str]] = set()  # (category, message) already raised in this process
_QUIET: ContextVar[tuple[type[Warning], ...]] = ContextVar("seed_warnings_quiet", default=())


@contextmanager
def quiet(
    *categories: type[Warning],
) -> Iterator[None]:
    """Silence seed warnings (default: both classes) in a block without using them up:
    `warn_once` there neither warns nor remembers, and plain warnings of those classes are
    ignored, so the same warning is still raised once outside the block."""
    categories = categories or (SeedRangeWarning, SeedSettingWarning)
    token = _QUIET.set(_QUIET.get() + categories)
    try:
        with warnings.catch_warnings():
            for category in categories:
                warnings.simplefilter("ignore", category)
            yield
    finally:
        _QUIET.reset(token)


def warn_once(message: str, category: type[Warning], stacklevel: int = 2) -> None:
    """warnings.warn, the first time this (category, message) is raised in the process
    (outside `quiet()` blocks, which neither warn nor count)."""
    if issubclass(category, _QUIET.get()) or (category, message) in _SEEN:
        return
    _SEEN.add((category, message))
    warnings.warn(message, category, stacklevel=stacklevel + 1)


def warn_outside(what: str, value: float, low: float, high: float, seed: str) -> None:
    """SeedRangeWarning when `value` is outside [low, high] (`seed` says where the range is
    given, e.g. "the range of seed 000's example configs")."""
    if not low <= value <= high:
        warn_once(
            f"{what}={value} is outside [{low}, {high}], {seed}; allowed, but the seed was not "
            "designed or tuned for it",
            SeedRangeWarning,
            stacklevel=2,
        )
