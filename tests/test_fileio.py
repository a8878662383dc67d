"""kt_lib.fileio: a write is all or nothing, JSON round-trips, the lock is exclusive."""

from __future__ import annotations

import json
import threading
import time

import pytest

from kt_lib.fileio import atomic_write_bytes, locked, save_json


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "r.json"
    save_json(path, {"a": 1})

    def torn(f):
        f.write(b'{"a": ')
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError, match="killed"):
        atomic_write_bytes(path, torn)
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_the_lock_holds_a_second_writer_until_the_first_is_done(tmp_path):
    path, order = tmp_path / "r.json", []

    def second():
        with locked(path):
            order.append("second")

    with locked(path):
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.2)
        order.append("first")
    t.join()
    assert order == ["first", "second"]
