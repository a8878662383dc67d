"""Checkpoint integrity, load errors that name the file, and file modes of atomic writes."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat

import pytest
import torch

import kt_lib.fileio as fileio
from kt_lib.checkpoint import (
    load_checkpoint,
    load_json,
    load_model,
    load_tensors,
    save_json,
    save_model,
    save_tensors,
)
from kt_lib.models import build_model
from tests.conftest import make_tiny_dataset


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model("sakt", preset="tiny", dataset=make_tiny_dataset(n=4))


def _bump(model) -> None:
    """The next 'epoch': different weights."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)


def test_save_model_records_the_pt_hash_and_round_trips(model, tmp_path):
    save_model(tmp_path / "m", model, {"epoch": 3})
    meta, tensors = load_checkpoint(tmp_path / "m")
    assert meta["epoch"] == 3 and re.fullmatch(r"[0-9a-f]{64}", meta["pt_sha256"])
    for k, v in model.state_dict().items():
        assert torch.equal(tensors["model"][k], v)
    loaded, meta2, _ = load_model(tmp_path / "m")
    assert meta2 == meta and isinstance(loaded, type(model))
    # the lower-level helpers keep working for other callers
    assert load_json(tmp_path / "m.json") == meta
    assert set(load_tensors(tmp_path / "m.pt")) == {"model", "extra"}


def test_flipped_byte_in_pt_is_refused(model, tmp_path):
    save_model(tmp_path / "m", model)
    pt = tmp_path / "m.pt"
    data = bytearray(pt.read_bytes())
    data[len(data) // 2] ^= 0xFF
    pt.write_bytes(bytes(data))
    for load in (load_checkpoint, load_model):
        with pytest.raises(ValueError, match=r"m\.pt does not match .*m\.json.*inconsistent"):
            load(tmp_path / "m")


def test_pt_of_another_epoch_is_refused(model, tmp_path):
    save_model(tmp_path / "a" / "m", model, {"epoch": 1})
    _bump(model)
    save_model(tmp_path / "b" / "m", model, {"epoch": 2})
    shutil.copyfile(tmp_path / "b" / "m.pt", tmp_path / "a" / "m.pt")
    with pytest.raises(ValueError, match=r"a/m\.pt does not match .*a/m\.json.*interrupted"):
        load_checkpoint(tmp_path / "a" / "m")


def test_save_interrupted_between_pt_and_json_loads_the_previous_pair(model, tmp_path, monkeypatch):
    """The .json still names the previous .pt, kept as <prefix>.prev.pt: that pair loads; without
    it (removed by hand) the torn pair is refused, never loaded."""
    save_model(tmp_path / "m", model, {"epoch": 1})
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def killed(path, obj):
        raise KeyboardInterrupt  # the process dies after the .pt rename, before the .json

    monkeypatch.setattr(fileio, "save_json", killed)
    _bump(model)
    with pytest.raises(KeyboardInterrupt):
        save_model(tmp_path / "m", model, {"epoch": 2})
    meta, tensors = load_checkpoint(tmp_path / "m")
    assert meta["epoch"] == 1
    assert all(torch.equal(v, before[k]) for k, v in tensors["model"].items())
    (tmp_path / "m.prev.pt").unlink()
    with pytest.raises(ValueError, match="inconsistent"):
        load_checkpoint(tmp_path / "m")


def test_pair_without_hash_loads_with_a_warning(model, tmp_path):
    save_model(tmp_path / "m", model)
    meta = load_json(tmp_path / "m.json")
    del meta["pt_sha256"]
    save_json(tmp_path / "m.json", meta)
    with pytest.warns(UserWarning, match="no pt_sha256"):
        load_checkpoint(tmp_path / "m")


@pytest.mark.filterwarnings("ignore:.*no pt_sha256")
@pytest.mark.parametrize(
    "kind, content",
    [
        ("empty", b""),  # EOFError
        ("random", b"\x80\x02garbage" * 10),  # UnpicklingError with weights_only advice
        ("text", b"hello world\n"),  # KeyError
        ("directory", None),  # IsADirectoryError (an OSError)
    ],
    ids=["empty", "random", "text", "directory"],
)
def test_unreadable_pt_names_the_file(model, tmp_path, kind, content):
    save_model(tmp_path / "m", model)
    pt = tmp_path / "m.pt"
    pt.unlink()
    if content is None:
        pt.mkdir()
    else:
        pt.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(str(pt))) as info:
        load_tensors(pt)
    assert "weights_only" not in str(info.value)  # no advice to unpickle untrusted bytes
    meta = load_json(tmp_path / "m.json")
    meta["pt_sha256"] = None  # an unverified pair: torch.load's error must still name the file
    save_json(tmp_path / "m.json", meta)
    with pytest.raises(ValueError, match=re.escape(str(pt))):
        load_checkpoint(tmp_path / "m")


def test_truncated_pt_names_the_file(model, tmp_path):
    save_tensors(tmp_path / "t.pt", {"w": torch.ones(100)})
    data = (tmp_path / "t.pt").read_bytes()
    (tmp_path / "t.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"t\.pt: not a loadable tensor checkpoint"):
        load_tensors(tmp_path / "t.pt")


def test_bad_json_names_the_file_line_and_column(model, tmp_path):
    save_model(tmp_path / "m", model)
    js = tmp_path / "m.json"
    js.write_text('{\n  "model": "sakt",\n  "config": \n}')
    for load in (load_json, lambda p: load_checkpoint(tmp_path / "m")):
        with pytest.raises(ValueError, match=r"m\.json: not valid JSON at line 4, column 1"):
            load(js)
    js.write_bytes(b"\xff\xfe garbage")
    with pytest.raises(ValueError, match=r"m\.json: not valid JSON \(not UTF-8"):
        load_json(js)
    js.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"m\.json: expected a JSON object, got list"):
        load_json(js)
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(ValueError, match=r"dir\.json: cannot read the file"):
        load_json(tmp_path / "dir.json")
    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_json(tmp_path / "missing.json")


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_writes_get_the_mode_open_would_give(model, tmp_path):
    old = os.umask(0o022)
    try:
        save_json(tmp_path / "results.json", {"a": 1})
        save_model(tmp_path / "m", model)
        assert _mode(tmp_path / "results.json") == 0o644
        assert _mode(tmp_path / "m.pt") == _mode(tmp_path / "m.json") == 0o644
        os.umask(0o027)
        save_json(tmp_path / "new.json", {"a": 1})
        assert _mode(tmp_path / "new.json") == 0o640
        os.chmod(tmp_path / "results.json", 0o664)  # replacing a file keeps its mode
        save_json(tmp_path / "results.json", {"a": 2})
        assert _mode(tmp_path / "results.json") == 0o664
        assert json.loads((tmp_path / "results.json").read_text()) == {"a": 2}
    finally:
        os.umask(old)
    assert not list(tmp_path.glob(".*.tmp"))


PROBE = """
from kt_lib.heads.inter import DeepSetSimilarity

IMPORTED = True


class ProbeHead(DeepSetSimilarity):
    pass
"""


def test_a_checkpoint_naming_outside_code_is_refused_without_trust_code(tmp_path, monkeypatch):
    """Loading never imports a module a file names unless the caller opts in: the refused load
    leaves the module unimported; kt_lib's own heads load without the flag; trust_code=True
    loads the custom one and gives the same predictions."""
    import sys

    from kt_lib.audit import random_batch
    from kt_lib.checkpoint import load_model, save_model
    from tests.simakt_support import OTHER_HEADS, simakt, students

    train = students()
    model = simakt(OTHER_HEADS, train)
    save_model(tmp_path / "ours", model)
    again, _, _ = load_model(tmp_path / "ours")  # kt_lib.heads...DeepSetSimilarity: trusted
    assert type(again) is type(model)

    (tmp_path / "kt_probe_head.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    meta = json.loads((tmp_path / "ours.json").read_text())
    text = json.dumps(meta).replace(
        "kt_lib.heads.inter.DeepSetSimilarity", "kt_probe_head.ProbeHead"
    )
    shutil.copy(tmp_path / "ours.pt", tmp_path / "probe.pt")
    (tmp_path / "probe.json").write_text(text)
    with pytest.raises(PermissionError, match=r"kt_probe_head\.ProbeHead.*trust_code=True"):
        load_model(tmp_path / "probe")
    assert "kt_probe_head" not in sys.modules
    loaded, _, _ = load_model(tmp_path / "probe", trust_code=True)
    assert "kt_probe_head" in sys.modules
    batch = random_batch(8, B=3, L=16, num_pid=train.num_pid, seed=0)
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(batch).logits, model.eval()(batch).logits)
    sys.modules.pop("kt_probe_head", None)


def _kill_file_operation(monkeypatch, kill_at: int) -> None:
    """The process dies (KeyboardInterrupt) at the `kill_at`-th os.replace/link/unlink."""
    calls = {"n": 0}

    def dying(fn):
        def run(*a, **kw):
            if calls["n"] == kill_at:
                raise KeyboardInterrupt("killed")
            calls["n"] += 1
            return fn(*a, **kw)

        return run

    for name in ("replace", "link", "unlink"):
        monkeypatch.setattr(os, name, dying(getattr(os, name)))


@pytest.mark.parametrize("kill_at", range(6))
def test_a_save_killed_at_any_step_leaves_a_whole_checkpoint(tmp_path, monkeypatch, kill_at):
    """Kill `save_model` at each file operation of its sequence (link the old .pt aside, write
    the new .pt, write the .json, drop the aside copy): loading then gives the old checkpoint or
    the new one, whole, never an error; and a later save over the debris works."""
    from kt_lib.checkpoint import load_checkpoint, save_model

    torch.manual_seed(0)
    model = build_model("sakt", preset="tiny", dataset=make_tiny_dataset(n=4))
    save_model(tmp_path / "m", model, {"epoch": 0})
    old = {k: v.clone() for k, v in model.state_dict().items()}
    _bump(model)
    new = {k: v.clone() for k, v in model.state_dict().items()}
    _kill_file_operation(monkeypatch, kill_at)
    try:
        save_model(tmp_path / "m", model, {"epoch": 1})
        finished = True
    except KeyboardInterrupt:
        finished = False
    monkeypatch.undo()
    meta, tensors = load_checkpoint(tmp_path / "m")
    want = new if meta["epoch"] == 1 else old
    assert meta["epoch"] in (0, 1) and (finished <= (meta["epoch"] == 1))
    for k, v in tensors["model"].items():
        assert torch.equal(v, want[k]), (kill_at, k)
    save_model(tmp_path / "m", model, {"epoch": 2})
    assert load_checkpoint(tmp_path / "m")[0]["epoch"] == 2


def test_a_checkpoint_reading_a_config_file_is_refused_without_trust_code(tmp_path, monkeypatch):
    """A SimAKT checkpoint whose config points at a YAML file (which may name code) is refused
    before the file is read; a model built from a file saves what it read, so its checkpoint
    needs no file and no flag."""
    import sys

    import yaml

    from kt_lib.audit import random_batch
    from kt_lib.checkpoint import load_model, save_model
    from tests.simakt_support import OTHER_HEADS, simakt, students

    train = students()
    model = simakt(OTHER_HEADS, train)
    mapping = model.config.similarity_config().to_mapping()
    (tmp_path / "sim.yaml").write_text(yaml.safe_dump(mapping))
    from_file = simakt(str(tmp_path / "sim.yaml"), train)
    save_model(tmp_path / "from_file", from_file)
    saved = json.loads((tmp_path / "from_file.json").read_text())["config"]["similarity"]
    assert isinstance(saved, dict)  # the file's content, not its path
    (tmp_path / "sim.yaml").unlink()
    loaded, _, _ = load_model(tmp_path / "from_file")  # no file, no flag needed
    batch = random_batch(8, B=3, L=16, num_pid=train.num_pid, seed=0)
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(batch).logits, from_file.eval()(batch).logits)

    (tmp_path / "kt_probe_head2.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = json.loads(json.dumps(mapping).replace(
        "kt_lib.heads.inter.DeepSetSimilarity", "kt_probe_head2.ProbeHead"
    ))  # fmt: skip
    (tmp_path / "probe.yaml").write_text(yaml.safe_dump(probe))
    meta = json.loads((tmp_path / "from_file.json").read_text())
    for similarity in (str(tmp_path / "probe.yaml"), {"base": str(tmp_path / "probe.yaml")}):
        meta["config"]["similarity"] = similarity
        (tmp_path / "probe.json").write_text(json.dumps(meta))
        shutil.copy(tmp_path / "from_file.pt", tmp_path / "probe.pt")
        with pytest.raises(PermissionError, match=r"probe\.yaml.*trust_code=True"):
            load_model(tmp_path / "probe")
        assert "kt_probe_head2" not in sys.modules
    sys.modules.pop("kt_probe_head2", None)


@pytest.mark.parametrize("kill_at", range(4))
def test_a_second_kill_after_a_killed_save_still_leaves_a_whole_checkpoint(
    tmp_path, monkeypatch, kill_at
):
    """Save 1 dies between its .pt and its .json (the .json names the kept .prev.pt); save 2
    dies at each of its file operations: the orphan .pt of save 1 never replaces the kept copy,
    so the last whole checkpoint (epoch 0, or save 2's) still loads."""
    from kt_lib.checkpoint import load_checkpoint, save_model

    torch.manual_seed(0)
    model = build_model("sakt", preset="tiny", dataset=make_tiny_dataset(n=4))
    save_model(tmp_path / "m", model, {"epoch": 0})

    def killed(path, obj):
        raise KeyboardInterrupt("killed")

    _bump(model)
    monkeypatch.setattr(fileio, "save_json", killed)
    with pytest.raises(KeyboardInterrupt):
        save_model(tmp_path / "m", model, {"epoch": 1})
    monkeypatch.undo()
    _kill_file_operation(monkeypatch, kill_at)
    _bump(model)
    try:
        save_model(tmp_path / "m", model, {"epoch": 2})
    except KeyboardInterrupt:
        pass
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "m")[0]["epoch"] in (0, 2)


def test_remove_checkpoint_leaves_a_run_another_process_trains(tmp_path):
    """A run finished elsewhere has its stale epoch files removed at a study's start, unless a
    process holds its claim (it trains that run now): then its files are left alone."""
    from kt_lib.checkpoint import remove_checkpoint
    from kt_lib.fileio import locked

    prefix = tmp_path / "run"
    for name in ("run_last.pt", "run_last.json"):
        (tmp_path / name).write_text("x")
    with locked(tmp_path / "run.claim"):
        remove_checkpoint(prefix)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "run.claim.lock", "run_last.json", "run_last.pt"]  # fmt: skip
    remove_checkpoint(prefix)
    assert not list(tmp_path.iterdir())
