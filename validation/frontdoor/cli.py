"""The ``factorbayes`` command line. Each command calls one public function:

    factorbayes crosscheck MODEL [--solver S]          the solver's cross-check from validation.checks.registry
        [--reference stored|rerun] [--quick]           (SPEC.solvers: run_crosscheck(config, progress, reference));
        [--data ml-100k|PATH]                          NUTS from the stored reference when it matches;
                                                       --data where the model's SPEC.real_data allows (hpf)
        [--vsbc N]                                     VI solvers: also N VSBC simulations in the report
                                                       (validation.checks.vi_evidence.run_vsbc)
    factorbayes fit MODEL --data FILE [--format F]     validation.frontdoor.api.fit on the file (validation.data.loaders.load),
        [--user-col C --item-col C --value-col C]      saved with FittedModel.save to OUT/MODEL.nc (the
        [--sep S] [--transform T] --out DIR            artifact's path is the last line printed); MODEL is
        [--evaluate]                                   any name of validation.frontdoor.api.models(); hpf --evaluate
                                                       also runs the held-out evaluation below
    factorbayes recommend DIR_OR_FILE --users ID ...   validation.frontdoor.api.load + FittedModel.recommend: one
        [-N 10] [--include-seen]                       row per (user, rank, item, score, sd), tab-separated
        [--means draws|q] [--no-sd]
    factorbayes --version                              the installed package version
    factorbayes evaluate MODEL --data FILE             any model of validation.frontdoor.api.models() on your own file:
        [fit's loader flags: --format --user-col ...]  read as `fit` reads it, validation.evaluation.holdout.split
        [fit's solver flags: --k --max-iter --draws    (--split loo|fraction|time|basket; default basket for
         --option] [--split S] [-N 10 20] [--seed S]   basket files, else loo), validation.frontdoor.api.fit on train,
        [--max-baskets B] --out DIR                    validation.evaluation.holdout.evaluate next to popularity
                                                       (recall@N, NDCG@N, rank score, RMSE); metrics.csv,
                                                       report.md
        [--select [--grid K=5,10 r=1,8]                K and the main hyperparameters chosen on a validation
         [--select-metric M]]                          split of the train part (validation.evaluation.selection:
                                                       grid, validation scores, seconds; selection.csv)
    factorbayes evaluate hpf --data ml-100k|PATH       validation.evaluation.experiments.evaluate_hpf (the paper protocols
                                                       P1, P3: MovieLens without the own-data flags above)
    factorbayes evaluate ratings --data ml-100k|PATH   validation.evaluation.ratings_eval.evaluate_ratings
                                                       (SBMF, BPMF, MCMC-FM, VBFM, OVBFM, SGD-FM on P2)
        [--set MODEL.NAME=VALUE ...]                   ratings and counts: one declared setting of one model's
                                                       runner (EvaluationEntry.defaults), e.g. sbmf.warmup=20
    factorbayes errata                                 validation.checks.errata.run_errata(catalog.all_errata())
    factorbayes evidence [MODEL ...]                   validation.models.catalog.evidence_table: per model and solver,
                                                       which evidence exists (update checks, bridge, NUTS
                                                       agreement, SBC, k-hat, VSBC), from the registry
    factorbayes evaluate implicit --data ml-100k|PATH  validation.evaluation.implicit_eval.evaluate_implicit
        [--protocols P1 SIBM | baskets]                (SIBM x 5, RG x 4 (r = 1/2, 1), PSM, BPR x 2, popularity,
        [--format F --user-col C ...] [--max-baskets]  EASE^R on P1, SIBM; RG like error by degree; standard
                                                       errors, paired bootstrap intervals against the better
                                                       of popularity and EASE^R); basket files (FIMI, basket
                                                       CSV): the baskets protocol by default
        [--curves | --curves-only]                     + validation.evaluation.implicit_eval.recall_curves
                                                       (seed 002 figs. 2-3: recall@10 vs entries)
    factorbayes evaluate counts --data ml-100k|PATH    validation.evaluation.counts_eval.evaluate_counts: top-100 on P3
        [--systems ...] [--k 50] [--side-features]     (NPFM, PPFM, HPF, MCMC-FM, SGD-FM, popularity, EASE^R;
                                                       EASE^R / SGD-FM tuned on a validation split of train)
    factorbayes sbc MODEL --solver S --sims N          validation.checks.sbc.run_sbc with the SPEC's SBC adapters
                                                       (hpf: gibbs|nuts|cavi|gibbs-printed; sbmf, bpmf,
                                                       mcmc-fm: gibbs)

Models, solvers, errata rows and SBC adapters come from `validation.checks.registry` (one SPEC per
model), so a new model needs no change here.

Exit status: 0 success (cross-check passed; all errata rows OK; SBC ranks uniform);
1 a check failed;
2 usage or input error; 3 the cross-check was inconclusive (NUTS failed its gates).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import sys
from pathlib import Path

# NUTS chains run in parallel on CPU only if XLA exposes several host devices; this
# must be set before JAX is first imported.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()

FIT_MODELS = ("hpf",)  # `evaluate MODEL` (the HPF evaluation pipeline)
EVALUATIONS = ("ratings", "implicit", "counts")  # `evaluate` families that span several models
FLOAT64_COMMANDS = ("crosscheck", "sbc", "errata")  # fit/evaluate take --dtype


from validation.frontdoor.cli_evaluate import (  # noqa: E402 (after XLA_FLAGS; imports no JAX)
    _load_data, _print_evaluation_extras, _print_table, cmd_evaluate_counts, cmd_evaluate_implicit,
    cmd_evaluate_ratings,
)


def _print_crosscheck(result, out: Path, evidence: list[str] | None = None) -> int:
    """Write the report of a `validation.checks.crosscheck.CrosscheckResult`, print its verdict, gates and
    comparison; return the exit status."""
    from validation.checks.report import crosscheck_report

    report = crosscheck_report(result, out, evidence=evidence)
    v = result.verdict
    print(f"Verdict: {v.status.upper()}")
    for r in v.reasons:
        print(f"  - {r}")
    print("\nGates:")
    _print_table(v.gates.table)
    print("Comparison:")
    _print_table(v.table)
    print(f"Report: {report}")
    return result.exit_status


def cmd_crosscheck(args) -> int:
    """``factorbayes crosscheck MODEL``: the solver's cross-check against NUTS, its report and verdict printed.

    Runs the model declaration's ``solver(...).run`` (`validation.models.catalog.get`), optionally on real data
    (``--data``, where the declaration's ``real_data`` allows) and with ``--vsbc N`` VSBC simulations added to the
    report (`validation.checks.vi_evidence.run_vsbc`).

    Parameters
    ----------
    args : argparse.Namespace
        The parsed flags: model, solver (None: the model's first), quick (300 warm-up / 300 kept NUTS draws),
        data (None, "ml-100k" or a MovieLens path), reference ("stored", "rerun" or None), out (report folder;
        None: ``factorbayes-output/crosscheck-MODEL-SOLVER``), no_progress, vsbc (int, 0: none).

    Returns
    -------
    int
        The result's exit status: 0 passed, 1 failed, 3 inconclusive (NUTS failed its gates).

    Raises
    ------
    KeyError
        An unknown model (`validation.models.catalog.get`; the parser's choices prevent it from the command line).
    ValueError
        An unknown ``--solver``; a solver that declares no cross-check (a point estimate, or one not built; the
        message gives the declared reason and the solvers that have one); ``--data`` with a model whose declaration
        has no ``real_data``; ``--vsbc`` for a solver without a VSBC adapter.
    FileNotFoundError
        A ``--data`` path that does not exist.
    RuntimeError
        ``--data ml-100k`` not found and its download failed (`validation.data.datasets.find_movielens_100k`).
    OSError
        Writing the report (propagated, like whatever the solver's run raises).

    Source: project addition (the command line).
    """
    import dataclasses

    from validation.models import catalog

    spec = catalog.get(args.model)
    solver = spec.solver(args.solver)
    if solver.crosscheck is None:  # declared absent (a point estimate, or not built): say why, and what has one
        with_one = [s.name for s in spec.solvers if s.crosscheck is not None]
        raise ValueError(f"{args.model} --solver {solver.name}: no cross-check against NUTS "
                         f"({solver.absent.get('crosscheck', 'none declared')}); solvers with one: {with_one}")
    config = solver.default_config()
    if args.quick:
        config = dataclasses.replace(config, num_warmup=300, num_samples=300)
    kwargs = {}
    if args.data is None:
        source = f"its embedded simulated problem ({type(config).__name__} defaults)"
    elif spec.real_data is None:
        raise ValueError(f"--data: the {args.model} cross-check runs on its embedded simulated data only")
    else:
        df, path = _load_data(args.data)
        kwargs, config, source = spec.real_data(df, path, config)
    print(f"{args.model} cross-check ({solver.name} vs NUTS) on {source}", file=sys.stderr)
    if args.reference is not None:
        kwargs["reference"] = args.reference
    adapters = None
    if getattr(args, "vsbc", 0):
        from validation.checks import vi_evidence

        adapters = catalog.evidence_adapter(args.model, solver.name, "vsbc")
        if adapters is None:
            raise ValueError(f"--vsbc: no VSBC adapter for {args.model} {solver.name} (its declaration has no vsbc)")
    result = solver.run(config, progress=not args.no_progress, **kwargs)
    if adapters is not None:
        simulate, fit, functionals, _ = adapters(solver.name)
        result.extra["vsbc"] = vi_evidence.run_vsbc(simulate, fit, functionals, n_sims=args.vsbc,
                                                    method=f"{args.model}-{solver.name}", progress=not args.no_progress)
    return _print_crosscheck(result, Path(args.out or f"factorbayes-output/crosscheck-{args.model}-{solver.name}"),
                             catalog.evidence_lines(args.model))


def cmd_evidence(args) -> int:
    """``factorbayes evidence [MODEL ...]``: print the evidence table (`validation.models.catalog.evidence_table`).

    Per model and solver, which evidence exists (update checks, bridge, NUTS agreement, SBC, k-hat, VSBC),
    followed by a legend line.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed flags: models (list of model names; empty: every registered model).

    Returns
    -------
    int
        0.

    Raises
    ------
    KeyError
        An unknown model (the parser's choices prevent it from the command line).

    Source: project addition (the command line).
    """
    from validation.models.catalog import evidence_table

    _print_table(evidence_table(args.models or None))
    print("bridge: each Gibbs block as a NumPyro CustomGibbs block beside NUTS; NUTS agreement: the solver "
          "against a stored, gated NUTS reference (exact: within MCSE; VI: the reported gap); k-hat and VSBC: "
          "validation.checks.vi_evidence (k-hat < 0.5 good, 0.5-0.7 ok, > 0.7 q unreliable for importance sampling)")
    return 0


def cmd_evaluate(args, *, df=None, path=None) -> int:
    """``factorbayes evaluate hpf`` on MovieLens: held-out evaluation of HPF CAVI (the paper protocols P1, P3).

    Runs `validation.evaluation.experiments.evaluate_hpf` (P1, P3, popularity, EASE^R, standard errors and paired
    bootstrap intervals), prints its tables and notes and writes a report. Sets ``args.max_iter`` (None: 100),
    ``args.tol`` (None: 0.0) and ``args.dtype`` (None: "float32") in place.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed flags: data ("ml-100k" or a MovieLens path; read only when ``df`` is None), dtype ("float32",
        "float64" or None), out (report folder; None: ``factorbayes-output/evaluate-hpf``), k (K), max_iter (CAVI
        sweeps), tol (relative-ELBO tolerance), seed, no_progress.
    df : pandas.DataFrame or None, keyword-only, default None
        The ratings table (columns user, item, rating, timestamp) already loaded by `cmd_fit`; None: read
        ``args.data``.
    path : str or None, keyword-only, default None
        The label of ``df`` (its file or folder) in the report's notes; used with ``df``.

    Returns
    -------
    int
        0.

    Raises
    ------
    FileNotFoundError
        A ``--data`` path that does not exist.
    RuntimeError
        ``ml-100k`` not found and its download failed.
    KeyError
        A dtype other than float32 / float64 (the parser's choices prevent it).
    ValueError
        Bad settings (from `evaluate_hpf`).
    FloatingPointError
        A non-finite ELBO (from `evaluate_hpf`).
    OSError
        Writing the report.

    Source: project addition (the command line); the evaluation is `validation.evaluation.experiments.evaluate_hpf`'s.
    """
    import numpy as np

    from validation.evaluation import experiments
    from validation.checks.report import evaluation_report

    if df is None:
        df, path = _load_data(args.data)
    args.max_iter = 100 if args.max_iter is None else args.max_iter
    args.tol = 0.0 if args.tol is None else args.tol
    args.dtype = args.dtype or "float32"
    dtype = {"float32": np.float32, "float64": np.float64}[args.dtype]
    out = Path(args.out or "factorbayes-output/evaluate-hpf")
    result = experiments.evaluate_hpf(df, n_components=args.k, seed=args.seed, max_iter=args.max_iter,
                                      tol=args.tol, dtype=dtype, progress=not args.no_progress)
    ran = ", ".join(f"{p} {int(fit.vi_trace.attrs['n_iter'])}" for p, fit in result.fits.items())  # sweeps actually run
    notes = [f"data: {path} ({len(df)} ratings, {df['user'].nunique()} users x {df['item'].nunique()} items)",
             f"K = {args.k}, {args.dtype}, seed {args.seed}; CAVI sweeps run: {ran} (at most {args.max_iter}, "
             f"relative-ELBO tolerance {args.tol:g})",
             "hyperparameters a = a' = c = c' = 0.3, b' = d' = 1"]
    for name, table in result.tables.items():
        print(f"{name}:")
        _print_table(table)
    for line in result.notes:
        print(f"- {line}")
    tables = {**result.tables, **{f"{p}: differences against the best baseline (paired bootstrap over test users)": d
                                  for p, d in result.differences.items()},
              **{f"{p}: EASE^R's lambda on a validation split of the training data": t
                 for p, t in result.tuning.items()}}
    report = evaluation_report(tables, result.fits["P3"].vi_trace.elbo.values, out,
                               title=f"HPF on {Path(str(path)).name}: held-out evaluation", notes=notes + result.notes,
                               bucket_tables=result.by_degree)
    print(f"Report: {report}")
    return 0


_OWN_DATA_FLAGS = ("user_col", "item_col", "value_col", "sep", "time_col", "split", "draws", "option", "max_baskets",
                   "grid", "select_metric")


def _own_data_flags(args) -> list[str]:
    """The ``evaluate`` flags given that only the own-data evaluation (`cmd_evaluate_model`) reads."""
    given = [f"--{name.replace('_', '-')}" for name in _OWN_DATA_FLAGS if getattr(args, name, None) is not None]
    if args.format != "auto":
        given.append("--format")
    if args.transform != "none":
        given.append("--transform")
    if getattr(args, "select", False):
        given.append("--select")
    return given


def _is_movielens(spec: str) -> bool:
    """Whether ``--data`` names MovieLens (``ml-100k``, a MovieLens file or folder); a missing path
    counts as MovieLens so that the paper evaluation's own error names it."""
    from validation.data import loaders

    if spec == "ml-100k" or not Path(spec).exists():
        return True
    try:
        return loaders._detect_format(Path(spec)) == "movielens"
    except ValueError:
        return False


def cmd_evaluate_dispatch(args) -> int:
    """``factorbayes evaluate X``: dispatch to the paper evaluations or to the own-data evaluation.

    ``ratings`` -> `validation.frontdoor.cli_evaluate.cmd_evaluate_ratings`, ``counts`` -> ``cmd_evaluate_counts``
    (both on MovieLens only), ``implicit`` -> ``cmd_evaluate_implicit``; ``hpf`` on MovieLens without own-data flags
    -> `cmd_evaluate` (the paper protocols); anything else -> `cmd_evaluate_model` (any front-door model on the
    user's file).

    Parameters
    ----------
    args : argparse.Namespace
        The parsed flags of the ``evaluate`` parser (the chosen command reads its own).

    Returns
    -------
    int
        The chosen command's exit status.

    Raises
    ------
    ValueError
        ``ratings`` / ``counts`` with own-data flags (``--user-col``, ``--split``, ``--select``, ...) or a
        ``--data`` that is not MovieLens: they run the thesis protocol on MovieLens only.

    Source: project addition (issue 24).
    """
    if args.model in ("ratings", "counts"):
        flags = _own_data_flags(args)
        if flags or not _is_movielens(args.data):
            raise ValueError(f"evaluate {args.model} runs the thesis protocol on MovieLens ('ml-100k' or a MovieLens "
                             f"path){'; it takes no ' + ', '.join(flags) if flags else ''}. On your own file: "
                             f"'factorbayes evaluate MODEL --data FILE ...' with MODEL one of validation.frontdoor.api.models()")
        return cmd_evaluate_ratings(args) if args.model == "ratings" else cmd_evaluate_counts(args)
    if args.model == "implicit":
        return cmd_evaluate_implicit(args)
    if args.model in FIT_MODELS and not _own_data_flags(args) and _is_movielens(args.data):
        return cmd_evaluate(args)
    return cmd_evaluate_model(args)


def cmd_evaluate_model(args) -> int:
    """``factorbayes evaluate MODEL --data FILE``: any front-door model on the user's own file.

    The file is read as ``fit`` reads it (`validation.data.loaders.load`), split
    (`validation.evaluation.holdout.split`; ``--split`` default ``basket`` for basket files, else ``loo``; one-class
    models on values other than 0/1 hold out entries >= ``--threshold`` only), fitted on the training part
    (`validation.frontdoor.api.fit` with the fit flags) and evaluated next to popularity and EASE^R
    (`validation.evaluation.holdout.evaluate`, cut-offs ``-N``: standard errors and paired bootstrap intervals
    against the better baseline). With ``--select``, K and the model's main hyperparameters are first chosen on a
    validation split carved from the training part only (`validation.frontdoor.api.select`: the grid declared
    with the model, ``ModelAdapter.grid``, ``--grid`` overrides, criterion ``--select-metric``, default recall@
    the smallest N) and the choice refitted on the training part. Prints the split summary, the metrics table,
    EASE^R's chosen lambda and validation curve, the differences, the evaluation counts, the selection (grid,
    every point's validation score, the choice) and the seconds per phase; writes ``metrics.csv``, ``report.md``
    (and ``selection.csv``) to ``--out``.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed flags: model, data, format, user_col, item_col, value_col, sep, time_col, transform, threshold,
        k, seed, max_iter, draws, option (list of "KEY=VALUE"), tol, dtype, split, test_fraction, n_test, N (list of
        int), max_baskets, select, grid (list of "NAME=V1,V2"), select_metric, out (None:
        ``factorbayes-output/evaluate-MODEL``), no_progress.

    Returns
    -------
    int
        0.

    Raises
    ------
    ValueError
        An unknown model; a malformed ``--option`` or ``--grid``; ``--draws`` with a model that keeps its own
        draws; ``--grid`` / ``--select-metric`` without ``--select``; a bad split setting or input (what
        `holdout.split`, `api.fit`, `api.select` and `holdout.evaluate` raise; `api.select`: a training part too
        small to carve a validation split from, an ``--option`` the grid searches).
    FileNotFoundError
        A ``--data`` path that does not exist.
    RuntimeError
        ``ml-100k`` not found and its download failed.
    OSError
        Writing the outputs.

    Source: project addition (issue 24, "Evaluate on your own data").
    """
    import json
    import time

    import numpy as np
    import pandas as pd

    from validation.frontdoor import api
    from validation.evaluation import holdout
    from validation.checks.report import markdown_table

    if args.model not in api.models():
        raise ValueError(f"unknown model {args.model!r}; choose one of {', '.join(api.models())}")
    adapter = api.ADAPTERS[args.model]
    options = _fit_options(args, adapter)
    given = [f for f, v in (("--grid", args.grid), ("--select-metric", args.select_metric)) if v is not None]
    if given and not args.select:
        raise ValueError(f"{', '.join(given)}: only with --select (model selection on a validation split of the train part)")
    grid = _grid_flags(args.grid)
    if args.tol is not None:
        options["tol"] = args.tol
    if args.dtype is not None:
        options["dtype"] = args.dtype
    t_load = time.perf_counter()
    df, path, fmt = _read_table(args)
    how = args.split or ("basket" if fmt in _BASKET_FORMATS else "loo")
    min_value = None
    if adapter.values == "binary" and args.transform in ("none", "binarize"):
        v = df["rating"].to_numpy()
        if args.transform == "binarize" or not np.all(np.isin(v, (0.0, 1.0))):
            min_value = args.threshold  # hold out positives only (the fit binarizes at the same threshold)
    t_split = time.perf_counter()
    held = holdout.split(df, how=how, seed=args.seed, test_fraction=args.test_fraction, n_test=args.n_test,
                         min_value=min_value)
    seconds = {"load": t_split - t_load, "split": time.perf_counter() - t_split}
    print(f"{args.model}: evaluating on {path} ({len(df)} rows; format {fmt}), "
          f"{'K and hyperparameters by --select' if args.select else f'K = {args.k}'}, seed {args.seed}, "
          f"transform {args.transform}", file=sys.stderr)
    sel = None
    if args.select:
        sel = api.select(args.model, held.train, how=how, seed=args.seed, N=tuple(args.N), metric=args.select_metric,
                         grid=grid, options=options, min_value=min_value,
                         test_fraction=args.test_fraction, n_test=args.n_test, transform=args.transform,
                         threshold=args.threshold, progress=not args.no_progress)
        model, K = sel.fitted, sel.chosen["K"]
        table = sel.evaluate(held.test, N=tuple(args.N))
        seconds.update(sel.seconds)
    else:
        t_fit = time.perf_counter()
        model, K = api.fit(args.model, held.train, K=args.k, seed=args.seed, transform=args.transform,
                           threshold=args.threshold, progress=not args.no_progress, **options), args.k
        t_eval = time.perf_counter()
        table = holdout.evaluate(model, held.test, N=tuple(args.N))
        seconds.update(fit=t_eval - t_fit, evaluate=time.perf_counter() - t_eval)
    lines = holdout.describe(held.summary) + holdout.describe(table.attrs["evaluation"])
    fit_options = sel.options if sel is not None else options
    fit_line = (f"fit: {args.model} on the train part ({model.shape[0]} users x {model.shape[1]} items after the "
                f"transform), K = {K}{' (chosen by --select)' if sel is not None else ''}, seed {args.seed}, "
                f"transform {args.transform}"
                f"{f' (threshold {args.threshold:g})' if args.transform == 'binarize' or min_value is not None else ''}"
                f", options {json.dumps({k: repr(v) if k == 'hyper' else v for k, v in fit_options.items()}, default=str)}"
                f"; uncertainty: {model.uncertainty}")
    if sel is not None:
        lines += sel.lines()[:-1]  # the seconds line is the last of `lines` below, with every phase
    lines.append("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()))
    ease = table.attrs.get("ease", {})
    ease_line = f"ease: {ease.get('setting') or ease.get('reason')}" if ease else "ease: not run"
    for line in lines + [fit_line, ease_line]:
        print(line)
    print()
    _print_table(table)
    differences = pd.DataFrame(table.attrs.get("differences", []))
    curve = {"ease": pd.DataFrame(ease["curve"])} if ease.get("curve") else {}
    _print_evaluation_extras(table, differences, curve, table.attrs.get("notes", []))
    out = Path(args.out or f"factorbayes-output/evaluate-{args.model}")
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "metrics.csv", index=False)
    if sel is not None:
        print(f"Model selection: validation {sel.metric} of every grid point (validation split of the train part):")
        _print_table(sel.table)
        sel.table.to_csv(out / "selection.csv", index=False)
    elif (out / "selection.csv").exists():  # an earlier --select run's table would sit beside this run's report
        (out / "selection.csv").unlink()
        print(f"removed {out / 'selection.csv'} (an earlier run's; this run did no selection)", file=sys.stderr)
    notes = "\n".join(f"- {line}" for line in [f"data: {path} (format {fmt})"] + lines + [fit_line, ease_line]
                      + table.attrs.get("notes", []))
    extra = "".join(f"\n\n## {title}\n\n{markdown_table(t)}" for title, t in
                    (("Differences against the best baseline (paired bootstrap over test users)", differences),
                     ("EASE^R: lambda on a validation split of the training entries", curve.get("ease")),
                     (f"Model selection: validation {sel.metric if sel else ''} of every grid point (selection.csv)",
                      sel.table if sel is not None else None))
                    if t is not None and len(t))
    (out / "report.md").write_text(
        f"# {args.model} on {Path(str(path)).name}: held-out evaluation next to popularity and EASE^R\n\n{notes}\n\n"
        f"{markdown_table(table)}{extra}\n\nrecall@N and NDCG@N (discount 1/log2(k+1)): 004_90693a0965f06816.txt eqs. "
        f"5.22, 5.26-5.27; rank score: 000_619a0297b9d686b2.txt eq. 12 (0.5 is random); RMSE: 004 chs. 3-4 "
        f"(rating models); candidates are the items outside the user's training entries (validation.evaluation.holdout).\n")
    print(f"Report: {out / 'report.md'} (table: {out / 'metrics.csv'})")
    return 0


def _grid_flags(items) -> dict | None:
    """``--grid NAME=V1,V2 ...`` as `validation.evaluation.selection.select`'s ``grid`` (name -> tuple of numbers);
    None without the flag. Raises ValueError for an item that is not NAME=NUMBERS."""
    if not items:
        return None
    out = {}
    for item in items:
        name, sep, values = item.rpartition("=")
        try:
            out[name.strip()] = tuple(_option_value(v) for v in values.split(",") if v.strip())
            if not sep or not name.strip() or not out[name.strip()] or not all(
                    isinstance(v, (int, float)) for v in out[name.strip()]):
                raise ValueError
        except ValueError:
            raise ValueError(f"--grid {item!r}: expected NAME=NUMBER[,NUMBER...], e.g. --grid K=5,10 r=1,8") from None
    return out


def _option_value(text: str):
    """KEY=VALUE of ``--option``: VALUE as int, float, true/false/none, else the string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _fit_options(args, adapter) -> dict:
    options = {}
    for item in args.option or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--option {item!r}: expected KEY=VALUE, e.g. --option max_iter=50")
        options[key.strip()] = _option_value(value)
    if args.max_iter is not None:
        options[adapter.iterations] = args.max_iter
    if args.draws is not None:
        if adapter.draws is None:
            raise ValueError(f"--draws: {adapter.name} keeps its own draws ({adapter.uncertainty}); "
                             f"set their number with --max-iter ({adapter.iterations})")
        options[adapter.draws] = args.draws
    return options


def _read_table(args):
    """(table, path, format): the ratings table of ``--data`` through `validation.data.loaders.load`
    (``ml-100k``: the MovieLens 100K copy found or fetched by `validation.data.datasets.find_movielens_100k`),
    its path as a string, and the format read ("movielens", "csv", "fimi", "basket-csv": ``--format``,
    or what "auto" detected). With ``--max-baskets`` (evaluate), a basket file keeps that many random
    baskets (`validation.evaluation.implicit_eval.subsample_baskets`)."""
    from validation.data import datasets, loaders

    if args.data == "ml-100k":
        path = datasets.find_movielens_100k()
    else:
        path = Path(args.data)
        if not path.exists():
            raise FileNotFoundError(f"--data {args.data}: no such file or directory")
    columns = {"user_col": args.user_col, "item_col": args.item_col, "value_col": args.value_col,
               "timestamp_col": getattr(args, "time_col", None)}
    # a flag of digits is a 0-based position (as the Python API's int), any other text a header name
    columns = {k: int(v) if isinstance(v, str) and v.strip().isdigit() else v for k, v in columns.items()
               if v is not None}
    columns.update({k: v for k, v in (("sep", args.sep), ("header", getattr(args, "header", None))) if v is not None})
    fmt = args.format
    if fmt == "auto":
        fmt = "csv" if columns else loaders._detect_format(path)  # what `loaders.load` itself decides
    table = loaders.load(path, format=fmt, **columns)
    label = str(path)
    if fmt in _BASKET_FORMATS and getattr(args, "max_baskets", None) is not None:
        from validation.evaluation.implicit_eval import subsample_baskets

        table, label = subsample_baskets(table, args.max_baskets, args.seed, label)
    return table, label, fmt


def cmd_fit(args) -> int:
    """``factorbayes fit MODEL``: fit a front-door model on a file and save the artifact.

    `validation.frontdoor.api.fit` on ``--data`` (read by `validation.data.loaders.load`), the artifact saved with
    `FittedModel.save` to ``OUT/MODEL.nc`` (its path is the last line printed); with ``--evaluate`` (hpf only) also
    `cmd_evaluate` on the same table.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed flags: model, data, format, user_col, item_col, value_col, sep, transform, threshold, k, seed,
        max_iter, draws, option (list of "KEY=VALUE"), resume_from (checkpoint folder or None), out (None:
        ``factorbayes-output/fit-MODEL``), evaluate, no_progress.

    Returns
    -------
    int
        0.

    Raises
    ------
    ValueError
        An unknown model, a malformed ``--option``, ``--draws`` with a model that keeps its own draws,
        ``--evaluate`` with a model other than hpf; what the loader and `api.fit` raise for bad input.
    TypeError
        Bad input from `api.fit` (values of a non-numeric type).
    FileNotFoundError
        A ``--data`` path that does not exist.
    RuntimeError
        ``ml-100k`` not found and its download failed.
    custom_inference.base.RunInterrupted
        The fit stopped by SIGINT / SIGTERM (the message names the last checkpoint).
    OSError
        Saving the artifact.

    Source: project addition (the command line, issue 10).
    """
    from validation.frontdoor import api

    if args.model not in api.models():
        raise ValueError(f"unknown model {args.model!r}; choose one of {', '.join(api.models())}")
    adapter = api.ADAPTERS[args.model]
    options = _fit_options(args, adapter)
    if args.evaluate and args.model not in FIT_MODELS:
        raise ValueError(f"--evaluate: the held-out evaluation runs for {', '.join(FIT_MODELS)} only "
                         f"(see 'factorbayes evaluate ratings|implicit' for the others)")
    df, path, _ = _read_table(args)
    print(f"{args.model}: fitting on {path} ({len(df)} rows, {df['user'].nunique()} users, "
          f"{df['item'].nunique()} items), K = {args.k}, seed {args.seed}, transform {args.transform}", file=sys.stderr)
    model = api.fit(args.model, df, K=args.k, seed=args.seed, transform=args.transform, threshold=args.threshold,
                    resume_from=args.resume_from, progress=not args.no_progress, **options)
    out = Path(args.out or f"factorbayes-output/fit-{args.model}")
    print(model.summary_text(), file=sys.stderr)
    saved = model.save(out / f"{args.model}.nc")  # before --evaluate: an evaluation error keeps the fit
    print(f"{args.model}: saved {saved.stat().st_size / 2**20:.1f} MiB", file=sys.stderr)
    if args.evaluate:
        from validation.frontdoor.tables import _values

        args.tol = options.get("tol", 0.0)
        args.dtype = str(options.get("dtype", "float32"))
        args.max_iter = options.get("max_iter", 100)
        # the evaluation sees the values the fit saw (--transform / --threshold applied, as api.fit does)
        cmd_evaluate(args, df=_values(df, adapter.values, args.transform, args.threshold), path=path)
    print(saved)
    return 0


def _artifact(spec: str) -> Path:
    p = Path(spec)
    if p.is_dir():
        found = sorted(p.glob("*.nc"))
        if len(found) != 1:
            raise ValueError(f"{spec}: expected one saved model (*.nc) in the folder, found "
                             f"{[f.name for f in found] or 'none'}; pass the file")
        return found[0]
    if not p.exists():
        raise FileNotFoundError(f"{spec}: no such file or directory (a file written by 'factorbayes fit')")
    return p


def cmd_recommend(args) -> int:
    """``factorbayes recommend``: top-N items per user from a saved artifact.

    Printed as tab-separated rows (user, rank, item, score, sd) after a header line.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed flags: model_path (an artifact, or a folder holding exactly one ``*.nc``), users (ids as
        strings), N (int), include_seen (bool), means ("draws" or "q", as `FittedModel.recommend`'s ``means``),
        no_sd (leave out the sd column: ``sd=False``).

    Returns
    -------
    int
        0.

    Raises
    ------
    FileNotFoundError
        A missing path (`validation.frontdoor.fitted.load`).
    ValueError
        A folder without exactly one ``*.nc`` file, a file that is not an artifact or is damaged, N < 1.
    KeyError
        An unknown user id (`FittedModel.recommend`).

    Source: project addition (the command line, issue 10).
    """
    from validation.frontdoor import api

    model = api.load(_artifact(args.model_path))
    table = model.recommend(args.users, N=args.N, exclude_seen=not args.include_seen, means=args.means,
                            sd=not args.no_sd)
    print("\t".join(table.columns))
    for row in table.itertuples(index=False):
        sd = "" if args.no_sd else f"\t{row.sd:.6g}"
        print(f"{row.user}\t{row.rank}\t{row.item}\t{row.score:.6g}{sd}")
    return 0


def cmd_errata(args) -> int:
    """``factorbayes errata``: run the executable errata table, print it and write its report.

    `validation.checks.errata.run_errata` of `validation.models.catalog.all_errata`; the report goes to
    ``args.out``.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed flags: out (report folder).

    Returns
    -------
    int
        0 when every row is OK, else 1.

    Raises
    ------
    None of its own; errors of the errata checks, of resolving the rows and of writing the report propagate.

    Source: project addition (the command line).
    """
    import pandas as pd

    from validation.checks.errata import run_errata
    from validation.models.catalog import all_errata
    from validation.checks.report import errata_report

    table = run_errata(all_errata())
    with pd.option_context("display.max_colwidth", 60, "display.width", 200):
        print(table[["seed_file", "location", "printed", "check", "printed_value", "corrected_value", "ok"]].to_string(index=False))
    report = errata_report(table, Path(args.out))
    print(f"\n{int(table.ok.sum())} of {len(table)} rows OK. Report: {report}")
    return 0 if bool(table.ok.all()) else 1


def cmd_sbc(args) -> int:
    """``factorbayes sbc MODEL``: simulation-based calibration with the model declaration's SBC adapters.

    `validation.checks.sbc.run_sbc` with ``spec.sbc[--solver]``; prints the uniformity table and writes the report
    (and the resumable cache, and for NUTS adapters the per-simulation gates) under ``--out``.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed flags: model, solver (the SBC adapter's label), sims (simulations), draws (L, posterior draws
        ranked per simulation), seed (master seed), alpha (false-alarm rate of the uniformity test), out (None:
        ``factorbayes-output/sbc-MODEL-SOLVER``), no_progress.

    Returns
    -------
    int
        0 when every scalar's ranks pass the uniformity test (Bonferroni at ``alpha``), else 1.

    Raises
    ------
    KeyError
        An unknown model (`validation.models.catalog.get`; the parser's choices prevent it from the command line).
    ValueError
        A model without SBC adapters, or a ``--solver`` that is not one of its adapters.
    OSError
        Writing the cache or the report (propagated, like what the simulations and fits raise).

    Source: project addition (the command line).
    """
    from validation.checks import registry, sbc
    from validation.models import catalog

    spec = catalog.get(args.model)
    if not spec.sbc:
        raise ValueError(f"sbc: {args.model} has no SBC adapters (models with some: {', '.join(catalog.sbc_models())})")
    if args.solver not in spec.sbc:
        raise ValueError(f"--solver: the {args.model} SBC runs {sorted(spec.sbc)} (got {args.solver!r})")
    adapters = registry.resolve(spec.sbc[args.solver])  # a lazy with arguments resolves to the triple itself
    out = Path(args.out or f"factorbayes-output/sbc-{args.model}-{args.solver}")
    if callable(adapters) and "log_path" in inspect.signature(adapters).parameters:
        out.mkdir(parents=True, exist_ok=True)  # a NUTS fit's per-simulation gates, kept across resumed runs
        adapters = functools.partial(adapters, log_path=out / "gates.jsonl")
    simulate, fit, functionals = adapters() if callable(adapters) else adapters
    cfg = registry.resolve(spec.sbc_config)
    setting = f"each simulation: {cfg() if isinstance(cfg, type) else cfg}"
    result = sbc.run_sbc(simulate, fit, functionals, n_sims=args.sims, master_seed=args.seed, n_draws=args.draws,
                         cache_dir=out / "cache", progress=not args.no_progress, method=f"{args.model}-{args.solver}")
    table = result.uniformity(alpha=args.alpha)
    notes = [f"solver: {args.solver}; {args.sims} simulations from master seed {args.seed}; L = {args.draws} draws ranked",
             setting, f"mean seconds per simulation (simulate + fit): {result.seconds.mean():.2f}"]
    if hasattr(fit, "gate_records"):  # NUTS fits: how many simulations failed their gates (kept in the ranks)
        from validation.checks.nuts_sbc import gate_notes

        notes += gate_notes(fit, result)
    report = sbc.sbc_report(result, out, title=f"SBC of {args.model}, solver {args.solver}", alpha=args.alpha,
                            notes=notes)
    with open(report, "a") as f:  # the model's evidence table (validation.models.catalog.evidence_table) after the SBC
        f.write("\n" + "\n".join(catalog.evidence_lines(args.model)) + "\n")
    _print_table(table)
    ok = result.passed(alpha=args.alpha)
    print(f"SBC {'PASSED' if ok else 'FAILED'} (all scalars, Bonferroni at alpha = {args.alpha}). Report: {report}")
    return 0 if ok else 1


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("factorbayes")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


# Copies of module constants, so that building the parser (``--help``) imports no JAX or ArviZ;
# tests/validation/test_cli.py checks that they equal the originals.
_FORMATS = ("auto", "movielens", "csv", "fimi", "basket-csv")  # validation.data.loaders.FORMATS
_TRANSFORMS = ("none", "round", "double", "binarize", "error")  # validation.data.loaders.TRANSFORMS
_CURVE_DATA = ("ratings", "sec4-synthetic")  # validation.evaluation.implicit_eval.CURVE_DATA
_CURVE_PASSES = 10  # validation.evaluation.implicit_eval.CURVE_DEFAULTS["passes"]
_IMPLICIT_PROTOCOLS = ("P1", "SIBM", "baskets")  # validation.evaluation.implicit_eval.RATING_PROTOCOLS + BASKET_PROTOCOLS
_HOWS = ("loo", "fraction", "time", "basket")  # validation.evaluation.holdout.HOWS
_BASKET_FORMATS = ("fimi", "basket-csv")  # validation.evaluation.implicit_eval._BASKET_FORMATS



def _ratings_solver(name: str) -> str:
    """``--solvers`` of ``evaluate ratings``: ``name`` if a solver declares the ratings evaluation under that
    front-door name (`validation.models.catalog.evaluation_systems`, read when a name is given, so building the
    parser and printing help import no declaration and no JAX). Raises argparse.ArgumentTypeError listing the
    declared names otherwise. Source: project addition."""
    from validation.models import catalog

    declared = catalog.evaluation_systems("ratings")
    if name not in declared:
        raise argparse.ArgumentTypeError(f"invalid choice: {name!r} (choose from {', '.join(declared)})")
    return name


def _add_loader_flags(p) -> None:
    """The file-reading flags that ``fit`` and ``evaluate`` share (read by `_read_table`)."""
    p.add_argument("--format", choices=_FORMATS, default="auto",
                   help="file format (validation.data.loaders.load): auto-detect, MovieLens, a delimited file with "
                        "named columns, FIMI baskets (one basket of item ids a line), or CSV baskets (item names)")
    p.add_argument("--user-col", default=None, help="delimited files: the user column (header name or 0-based index)")
    p.add_argument("--item-col", default=None, help="delimited files: the item column (header name or 0-based index)")
    p.add_argument("--value-col", default=None,
                   help="delimited files: the value column, name or 0-based index (none: one-class data, every "
                        "row a 1)")
    p.add_argument("--sep", default=None, help="delimited files: the field separator (default: sniffed)")
    p.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                   help="delimited files: the first line is a header (default: yes when a column is given by "
                        "name, no when all are 0-based indices)")
    p.add_argument("--transform", choices=_TRANSFORMS, default="none",
                   help="values the model cannot take: none (count models refuse non-integers, binary models "
                        "binarize at --threshold), round, double (half stars), binarize, error")
    p.add_argument("--threshold", type=float, default=4.0, help="binarize: value >= threshold is a 1")


def _add_fit_flags(p, iterations_help: str = "") -> None:
    """The solver flags that ``fit`` and ``evaluate MODEL`` share (read by `_fit_options`)."""
    p.add_argument("--max-iter", type=int, default=None,
                   help="iterations of the solver (VI sweeps, SVI/SGD epochs or minibatches, kept sampler sweeps "
                        "per chain: the option named in the README's front-door table); default the model's"
                        + iterations_help)
    p.add_argument("--draws", type=int, default=None,
                   help="VI solvers: draws from q stored in the artifact; default the model's")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", default=None,
                   help="solver option passed to validation.frontdoor.api.fit (repeatable), e.g. --option num_chains=2")


def build_parser() -> argparse.ArgumentParser:
    """The ``factorbayes`` argument parser.

    Sub-commands crosscheck, fit, recommend, evaluate, sbc, evidence, errata, each with ``func`` set to its
    ``cmd_*``. Imports `validation.frontdoor.api` and `validation.models.catalog` (no JAX) for the model choices.

    Returns
    -------
    argparse.ArgumentParser
        The parser; ``parse_args`` gives a Namespace with ``command`` and ``func``.

    Raises
    ------
    None of its own; ImportError from those imports propagates.

    Source: project addition (the command line).
    """
    fmt = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(prog="factorbayes", description=__doc__.split("\n")[0], formatter_class=fmt)
    parser.add_argument("--version", action="version", version=f"factorbayes {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    from validation.frontdoor import api
    from validation.models import catalog

    models = catalog.names()
    p = sub.add_parser("crosscheck", help="hand-derived solver vs NUTS on small data, ArviZ-gated", formatter_class=fmt)
    p.add_argument("model", choices=models, help="model of the registry")
    p.add_argument("--data", default=None, help="omit for the embedded simulated default; 'ml-100k' or a MovieLens "
                                                "path (models whose spec has real_data: hpf)")
    p.add_argument("--solver", default=None, help="the model's solver (default its first: hpf cavi|gibbs)")
    p.add_argument("--reference", choices=("stored", "rerun"), default=None,
                   help="NUTS: the stored reference (error if none matches) or a fresh run; default stored when "
                        "one matches the problem, else a fresh run")
    p.add_argument("--out", default=None, help="report folder (default factorbayes-output/crosscheck-MODEL-SOLVER)")
    p.add_argument("--quick", action="store_true",
                   help="fewer NUTS draws (a fresh run, for smoke tests; gates will likely fail)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--vsbc", type=int, default=0, metavar="N",
                   help="VI solvers: also run N VSBC simulations (validation.checks.vi_evidence) and report them")
    p.set_defaults(func=cmd_crosscheck)

    fit_models = api.models()
    p = sub.add_parser("fit", formatter_class=fmt,
                       help="fit any model on a ratings or basket file and save it (one netCDF artifact: posterior, "
                            "id maps, settings); the artifact's path is the last line printed")
    p.add_argument("model", choices=fit_models, help="model name (validation.frontdoor.api.models())")
    p.add_argument("--data", default="ml-100k", help="'ml-100k' (found or fetched) or a file / MovieLens folder")
    _add_loader_flags(p)
    p.add_argument("--k", type=int, default=20, help="latent dimension K")
    p.add_argument("--seed", type=int, default=0, help="random seed (same seed, same fit)")
    _add_fit_flags(p)
    p.add_argument("--resume-from", default=None,
                   help="checkpoint folder: write checkpoints there and continue from one if present "
                        "(resumable models only)")
    p.add_argument("--out", default=None, help="output folder (default factorbayes-output/fit-MODEL)")
    p.add_argument("--evaluate", action="store_true",
                   help="hpf only: also run the held-out evaluation (P1, P3, popularity) and write its report")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("recommend", formatter_class=fmt,
                       help="top-N items per user from a saved model, with the score's posterior sd")
    p.add_argument("model_path", metavar="DIR_OR_FILE", help="an artifact written by 'factorbayes fit' or its folder")
    p.add_argument("--users", nargs="+", required=True, metavar="ID", help="user ids as in the data file")
    p.add_argument("-N", type=int, default=10, help="items per user")
    p.add_argument("--include-seen", action="store_true", help="also rank the user's training items")
    p.add_argument("--means", choices=("draws", "q"), default="draws",
                   help="score = mean over the stored draws, or q's closed-form mean where it exists (HPF CAVI)")
    p.add_argument("--no-sd", action="store_true", help="leave out the sd column (skips the pass over the draws)")
    p.add_argument("--no-progress", action="store_true",
                   help="accepted as by every other command (recommend shows no progress bar)")
    p.set_defaults(func=cmd_recommend)

    p = sub.add_parser("evaluate", formatter_class=fmt,
                       help="held-out evaluation: MODEL (any fit model) on your own file, next to popularity and EASE^R "
                            "(validation.evaluation.holdout); hpf without own-data flags: the paper protocols P1, P3 on "
                            "MovieLens; ratings (every Gaussian solver on P2); implicit (one-class systems); "
                            "counts (top-100 on P3)")
    p.add_argument("model", choices=tuple(dict.fromkeys(fit_models + EVALUATIONS)),
                   help="a model of validation.frontdoor.api.models(), or a family of the paper evaluations")
    p.add_argument("--data", default="ml-100k",
                   help="'ml-100k' (found or fetched) or a file / MovieLens folder (ratings, FIMI or CSV baskets)")
    _add_loader_flags(p)
    p.add_argument("--k", type=int, default=20, help="number of components K")
    p.add_argument("--seed", type=int, default=0, help="random seed (the split and the fit)")
    _add_fit_flags(p, "; the paper evaluations: CAVI sweeps (hpf), VI sweeps (ratings), HPF sweeps (counts), 100")
    p.add_argument("--tol", type=float, default=None,
                   help="relative-ELBO stopping tolerance (paper hpf evaluation: default 0, run max-iter sweeps)")
    p.add_argument("--dtype", choices=("float32", "float64"), default=None,
                   help="float precision (paper evaluations: default float32)")
    p.add_argument("--out", default=None, help="report folder (default factorbayes-output/evaluate-MODEL)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--max-baskets", type=int, default=None,
                   help="basket files: a random subset of this many baskets (seeded by --seed)")
    g = p.add_argument_group("evaluate MODEL (your own data: validation.evaluation.holdout.split + evaluate)")
    g.add_argument("--split", choices=_HOWS, default=None,
                   help="held-out entries: loo (one per user), fraction (--test-fraction of each user's), time "
                        "(each user's --n-test latest, by --time-col), basket (one item per basket); default "
                        "basket for basket files, else loo")
    g.add_argument("--test-fraction", type=float, default=0.2, help="--split fraction: share of each user's entries")
    g.add_argument("--n-test", type=int, default=1, help="--split time: latest entries held out per user")
    g.add_argument("--time-col", default=None, help="delimited files: the timestamp column (for --split time)")
    g.add_argument("-N", "--n", dest="N", type=int, nargs="+", default=[10, 20], help="cut-offs of recall@N, NDCG@N")
    g.add_argument("--select", action="store_true",
                   help="choose K and the model's main hyperparameters on a validation split carved from the train "
                        "part (never the test part), refit on the train part (validation.evaluation.selection; --k "
                        "is then ignored)")
    g.add_argument("--grid", nargs="+", default=None, metavar="NAME=V1,V2",
                   help="--select: replace grid values, e.g. K=5,10 r=1,8 (the model's declared grid, ModelAdapter.grid)")
    g.add_argument("--select-metric", default=None,
                   help="--select: the criterion (recall@N, ndcg@N with N of -N, rank_score, rmse; default recall@ the "
                        "smallest N)")
    g = p.add_argument_group("evaluate ratings (P2)")
    g.add_argument("--ranks", type=int, nargs="+", default=[10, 32], help="K values")
    g.add_argument("--solvers", nargs="+", type=_ratings_solver, default=argparse.SUPPRESS, metavar="SOLVER",
                   help="solvers to run: front-door names of the solvers that declare the ratings evaluation "
                        "(sbmf, bpmf, mcmc-fm, ...: a wrong name lists them); default all")
    g.add_argument("--warmup", type=int, default=None, help="Gibbs sweeps discarded (default: each runner's, 50)")
    g.add_argument("--samples", type=int, default=None, help="Gibbs sweeps kept and averaged (default 150)")
    g.add_argument("--epochs", type=int, default=None, help="OVBFM and SGD-FM epochs (default 30)")
    g.add_argument("--set", action="append", default=None, metavar="MODEL.NAME=VALUE",
                   help="ratings and counts: one setting of one model's runner (repeatable), e.g. --set sbmf.warmup=20 "
                        "--set sgd-fm.reg=0,0.04,0.04; MODEL is the front-door name, NAME a setting its declaration "
                        "lists (a wrong one lists them); wins over the flags above")
    g.add_argument("--features", choices=("ids", "rich"), default="ids", help="FM design")
    g = p.add_argument_group("evaluate implicit (one-class: P1 and the SIBM protocol)")
    g.add_argument("--protocols", nargs="+", choices=_IMPLICIT_PROTOCOLS, default=None,
                   help="protocols (default: P1 SIBM for ratings, baskets for basket files)")
    g.add_argument("--systems", nargs="+", default=None, metavar="NAME",
                   help="a subset of the systems (quote names with spaces), default all")
    g.add_argument("--baselines-only", action="store_true", help="popularity, EASE^R and the two BPRs only")
    g.add_argument("--all-svi", action="store_true",
                   help="above implicit_eval.LARGE_CELLS training cells: run all three SIBM SVI schemes "
                        "(default S-Biased only, batch VB skipped)")
    g.add_argument("--curves", action="store_true",
                   help="also write recall@10 vs entries observed (seed 002 figs. 2-3) as CSV and PNG")
    g.add_argument("--curves-only", action="store_true", help="only the curves, not the comparison table")
    g.add_argument("--curve-data", nargs="+", choices=_CURVE_DATA, default=list(_CURVE_DATA),
                   help="data sets of the curves: the --data ratings under the SIBM protocol, the seed's "
                        "sec. 4 synthetic matrix")
    g.add_argument("--curve-passes", type=float, default=_CURVE_PASSES,
                   help="budget of each curve run in units of I x J entries")
    g = p.add_argument_group("evaluate counts (top-100 on P3; --systems, --k, --seed, --max-iter (HPF sweeps), "
                             "--epochs (SGD-FM), --dtype (NPFM/PPFM/HPF) also apply)")
    g.add_argument("--side-features", action="store_true",
                   help="also run NPFM, PPFM, MCMC-FM and SGD-FM with the MovieLens side features (NAME+side)")
    g.add_argument("--pfm-warmup", type=int, default=None, help="NPFM/PPFM burn-in sweeps (default: declared, 300)")
    g.add_argument("--pfm-samples", type=int, default=None, help="NPFM/PPFM kept draws (default 100)")
    g.add_argument("--pfm-thin", type=int, default=None, help="NPFM/PPFM sweeps per kept draw (default 2)")
    g.add_argument("--fm-warmup", type=int, default=None, help="MCMC-FM burn-in sweeps (default 50)")
    g.add_argument("--fm-samples", type=int, default=None, help="MCMC-FM kept sweeps (default 100)")
    g.add_argument("--ease-lambdas", type=float, nargs="+", default=None,
                   help="EASE^R lambdas searched on the validation split (default 10 30 100 300 1000 3000)")
    g.add_argument("--sgd-learning-rates", type=float, nargs="+", default=None,
                   help="SGD-FM learning rates searched (default 0.003 0.01 0.03)")
    g.add_argument("--sgd-regs", type=float, nargs="+", default=None,
                   help="SGD-FM L2 constants searched (default 0.01 0.04 0.1)")
    p.set_defaults(func=cmd_evaluate_dispatch)

    p = sub.add_parser("sbc", help="simulation-based calibration of a solver", formatter_class=fmt)
    p.add_argument("model", choices=models, help="model of the registry")
    p.add_argument("--solver", default="gibbs",
                   help="the SBC adapters of the model's spec (hpf: gibbs|nuts|cavi|gibbs-printed, where "
                        "gibbs-printed is the Gibbs sampler with the seed's printed xi/eta conditionals and must fail)")
    p.add_argument("--sims", type=int, default=200, help="number of simulations")
    p.add_argument("--draws", type=int, default=99, help="L, posterior draws ranked per simulation")
    p.add_argument("--seed", type=int, default=0, help="master seed")
    p.add_argument("--alpha", type=float, default=0.05, help="false-alarm rate of the uniformity test")
    p.add_argument("--out", default=None, help="report folder (holds the resumable cache)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_sbc)

    p = sub.add_parser("evidence", formatter_class=fmt,
                       help="which evidence exists per model and solver (update checks, bridge, NUTS agreement, "
                            "SBC, k-hat, VSBC)")
    p.add_argument("models", nargs="*", choices=[[]] + list(models), metavar="MODEL",
                   help="models of the registry (default all)")
    p.set_defaults(func=cmd_evidence)

    p = sub.add_parser("errata", help="run the executable errata table", formatter_class=fmt)
    p.add_argument("--out", default="factorbayes-output/errata", help="report folder")
    p.set_defaults(func=cmd_errata)
    return parser


def main(argv=None) -> int:
    """Entry point of ``factorbayes``: parse the arguments, run the command, return its exit status.

    crosscheck, sbc and errata run with ``jax_enable_x64`` on. JAX's persistent compilation cache is on
    (`validation.frontdoor.compile_cache.enable`: the user's cache folder, ``FACTORBAYES_JAX_CACHE=off`` switches
    it off). Warnings are printed as ``factorbayes: warning: ...``.

    Parameters
    ----------
    argv : list of str or None, default None
        The arguments; None: ``sys.argv[1:]``.

    Returns
    -------
    int
        0 success, 1 a check failed, 2 usage or input error (ValueError, TypeError, FileNotFoundError,
        NotImplementedError or KeyError of a command, printed as ``factorbayes: error: ...``), 3 an inconclusive
        cross-check, 130 an interruption (SIGINT, or SIGTERM during a checkpointed fit:
        `custom_inference.base.RunInterrupted`, whose message names the last checkpoint).

    Raises
    ------
    SystemExit
        From argparse: exit 2 on a usage error, 0 after ``--help`` / ``--version``.
    Exception
        Any other exception of a command (RuntimeError of a failed download, OSError, FloatingPointError, ...)
        propagates.

    Source: project addition (the command line).
    """
    args = build_parser().parse_args(argv)
    from validation.frontdoor import compile_cache

    compile_cache.enable()  # compiled programs kept in ~/.cache/factorbayes/jax (FACTORBAYES_JAX_CACHE=off: none)
    if args.command in FLOAT64_COMMANDS:
        # Validation runs in float64 (the project's convention for checks), and globally rather than in a
        # `jax.enable_x64` context: NumPyro's progress-bar callbacks run on another thread,
        # which would otherwise see float32/int32 and fail on the dtype of their results.
        import jax

        jax.config.update("jax_enable_x64", True)
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):  # the user's terms, no source line
        print(f"factorbayes: warning: {message}", file=file or sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show  # restored on leaving the block
            return args.func(args)
    except (ValueError, TypeError, FileNotFoundError, NotImplementedError) as exc:
        print(f"factorbayes: error: {exc}", file=sys.stderr)
        return 2
    except KeyError as exc:  # unknown user or item id (FittedModel); str(KeyError) adds quotes
        print(f"factorbayes: error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # custom_inference.base.RunInterrupted (SIGINT / SIGTERM) names the checkpoint
        print(f"factorbayes: interrupted{': ' + str(exc) if str(exc) else ''}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
