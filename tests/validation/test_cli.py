"""The command line and the Python API agree; bad input gives a clear error and exit status 2."""

import numpy as np
import pytest

from custom_inference import arviz_io, hpf
from validation import cli


def test_errata_command_runs_every_family(tmp_path, capsys):
    from validation.errata import ERRATA, all_errata

    entries = all_errata()
    families = {e.seed_file for e in entries}
    assert len(entries) > len(ERRATA) and "004_90693a0965f06816.txt" in families  # HPF's and the thesis's rows
    assert cli.main(["errata", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{len(entries)} of {len(entries)} rows OK" in out
    report = (tmp_path / "report.md").read_text()
    assert report.count("| 001_30a2018ec18c20b9.txt") == len(ERRATA)
    for seed_file in families:
        assert seed_file in report


def test_fit_command_saves_a_loadable_posterior_and_report(ml100k_dir, tmp_path, capsys):
    code = cli.main(["fit", "hpf", "--data", str(ml100k_dir), "--k", "5", "--max-iter", "5", "--draws", "2",
                     "--out", str(tmp_path), "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    assert "P1:" in out and "P3:" in out and "popularity" in out
    idata = arviz_io.load(tmp_path / "posterior.nc")
    assert idata.posterior.theta.shape == (1, 2, 943, 5)
    assert hpf.state_from_inference_data(idata).lambda_shape.shape == (1682, 5)
    report = (tmp_path / "report.md").read_text()
    assert "rank_score" in report and "recall" in report
    assert any(p.name.startswith("by_degree") for p in tmp_path.glob("*.png"))


def test_missing_data_path_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["evaluate", "hpf", "--data", str(tmp_path / "nowhere"), "--no-progress"]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_bad_k_is_a_clear_error(ml100k_dir, tmp_path, capsys):
    assert cli.main(["evaluate", "hpf", "--data", str(ml100k_dir), "--k", "0", "--out", str(tmp_path), "--no-progress"]) == 2
    assert "n_components" in capsys.readouterr().err


def test_unknown_model_is_rejected():
    with pytest.raises(SystemExit) as exc:
        cli.main(["crosscheck", "als"])
    assert exc.value.code == 2


def test_thesis_models_reject_options_they_do_not_have(capsys):
    assert cli.main(["sbc", "sbmf", "--solver", "nuts", "--sims", "2", "--no-progress"]) == 2
    assert "--solver" in capsys.readouterr().err
    assert cli.main(["crosscheck", "bpmf", "--data", "ml-100k", "--no-progress"]) == 2
    assert "--data" in capsys.readouterr().err
