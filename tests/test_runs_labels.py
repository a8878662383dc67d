"""kt_lib.runs.labels: a budget's labels searched side by side, one process each. At most
`workers` run at once, each writes its own log, a failure is reported while the others finish;
and two labels searching the same SQLite storage at once both land every trial (and the
committed record both labels)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from kt_lib.runs import budget
from kt_lib.runs.labels import run_side_by_side


def _sleeper(seconds: float, code: int = 0) -> list[str]:
    return [sys.executable, "-c", "import time, sys; print('start', time.time(), flush=True); "
            f"time.sleep({seconds}); print('end', time.time()); sys.exit({code})"]  # fmt: skip


def test_at_most_workers_run_at_once_each_logs_and_a_failure_does_not_stop_the_rest(tmp_path):
    # 2 s sleeps: the two children's interpreter start-ups must land within one sleep of each
    # other, on two cores shared with pytest's other worker and nbval's kernels
    commands = {"a": _sleeper(2.0), "b": _sleeper(2.0, code=3), "c": _sleeper(0.1)}
    t0 = time.time()
    status = run_side_by_side(commands, workers=2, logs=tmp_path, poll=0.05)
    assert status == {"a": 0, "b": 3, "c": 0}
    spans = {}
    for label in commands:
        lines = (tmp_path / f"{label}.log").read_text().split()
        spans[label] = (float(lines[1]), float(lines[3]))
    (a0, a1), (b0, b1), (c0, _) = spans["a"], spans["b"], spans["c"]
    assert a0 < b1 and b0 < a1  # the first two ran at once
    assert c0 >= min(a1, b1) - 0.01  # the third waited for one of them: never three at once
    assert min(a0, b0) >= t0


def test_the_cli_refuses_zero_workers(capsys):
    with pytest.raises(SystemExit) as exc:
        budget.main(["search", "simakt", "--workers", "0"])
    assert exc.value.code == 2 and "--workers 0" in capsys.readouterr().err


CHILD = """
import sys
from kt_lib.data.synthetic import simulate
from kt_lib.runs import budget
from kt_lib.train import TrainConfig
label, storage, record, ckpt = sys.argv[1:5]
sim = simulate(num_students=30, seq_len=12, num_c=5, seed=4).data
bundle = type("B", (), {"train": sim.subset(range(24)), "valid": sim.subset(range(24, 30))})
budget.search_label(budget.BUDGETS["simakt"], bundle, label, 3, TrainConfig(epochs=2,
    progress=False), storage, preset="tiny", record=__import__("pathlib").Path(record),
    checkpoints=ckpt)
"""


def test_two_labels_search_one_sqlite_storage_at_once(tmp_path):
    storage, record = f"sqlite:///{tmp_path / 'budget.db'}", tmp_path / "trials.json"
    labels = ("dtransformer", "simakt_knn_only")
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, label, storage, str(record),
                               str(tmp_path / "ckpt" / label)], stderr=subprocess.PIPE, text=True)
             for label in labels]  # fmt: skip
    errors = [p.communicate()[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    assert all("database is locked" not in e for e in errors)
    for label in labels:
        assert budget.finished_trials(storage, label) == 3
    kept = json.loads(record.read_text())["labels"]
    assert {label: len(kept[label]) for label in labels} == dict.fromkeys(labels, 3)


def test_the_cli_runs_each_label_as_a_child_that_ends_with_it(tmp_path, monkeypatch, capsys):
    from kt_lib.runs import labels as side

    argv = side.child_argv("simakt", "dtransformer", ["--trials", "3"])
    assert argv[-6:-2] == ["--labels", "dtransformer", "--trials", "3"]
    assert argv[-2:] == ["--parent", str(__import__("os").getpid())]
    seen = []
    monkeypatch.setattr(side, "LOGS", tmp_path)
    monkeypatch.setattr(side, "child_argv", lambda b, label, o: seen.append((label, o))
                        or _sleeper(0.0, code=2 if label == "simakt_pwd" else 0))  # fmt: skip
    monkeypatch.setattr(budget, "restore", lambda *a, **k: 0)  # no storage touched here
    with pytest.raises(SystemExit, match=r"\['simakt_pwd'\] failed"):
        budget.main(["search", "simakt", "--labels", "dtransformer", "simakt_pwd", "--workers",
                     "2", "--trials", "3", "--storage", "sqlite:///x.db"])  # fmt: skip
    assert [label for label, _ in seen] == ["dtransformer", "simakt_pwd"]
    assert seen[0][1][-2:] == ["--storage", "sqlite:///x.db"]
    assert (tmp_path / "budget_simakt" / "simakt_pwd.log").exists()
    assert "simakt_pwd: failed (2)" in capsys.readouterr().out


def test_an_interrupted_parent_stops_and_reaps_its_children(tmp_path, monkeypatch):
    from kt_lib.runs import labels as side

    started = []
    plain = subprocess.Popen

    def recording(*a, **k):
        started.append(plain(*a, **k))
        return started[-1]

    real_sleep, calls = time.sleep, []

    def interrupt(seconds):  # the scheduler's first poll: Ctrl-C while the children run
        calls.append(seconds)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real_sleep(seconds)  # then as usual (Popen.wait polls with it)

    monkeypatch.setattr(side.subprocess, "Popen", recording)
    monkeypatch.setattr(side.time, "sleep", interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_side_by_side({"a": _sleeper(60), "b": _sleeper(60)}, workers=2, logs=tmp_path)
    assert len(started) == 2
    assert all(p.returncode is not None for p in started)  # stopped and waited for


def test_workers_with_one_label_say_they_cannot_act(tmp_path, monkeypatch, capsys):
    def stop(*a, **k):
        raise RuntimeError("no data in this test")

    monkeypatch.setattr(budget, "load_bundle", stop)
    monkeypatch.setattr(budget.Budget, "data_dir", lambda b, root: tmp_path)
    with pytest.raises(RuntimeError, match="no data"):
        budget.main(["search", "simakt", "--labels", "dtransformer", "--workers", "2",
                     "--storage", f"sqlite:///{tmp_path / 'b.db'}"])  # fmt: skip
    assert "--workers 2: one label to search, in this process" in capsys.readouterr().out
