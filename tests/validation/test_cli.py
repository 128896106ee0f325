"""The command line and the Python API agree; bad input gives a clear error and exit status 2."""

import argparse

import numpy as np
import pytest

from custom_inference import arviz_io, hpf
from validation.frontdoor import cli
from validation.models import catalog


def test_all_errata_collects_every_family():
    from validation.models import fm_mcmc, hpf, hpf_gibbs, sbmf, vbfm

    entries = catalog.all_errata()
    for family in (hpf.ERRATA, hpf_gibbs.ERRATA, sbmf.ERRATA, vbfm.ERRATA, fm_mcmc.ERRATA):
        assert family and all(e in entries for e in family)
    assert len(set(map(id, entries))) == len(entries)  # no row twice


def test_errata_command_prints_and_reports_the_table(tmp_path, capsys, monkeypatch):
    # the rows themselves are run by each family's tests (test_errata.py, test_sbmf_validation.py, ...);
    # here the command's glue: two rows from two seeds with their checks replaced by constant outcomes (the
    # real checks compile a CAVI sweep / a conditional each, and are run there), one of them made to fail
    import dataclasses

    import validation.checks.errata as errata_mod
    from validation.models import hpf, sbmf

    def constant(form):  # the outcome of a correct row: the printed form fails, the corrected one passes
        return (form == "corrected", 0.0 if form == "corrected" else 1.0)

    good = tuple(dataclasses.replace(e, check=constant) for e in (hpf.ERRATA[0], sbmf.ERRATA[0]))
    monkeypatch.setattr(catalog, "all_errata", lambda: good)
    assert cli.main(["errata", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 rows OK" in out
    report = (tmp_path / "report.md").read_text()
    assert "001_30a2018ec18c20b9.txt" in report and "004_90693a0965f06816.txt" in report
    swapped = errata_mod.Erratum(*[getattr(good[0], f) for f in ("seed_file", "location", "printed", "corrected", "why",
                                                                 "check_name")],
                                 check=lambda form: good[0].check("corrected" if form == "printed" else "printed"))
    monkeypatch.setattr(catalog, "all_errata", lambda: (swapped,))
    assert cli.main(["errata", "--out", str(tmp_path / "bad")]) == 1
    assert "0 of 1 rows OK" in capsys.readouterr().out


def test_fit_hpf_evaluate_saves_a_loadable_artifact_and_report(ml100k_dir, tmp_path, capsys):
    code = cli.main(["fit", "hpf", "--data", str(ml100k_dir), "--k", "5", "--max-iter", "5", "--draws", "2",
                     "--out", str(tmp_path), "--no-progress", "--evaluate"])
    assert code == 0
    out = capsys.readouterr().out
    assert "P1:" in out and "P3:" in out and "popularity" in out
    assert out.strip().splitlines()[-1] == str(tmp_path / "hpf.nc")
    idata = arviz_io.load(tmp_path / "hpf.nc")
    assert idata.posterior.theta.shape == (1, 2, 943, 5)
    assert hpf.state_from_inference_data(idata).lambda_shape.shape == (1682, 5)
    report = (tmp_path / "report.md").read_text()
    assert "rank_score" in report and "recall" in report
    assert any(p.name.startswith("by_degree") for p in tmp_path.glob("*.png"))


def test_fit_evaluate_sees_the_transformed_values_and_keeps_the_fit(tmp_path, monkeypatch, capsys):
    """``fit --evaluate --transform double`` on half stars: the evaluation gets the doubled integer counts
    the fit saw (it got the raw half stars and failed "counts must be integers" after the fit), and the
    artifact is saved before the evaluation runs, so an evaluation error does not lose the fit."""
    rng = np.random.default_rng(2)
    u, i = np.nonzero(rng.random((12, 9)) < 0.5)
    stars = rng.integers(1, 11, u.size) / 2  # 0.5 .. 5.0
    path = tmp_path / "half.csv"
    path.write_text("reader,book,stars\n" + "".join(f"r{a},b{b},{s}\n" for a, b, s in zip(u, i, stars)))
    seen = {}

    def fake_evaluate(args, *, df=None, path=None):
        seen["df"] = df
        seen["saved"] = (tmp_path / "out" / "hpf.nc").exists()
        raise ValueError("evaluation failed (planted)")

    monkeypatch.setattr(cli, "cmd_evaluate", fake_evaluate)
    code = cli.main(["fit", "hpf", "--data", str(path), "--user-col", "reader", "--item-col", "book", "--value-col",
                     "stars", "--transform", "double", "--k", "2", "--max-iter", "3", "--draws", "2", "--out",
                     str(tmp_path / "out"), "--no-progress", "--evaluate"])
    assert code == 2 and "evaluation failed (planted)" in capsys.readouterr().err
    assert seen["saved"]  # the fit was written before the evaluation ran
    vals = np.sort(seen["df"]["rating"].to_numpy())
    np.testing.assert_array_equal(vals, np.sort(stars * 2))  # doubled: integer counts, as the fit saw them


def test_columns_by_position_with_and_without_a_header(tmp_path, capsys):
    """``--user-col 0`` is a 0-based position, as the help and the loader's messages say (it was looked
    up as a header named "0"); a headerless tab file like MovieLens' u.data reads by positions, and
    ``--header`` reads positions past a header line."""
    rng = np.random.default_rng(3)
    u, i = np.nonzero(rng.random((10, 8)) < 0.6)
    rows = [f"{a}\t{100 + b}\t{c}\t{881250949 + a}" for a, b, c in zip(u, i, rng.integers(1, 6, u.size))]
    plain = tmp_path / "u.data"
    plain.write_text("\n".join(rows) + "\n")
    named = tmp_path / "named.tsv"
    named.write_text("who\twhat\tstars\twhen\n" + "\n".join(rows) + "\n")
    for path, extra in ((plain, []), (named, ["--header"])):
        code = cli.main(["fit", "hpf", "--data", str(path), "--format", "csv", "--user-col", "0", "--item-col", "1",
                         "--value-col", "2", *extra, "--k", "2", "--max-iter", "2", "--draws", "2",
                         "--out", str(tmp_path / path.stem), "--no-progress"])
        assert code == 0, capsys.readouterr().err
        assert f"({u.size} rows, " in capsys.readouterr().err  # every line a rating, no header row lost or read


@pytest.fixture
def reader_csv(tmp_path):
    """A delimited file with the user's own header names and string ids (24 readers x 18 books)."""
    rng = np.random.default_rng(1)
    u, i = np.nonzero(rng.random((24, 18)) < 0.45)
    lines = ["reader;book;stars"] + [f"r{a};book-{b};{int(s)}" for a, b, s in zip(u, i, rng.integers(1, 6, u.size))]
    path = tmp_path / "my ratings.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fit_then_recommend_from_a_file_with_own_column_names(reader_csv, tmp_path, capsys):
    out_dir = tmp_path / "out"
    code = cli.main(["fit", "hpf", "--data", str(reader_csv), "--format", "csv", "--user-col", "reader",
                     "--item-col", "book", "--value-col", "stars", "--sep", ";", "--k", "2", "--max-iter", "5",
                     "--draws", "20", "--out", str(out_dir), "--no-progress"])
    assert code == 0
    artifact = capsys.readouterr().out.strip().splitlines()[-1]
    assert artifact == str(out_dir / "hpf.nc")
    for target in (artifact, str(out_dir)):  # the file or its folder
        assert cli.main(["recommend", target, "--users", "r3", "r7", "-N", "4"]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert lines[0].split("\t") == ["user", "rank", "item", "score", "sd"]
        rows = [line.split("\t") for line in lines[1:]]
        assert len(rows) == 8 and {r[0] for r in rows} == {"r3", "r7"}
        assert [r[1] for r in rows[:4]] == ["1", "2", "3", "4"]
        assert all(r[2].startswith("book-") and float(r[4]) > 0 for r in rows)
        scores = [float(r[3]) for r in rows[:4]]
        assert scores == sorted(scores, reverse=True)
    seen = {line.split(";")[1] for line in reader_csv.read_text().splitlines()[1:] if line.startswith("r3;")}
    assert not seen & {r[2] for r in rows if r[0] == "r3"}
    assert cli.main(["recommend", artifact, "--users", "nobody"]) == 2
    assert "unknown user id" in capsys.readouterr().err
    # the Python API's means / sd options, from the command line: the same items and scores as
    # FittedModel.recommend(..., means="q", sd=False)
    assert cli.main(["recommend", artifact, "--users", "r3", "-N", "3", "--means", "q", "--no-sd",
                     "--no-progress"]) == 0  # --no-progress as every other command takes it (it was a usage error)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split("\t") == ["user", "rank", "item", "score"]
    from validation.frontdoor import api

    want = api.load(artifact).recommend(["r3"], N=3, means="q", sd=False)
    got = [line.split("\t") for line in lines[1:]]
    assert [r[2] for r in got] == want["item"].tolist()
    np.testing.assert_allclose([float(r[3]) for r in got], want["score"].to_numpy(), rtol=1e-5)


def test_fit_refuses_malformed_input_with_status_2(reader_csv, tmp_path, capsys):
    base = ["fit", "hpf", "--k", "2", "--out", str(tmp_path / "o"), "--no-progress"]
    # a column that is not in the header: the message lists the header found
    assert cli.main(base + ["--data", str(reader_csv), "--user-col", "user", "--item-col", "book"]) == 2
    err = capsys.readouterr().err
    assert "user" in err and "reader" in err
    # half stars for a count model: the message names the transforms
    half = tmp_path / "half.csv"
    half.write_text("reader,book,stars\na,x,3.5\nb,y,4\n")
    assert cli.main(base + ["--data", str(half), "--user-col", "reader", "--item-col", "book",
                            "--value-col", "stars"]) == 2
    assert "double" in capsys.readouterr().err
    # binary garbage
    junk = tmp_path / "junk.csv"
    junk.write_bytes(bytes(range(256)) * 4)
    assert cli.main(base + ["--data", str(junk), "--format", "csv", "--user-col", "0", "--item-col", "1"]) == 2
    assert "junk.csv" in capsys.readouterr().err
    # options
    assert cli.main(base + ["--data", str(reader_csv), "--option", "max_iter"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert cli.main(["fit", "sbmf", "--data", str(reader_csv), "--draws", "5", "--no-progress"]) == 2
    assert "--draws" in capsys.readouterr().err
    assert cli.main(["recommend", str(tmp_path / "none.nc"), "--users", "a"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_version_and_help_show_defaults(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("factorbayes ")
    with pytest.raises(SystemExit):
        cli.main(["fit", "--help"])
    text = capsys.readouterr().out
    for model in ("hpf", "sibm", "bpr", "psm"):
        assert model in text
    assert "(default: auto)" in text and "(default: none)" in text


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
    assert cli.main(["sbc", "mcmc-fm", "--solver", "nuts", "--sims", "2", "--no-progress"]) == 2
    assert "--solver" in capsys.readouterr().err
    assert cli.main(["sbc", "rg", "--sims", "2", "--no-progress"]) == 2  # no SBC adapters in its spec
    assert "no SBC adapters" in capsys.readouterr().err
    assert cli.main(["crosscheck", "bpmf", "--data", "ml-100k", "--no-progress"]) == 2
    assert "--data" in capsys.readouterr().err
    assert cli.main(["crosscheck", "bpmf", "--solver", "cavi", "--no-progress"]) == 2
    assert "--solver" in capsys.readouterr().err


@pytest.mark.parametrize("model, solver", [("sibm", None), ("bpmf", "gibbs"), ("hpf", "gibbs")])
def test_model_crosscheck_command_reports_the_modules_verdict(model, solver, tmp_path, capsys, monkeypatch):
    """The CLI glue of `crosscheck MODEL` (from the registry, no model special-cased), with the solver's cross-check
    replaced by independent normal draws for both sides: exact agreement, so the verdict is "pass" and exit 0."""
    import dataclasses

    from validation.checks import crosscheck as xc, gates

    rng = np.random.default_rng(0)
    nuts_q = {"pred": rng.normal(size=(4, 1000, 5))}
    solver_q = {"pred": rng.normal(size=(4, 1000, 5))}
    gate = gates.nuts_gates(nuts_q, divergences=0, bfmi=np.ones(4))
    verdict = xc.compare_exact(solver_q, nuts_q, gate)
    fake = xc.CrosscheckResult(model=model, solver=f"fake {model} solver", method="exact", verdict=verdict,
                               solver_quantities=solver_q, nuts_quantities=nuts_q, solver_seconds=1.0,
                               nuts_seconds=2.0, config="cfg", settings={"data": "fake draws"})
    calls = []
    spec = catalog.get(model)
    chosen = spec.solver(solver)
    fake_solver = dataclasses.replace(chosen, crosscheck=lambda config, **kw: calls.append((config, kw)) or fake)
    fake_spec = dataclasses.replace(spec, solvers=tuple(fake_solver if s is chosen else s for s in spec.solvers))
    monkeypatch.setattr(catalog, "get", lambda name: fake_spec if name == model else spec)
    argv = ["crosscheck", model, "--out", str(tmp_path), "--no-progress", "--reference", "stored"]
    assert cli.main(argv + (["--solver", solver] if solver else [])) == 0
    assert "Verdict: PASS" in capsys.readouterr().out
    assert calls == [(chosen.default_config(), {"progress": False, "reference": "stored"})]
    report = (tmp_path / "report.md").read_text()
    assert "Verdict: PASS" in report and f"fake {model} solver" in report and "fake draws" in report
    assert len(list(tmp_path.glob("*.png"))) == 3


def test_parser_constants_match_their_modules():
    from validation.evaluation import implicit_eval, ratings_eval
    from validation.data import loaders

    assert cli._FORMATS == loaders.FORMATS and cli._TRANSFORMS == loaders.TRANSFORMS
    assert cli._CURVE_DATA == implicit_eval.CURVE_DATA
    # --solvers of evaluate ratings: the declared solvers, read from the declarations when a name is given
    assert [cli._ratings_solver(s) for s in ratings_eval.SOLVERS] == list(ratings_eval.SOLVERS)
    with pytest.raises(argparse.ArgumentTypeError, match="choose from " + ", ".join(ratings_eval.SOLVERS)):
        cli._ratings_solver("als")
    assert cli._CURVE_PASSES == implicit_eval.CURVE_DEFAULTS["passes"]
    from validation.evaluation import holdout

    assert cli._IMPLICIT_PROTOCOLS == implicit_eval.RATING_PROTOCOLS + implicit_eval.BASKET_PROTOCOLS
    assert cli._HOWS == holdout.HOWS and cli._BASKET_FORMATS == implicit_eval._BASKET_FORMATS


def test_evidence_command_prints_one_row_per_solver(capsys):
    """``factorbayes evidence``: one table from the registry, per model and solver, of which evidence exists."""

    assert cli.main(["evidence"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    for column in ("update checks", "bridge (CustomGibbs)", "NUTS agreement", "SBC", "k-hat", "VSBC"):
        assert column in header
    rows = [line for line in out.splitlines()[2:] if line.startswith("|")]
    assert len(rows) == sum(len(catalog.get(m).solvers) for m in catalog.names())
    hpf_cavi = next(r for r in rows if r.split("|")[1].strip() == "hpf" and r.split("|")[2].strip() == "cavi")
    assert "stored `hpf`" in hpf_cavi and "n/a (VI)" in hpf_cavi
    hpf_gibbs = next(r for r in rows if r.split("|")[1].strip() == "hpf" and r.split("|")[2].strip() == "gibbs")
    assert "| yes " in hpf_gibbs and "n/a (exact)" in hpf_gibbs  # HPF's spec declares its CustomGibbs bridge
    assert cli.main(["evidence", "sibm"]) == 0
    assert (len([line for line in capsys.readouterr().out.splitlines()[2:] if line.startswith("| sibm")])
            == len(catalog.get("sibm").solvers))  # batch VB, SVI, MAP
    assert cli.main(["crosscheck", "sbmf", "--vsbc", "5"]) == 2  # refused before anything runs: no VI solver
    assert "no VSBC adapter" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# evaluate on your own data (issue 24): each of the newcomer's failures


@pytest.fixture
def half_star_csv(tmp_path):
    """A ';' file with the user's own header names, string ids and half stars (30 customers x 20 products)."""
    rng = np.random.default_rng(2)
    lines = ["customer;product;stars"]
    for u in range(30):
        for i in rng.choice(20, size=rng.integers(3, 9), replace=False):
            lines.append(f"c{u};p{i};{rng.integers(1, 11) / 2:g}")
    path = tmp_path / "shop.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def fimi_file(tmp_path):
    """A FIMI basket file: 60 baskets of 2-5 integer item ids out of 15."""
    rng = np.random.default_rng(0)
    path = tmp_path / "baskets.dat"
    path.write_text("\n".join(" ".join(map(str, sorted(rng.choice(15, size=rng.integers(2, 6), replace=False))))
                              for _ in range(60)) + "\n")
    return path


def test_evaluate_implicit_takes_the_loader_flags_it_asks_for(half_star_csv, tmp_path, capsys):
    # before: "format='csv' needs ['user_col', 'item_col'] (... CLI --user-col, --item-col)", then
    # "unrecognized arguments: --user-col ..." (SystemExit 2)
    argv = ["evaluate", "implicit", "--data", str(half_star_csv), "--format", "csv", "--user-col", "customer",
            "--item-col", "product", "--value-col", "stars", "--protocols", "P1", "--systems", "popularity",
            "--out", str(tmp_path / "o"), "--no-progress"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "| P1 " in out and "popularity" in out
    assert cli.main(argv[:-5] + ["--transform", "binarize", "--no-progress"]) == 2
    assert "evaluate MODEL" in capsys.readouterr().err


def test_evaluate_implicit_on_a_basket_file_uses_the_basket_protocol(fimi_file, tmp_path, capsys):
    # before: exit 2, "protocols ['P1', 'SIBM'] need ratings ...; basket data uses ['baskets']", and
    # --protocols baskets was not a choice
    base = ["evaluate", "implicit", "--data", str(fimi_file), "--systems", "popularity", "--no-progress"]
    assert cli.main(base + ["--out", str(tmp_path / "a")]) == 0
    assert "| baskets " in capsys.readouterr().out
    assert cli.main(base + ["--protocols", "baskets", "--out", str(tmp_path / "b")]) == 0
    assert "| baskets " in capsys.readouterr().out
    assert cli.main(base + ["--protocols", "P1"]) == 2
    assert "basket data uses ['baskets']" in capsys.readouterr().err


def test_evaluate_a_fit_model_on_your_own_file(half_star_csv, tmp_path, capsys):
    # before: `evaluate hpf` ran the MovieLens paper protocols only and took no loader flags
    out_dir = tmp_path / "o"
    assert cli.main(["evaluate", "hpf", "--data", str(half_star_csv), "--user-col", "customer", "--item-col",
                     "product", "--value-col", "stars", "--transform", "double", "--k", "2", "--max-iter", "5",
                     "--draws", "5", "-N", "5", "10", "--out", str(out_dir), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "split: loo, one entry per user (seed 0)" in out and "not held out (all in train, not evaluated): 0 users" in out
    header = next(line for line in out.splitlines() if line.startswith("| system"))
    for col in ("recall@5", "ndcg@5", "recall@10", "ndcg@10", "rank_score", "rmse"):
        assert col in header
    assert any(line.startswith("| hpf ") for line in out.splitlines())
    assert any(line.startswith("| popularity ") for line in out.splitlines())
    import pandas as pd

    table = pd.read_csv(out_dir / "metrics.csv")
    assert list(table["system"]) == ["hpf", "popularity", "ease"] and (table["users"] == 30).all()
    assert "| hpf " in (out_dir / "report.md").read_text()


def test_evaluate_a_model_on_basket_csv_holds_out_one_item_per_basket(tmp_path, capsys):
    rng = np.random.default_rng(1)
    names = ["milk", "bread", "beer", "eggs", "tea", "jam", "rice", "soap", "salt", "oil"]
    path = tmp_path / "groceries.csv"
    path.write_text("\n".join(",".join(rng.choice(names, size=rng.integers(1, 5), replace=False))
                              for _ in range(50)) + "\n")
    assert cli.main(["evaluate", "bpr", "--data", str(path), "--format", "basket-csv", "--k", "2", "--max-iter", "3",
                     "-N", "3", "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "split: basket, one item per basket" in out and "| bpr " in out and "| popularity " in out


def test_evaluate_refuses_what_it_cannot_do_with_status_2(half_star_csv, tmp_path, capsys):
    cols = ["--user-col", "customer", "--item-col", "product", "--value-col", "stars"]
    assert cli.main(["evaluate", "ratings", "--data", str(half_star_csv), *cols, "--no-progress"]) == 2
    assert "evaluate MODEL --data FILE" in capsys.readouterr().err
    assert cli.main(["evaluate", "bpmf", "--data", str(half_star_csv), *cols, "--split", "time", "--no-progress"]) == 2
    assert "--time-col" in capsys.readouterr().err


def test_evaluate_select_refuses_bad_flags_with_status_2(half_star_csv, tmp_path, capsys):
    # issue 27 item 2: --select's flags (the search itself: tests/validation/test_selection.py)
    base = ["evaluate", "hpf", "--data", str(half_star_csv), "--user-col", "customer", "--item-col", "product",
            "--value-col", "stars", "--transform", "double", "--out", str(tmp_path / "o"), "--no-progress"]
    assert cli.main(base + ["--grid", "K=2,3"]) == 2
    assert "--grid: only with --select" in capsys.readouterr().err
    assert cli.main(base + ["--select", "--grid", "K=two"]) == 2
    assert "expected NAME=NUMBER[,NUMBER...]" in capsys.readouterr().err
    assert cli.main(base + ["--select", "--grid", "lr=0.1"]) == 2
    assert "hpf searches K, shape, scale; not 'lr'" in capsys.readouterr().err
    assert cli.main(base + ["--select", "--option", "r=2"]) == 2  # psm's r is searched; hpf has no r: the fit says so
    assert cli.main(["evaluate", "psm", *base[2:], "--select", "--option", "r=2"]) == 2
    assert "select searches them" in capsys.readouterr().err


def test_warnings_are_printed_in_the_users_terms(capsys, monkeypatch):
    """A warning during a command reads 'factorbayes: warning: ...', without Python's file:line and
    source line (the not-converged warning of a fit printed `cli.py:606: UserWarning` and a code line)."""
    import warnings

    from validation.frontdoor import cli

    def warns(args):
        warnings.warn("hpf: not converged: stopped at the cap of 3 iterations")
        return 0

    monkeypatch.setattr(cli, "cmd_recommend", warns)
    assert cli.main(["recommend", "model.nc", "--users", "1"]) == 0
    err = capsys.readouterr().err
    assert "factorbayes: warning: hpf: not converged: stopped at the cap of 3 iterations" in err
    assert "UserWarning" not in err and "warnings.warn" not in err
