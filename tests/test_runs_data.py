"""kt_lib.runs.data: a folder without a format is read (auto), a folder with `synthetic` is
refused, and every results row names its dataset through `DataSpec`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kt_lib.data.formats import write_line3
from kt_lib.data.synthetic import simulate
from kt_lib.runs import experiment
from kt_lib.runs.data import DataSpec, dataset_name
from kt_lib.runs.leaderboard import run_leaderboard
from kt_lib.runs.results import load_results
from kt_lib.train import TrainConfig


@pytest.fixture
def folder(tmp_path):
    """A 3-line dataset folder named `mini` (30 training students, 10 test students)."""
    sim = simulate(num_students=40, seq_len=12, num_c=4, seed=5).data
    d = tmp_path / "mini"
    d.mkdir()
    write_line3(sim.subset(range(30)), d / "mini_train.csv")
    write_line3(sim.subset(range(30, 40)), d / "mini_test.csv")
    return d


def test_a_folder_alone_is_read_with_auto(folder):
    spec = DataSpec(str(folder))
    assert spec.data_format == "auto" and spec.name == "mini"
    bundle = spec.load()
    assert bundle.data_format == "line3" and "auto -> line3" in bundle.protocol
    assert len(bundle.test) == 10
    assert DataSpec().data_format == "synthetic" and DataSpec().name == "synthetic"


def test_a_folder_with_synthetic_is_refused(folder):
    with pytest.raises(ValueError, match="simulator ignores the folder"):
        DataSpec(str(folder), "synthetic")
    with pytest.raises(ValueError, match="needs data_dir"):
        DataSpec(None, "line3")
    with pytest.raises(ValueError, match="simulator ignores the folder"):
        run_leaderboard([(str(folder), "synthetic")], ["dkt"], TrainConfig(), progress=False)


def test_cli_with_a_data_dir_alone_trains_on_that_folder(folder, tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["--models", "dkt", "--data-dir", str(folder), "--epochs", "1", "--max-len", "12"]
    args += ["--batch-size", "16", "--preset", "tiny", "--device", "cpu", "--out", str(out)]
    experiment.main(args)
    saved = json.loads(out.read_text())
    assert saved["args"]["data_format"] == "auto"
    assert "auto -> line3" in saved["protocol"] and "simulat" not in saved["protocol"]
    assert [r["dataset"] for r in saved["results"]] == ["mini"]
    assert load_results(out)["dataset"].tolist() == ["mini"]
    assert "no --preset" not in capsys.readouterr().err
    with pytest.raises(SystemExit):
        experiment.main([*args, "--data-format", "synthetic"])
    assert "simulator ignores the folder" in capsys.readouterr().err
    experiment.main([a for a in args if a not in ("--preset", "tiny")])  # the default, said
    err = capsys.readouterr().err
    assert "no --preset, so every model is 'paper'" in err  # real data: the published sizes
    assert "holds 1 row(s); new rows are added" in err
    rows = json.loads(out.read_text())["results"]
    assert [r["preset"] for r in rows] == ["tiny", "paper"]  # nothing overwritten
    experiment.main(args)  # the same run again replaces its own row
    assert [r["preset"] for r in json.loads(out.read_text())["results"]] == ["paper", "tiny"]
    experiment.main([*args, "--overwrite"])
    assert len(json.loads(out.read_text())["results"]) == 1


def test_an_old_file_of_simulated_runs_with_a_folder_is_named_synthetic(tmp_path):
    """Files written before the fix (data_dir given, format synthetic) hold simulator runs."""
    path = tmp_path / "old.json"
    args = {"data_dir": "/data/assist2009", "data_format": "synthetic", "fold": None}
    path.write_text(json.dumps({"args": args, "protocol": "", "results": [{"model": "dkt"}]}))
    assert load_results(path)["dataset"].tolist() == ["synthetic"]
    assert dataset_name("/data/assist2009", "line3") == "assist2009"


def test_cli_reads_a_log_with_a_column_map(tmp_path, capsys):
    """A log with its own column names: the usual ones map alone, others through --columns."""
    rng = np.random.default_rng(0)
    lines = ["who,question,kc,correct,timestamp"]
    for u in range(30):
        for t in range(12):
            lines.append(f"u{u},p{rng.integers(20)},k{rng.integers(5)},{rng.integers(2)},{t}")
    log = tmp_path / "mine.csv"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "r.json"
    args = ["--models", "dkt", "--data-dir", str(log), "--epochs", "1", "--max-len", "12"]
    args += ["--preset", "tiny", "--out", str(out)]
    with pytest.raises(ValueError, match="no column for user .*--columns"):
        experiment.main(args)
    experiment.main([*args, "--columns", "user=who"])
    saved = json.loads(out.read_text())
    assert "columns user=who, skill=kc, problem=question" in saved["protocol"]
    assert saved["results"][0]["test_auc"] > 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        experiment.main([*args, "--columns", "pupil=who"])
    assert "'pupil=who' is not ROLE=COLUMN" in capsys.readouterr().err


def test_set_with_a_model_prefix_reaches_that_model_only():
    fields = experiment.model_fields(
        ["d=8", "simakt.similarity=knn_only"], ["dtransformer", "simakt"]
    )
    assert fields == {"dtransformer": {"d": 8}, "simakt": {"d": 8, "similarity": "knn_only"}}
    with pytest.raises(ValueError, match="'sakt' is not one of --models"):
        experiment.model_fields(["sakt.d=8"], ["dkt"])
