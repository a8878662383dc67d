"""Published results (kt_lib.published)."""

from __future__ import annotations

import pytest

from kt_lib.published import PUBLISHED, published_frame, published_wide


def test_published_table():
    frame = published_frame()
    assert len(frame) == len(PUBLISHED) and frame["auc"].between(0.5, 1).all()
    assert (frame["protocol"].str.len() > 10).all() and frame["source"].notna().all()
    wide = published_wide()
    assert wide.loc[("assist2009", "akt"), "pyKT"] == pytest.approx(0.7853)
    assert wide.loc[("statics2011", "dkvmn"), "DKVMN paper"] == pytest.approx(0.8284)
