"""The ``factorbayes evaluate ratings | implicit | counts`` commands (the evaluations that span several
models) and the printing and loading helpers the CLI's commands share; split from
`validation.frontdoor.cli` (which parses the arguments and dispatches here). Heavy modules (JAX, pandas,
the evaluations) are imported inside the functions, so that ``factorbayes --help`` starts fast.

Source: project addition.
"""

from __future__ import annotations

import sys
from pathlib import Path

def _load_data(spec: str):
    from validation.data import datasets

    if spec == "ml-100k":
        path = datasets.find_movielens_100k()
    else:
        path = Path(spec)
        if not path.exists():
            raise FileNotFoundError(f"--data {spec}: no such file or directory (use 'ml-100k' or a MovieLens path)")
    return datasets.load_movielens(path), str(path)


def _print_table(df) -> None:
    from validation.checks.report import markdown_table

    print(markdown_table(df))
    print()


def _print_evaluation_extras(table, differences, tuning: dict, notes: list) -> None:
    """Print what an evaluation table carries beside its metrics: the settings tuned systems chose (or why
    a system was skipped), the differences against the best baseline with their intervals, the
    validation curves and the notes. Raises nothing beyond what printing raises. Source: project addition
    (issue 27)."""
    keys = [c for c in ("protocol",) if c in table.columns] + ["method" if "method" in table.columns else "system"]
    for _, row in table.iterrows():
        if row.get("setting"):
            print(f"{' '.join(str(row[k]) for k in keys)}: {row['setting']}")
    print()
    if len(differences):
        print("Differences against the best baseline (paired bootstrap interval over test users):")
        _print_table(differences)
    for key, curve in tuning.items():
        print(f"{' '.join(key) if isinstance(key, tuple) else key}: search on a validation split of the training data")
        _print_table(curve)
    for line in notes:
        print(f"- {line}")
    print()


def parse_set(items) -> dict[str, dict]:
    """The ``--set MODEL.NAME=VALUE`` flags of ``evaluate ratings|counts`` as per-model settings.

    VALUE is read as a Python literal where it is one (``ast.literal_eval``: ``20``, ``1e-4``, ``0.0,0.04,0.04`` a
    tuple, ``None``), else kept as the string.

    Parameters
    ----------
    items : sequence of str or None
        The flags' values, e.g. ``["sbmf.warmup=20", "sgd-fm.reg=0,0.04,0.04"]``; None: none given.

    Returns
    -------
    dict of str to dict
        MODEL (a front-door name) -> {NAME: value}; a later flag for the same MODEL.NAME wins. Unknown models or
        names are refused by the evaluation's config (`validation.checks.registry.merge_settings`).

    Raises
    ------
    ValueError
        An item without ``=`` or without ``.`` before it, or with an empty MODEL or NAME.

    Source: project addition (issue 25: per-model settings keyed by the model's name).
    """
    import ast

    out: dict[str, dict] = {}
    for item in items or ():
        key, eq, raw = str(item).partition("=")
        model, dot, name = key.strip().rpartition(".")
        if not eq or not dot or not model or not name:
            raise ValueError(f"--set {item!r}: expected MODEL.NAME=VALUE, e.g. --set sbmf.warmup=20")
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            value = raw.strip()
        out.setdefault(model, {})[name] = value
    return out


def evaluation_settings(args, evaluation: str) -> dict[str, dict]:
    """The per-model settings of ``evaluate ratings|counts``: the evaluation's flags, then ``--set``.

    Each flag given (not None) sets, for every solver declaring ``evaluation``, the setting its
    ``EvaluationEntry.flags`` maps that flag to (``--warmup``: the Gibbs runners' ``warmup``; ``--epochs``: OVBFM's
    and SGD-FM's ``epochs``; ...); ``--set MODEL.NAME=VALUE`` (`parse_set`) then overrides any of them. No model is
    named here: the mapping is declared with each runner.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed flags (those a declaration names; ``set``: the ``--set`` items).
    evaluation : {"ratings", "counts"}
        Whose declarations map the flags.

    Returns
    -------
    dict of str to dict
        Front-door name -> {setting name: value}, for ``RatingsConfig(settings=...)`` / ``CountsConfig``.

    Raises
    ------
    ValueError
        A malformed ``--set`` (`parse_set`); an unknown evaluation (`validation.models.catalog`).

    Source: project addition (issue 25).
    """
    from validation.models import catalog

    out: dict[str, dict] = {}
    for _, system, entry in catalog.evaluation_declarations(evaluation):
        for flag, name in entry.flags.items():
            value = getattr(args, flag, None)
            if value is not None:
                out.setdefault(system, {})[name] = tuple(value) if isinstance(value, list) else value
    for system, given in parse_set(getattr(args, "set", None)).items():
        out.setdefault(system, {}).update(given)
    return out


def cmd_evaluate_ratings(args) -> int:
    """``factorbayes evaluate ratings``: every Gaussian solver on protocol P2, with curves and a report.

    `validation.evaluation.ratings_eval.evaluate_ratings` on MovieLens; the RMSE table and notes are printed, the
    curves (``curves.csv``, PNG plots) and the report written to ``--out``.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed flags: data ("ml-100k" or a MovieLens path), ranks (list of K), solvers (front-door names; absent
        or empty: all that declare the ratings evaluation), warmup, samples (Gibbs sweeps discarded / kept), max_iter
        (VBFM sweeps), epochs (OVBFM and SGD-FM) (each None: the declared default; mapped onto the runners' settings
        by `evaluation_settings`), set (``--set MODEL.NAME=VALUE`` items), features ("ids" or "rich"), dtype (None:
        "float32"), seed, out (None: ``factorbayes-output/evaluate-ratings``), no_progress.

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
    ValueError
        Bad settings or data (from `RatingsConfig` / `evaluate_ratings`); a malformed ``--set``.
    validation.checks.registry.MissingDeclaration
        A solver that declares the "ratings" evaluation without a runner.
    OSError
        Writing the outputs.

    Source: project addition (the command line).
    """
    from validation.evaluation import ratings_eval
    from validation.checks.report import evaluation_report

    df, path = _load_data(args.data)
    config = ratings_eval.RatingsConfig(
        ranks=tuple(args.ranks), solvers=tuple(getattr(args, "solvers", ())) or None, features=args.features,
        dtype=args.dtype or "float32", seed=args.seed, settings=evaluation_settings(args, "ratings"))
    data_dir = Path(path).parent if args.features == "rich" else None
    print(f"Rating prediction (P2) on {path}: solvers {', '.join(config.solvers)}; K in {list(config.ranks)}",
          file=sys.stderr)
    result = ratings_eval.evaluate_ratings(df, config, data_dir=data_dir, progress=not args.no_progress)
    out = Path(args.out or "factorbayes-output/evaluate-ratings")
    plots = ratings_eval.plot_curves(result.curves, out)
    result.curves.to_csv(out / "curves.csv", index=False)
    print()
    _print_table(result.table)
    for line in result.notes:
        print(f"- {line}")
    report = evaluation_report({"RMSE on P2 (test 10 %)": result.table,
                                "Differences against the item mean (paired bootstrap over test users)":
                                    result.differences}, None, out,
                               title="Gaussian factorization models on MovieLens: rating prediction (P2)",
                               notes=[f"data: {path} ({len(df)} ratings)", *result.notes], extra_plots=plots)
    print(f"Report: {report}")
    return 0


def cmd_evaluate_implicit(args) -> int:
    """``factorbayes evaluate implicit``: the one-class comparison, and optionally the recall curves.

    `validation.evaluation.implicit_eval.evaluate_implicit` on ratings (protocols P1, SIBM) or basket files
    (protocol baskets) and, with ``--curves`` / ``--curves-only``, recall@10 against entries observed
    (`validation.evaluation.implicit_eval.recall_curves`); tables printed, reports written under ``--out``.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed flags: data, format, user_col, item_col, value_col, sep, time_col, max_baskets, transform (must
        be "none"), seed, out (None: ``factorbayes-output/evaluate-implicit``), curves, curves_only, curve_data,
        curve_passes, baselines_only, systems (names; None: all), protocols (None: P1 SIBM for ratings, baskets for
        basket files), all_svi, no_progress.

    Returns
    -------
    int
        0.

    Raises
    ------
    ValueError
        ``--transform`` other than none; unknown ``--systems`` names; an unknown or inapplicable ``--format`` or a
        malformed file (from `implicit_eval.load_implicit_data`).
    FileNotFoundError
        A ``--data`` path that does not exist.
    RuntimeError
        ``ml-100k`` not found and its download failed.
    OSError
        Writing the outputs (propagated, like what the evaluation raises).

    Source: project addition (the command line).
    """
    from validation.evaluation import implicit_eval

    if args.transform != "none":
        raise ValueError(f"--transform {args.transform}: evaluate implicit binarizes ratings >= 4 itself (P1, SIBM) "
                         "and reads baskets as they are; for another threshold use 'factorbayes evaluate MODEL "
                         "--data FILE --transform binarize --threshold T' (e.g. MODEL sibm)")
    columns = {"user_col": args.user_col, "item_col": args.item_col, "value_col": args.value_col, "sep": args.sep,
               "timestamp_col": args.time_col}
    df, path, is_baskets = implicit_eval.load_implicit_data(
        args.data, format=args.format, max_baskets=args.max_baskets, seed=args.seed,
        **{k: v for k, v in columns.items() if v is not None})
    basket_kw = {"baskets": True} if is_baskets else {}
    protocols = tuple(args.protocols) if args.protocols else (
        implicit_eval.BASKET_PROTOCOLS if is_baskets else implicit_eval.RATING_PROTOCOLS)
    out = Path(args.out or "factorbayes-output/evaluate-implicit")
    if args.curves or args.curves_only:
        print(f"Recall@10 vs entries observed (seed 002 figs. 2-3) on {', '.join(args.curve_data)}: "
              f"{args.curve_passes:g} x I J entries per run", file=sys.stderr)
        curves = implicit_eval.recall_curves(df, data=tuple(args.curve_data), seed=args.seed,
                                             passes=args.curve_passes, out_dir=out, progress=not args.no_progress)
        _print_table(curves.summary)
        print(f"Curves: {curves.csv}; report: {curves.report}")
        if args.curves_only:
            return 0
    systems = implicit_eval.baseline_systems()
    if not args.baselines_only:
        systems = {**implicit_eval.model_systems(), **systems}
    if args.systems:
        unknown = sorted(set(args.systems) - set(systems))
        if unknown:
            raise ValueError(f"--systems: unknown {unknown}; choose from {sorted(systems)}")
        systems = {name: systems[name] for name in args.systems}
    print(f"One-class comparison on {path}: protocols {', '.join(protocols)}; systems {', '.join(systems)}",
          file=sys.stderr)
    result = implicit_eval.evaluate_implicit(df, systems, protocols=protocols, seed=args.seed,
                                             out_dir=out, progress=not args.no_progress, all_svi=args.all_svi,
                                             **basket_kw)
    _print_table(result.table.drop(columns=["setting"], errors="ignore"))
    _print_evaluation_extras(result.table, result.differences, result.tuning, result.notes)
    if len(result.like_error_by_degree):
        print("Like classification error on held-out edges by user degree (seed 003 fig. 4):")
        _print_table(result.like_error_by_degree)
    print(f"Report: {result.report}")
    return 0


def cmd_evaluate_counts(args) -> int:
    """``factorbayes evaluate counts``: the thesis's top-N comparison on protocol P3, its table and report.

    `validation.evaluation.counts_eval.evaluate_counts` on MovieLens; the table and extras printed, the report
    written to ``--out``.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed flags: data, systems (None: all), k, seed, side_features, dtype (None: "float32"), ease_lambdas
        (None: `CountsConfig`'s default); max_iter (HPF sweeps), epochs (SGD-FM), pfm_warmup, pfm_samples, pfm_thin,
        fm_warmup, fm_samples, sgd_learning_rates, sgd_regs (each None: the declared default; mapped onto the
        runners' settings by `evaluation_settings`), set (``--set MODEL.NAME=VALUE`` items), out (None:
        ``factorbayes-output/evaluate-counts``), no_progress.

    Returns
    -------
    int
        0.

    Raises
    ------
    ValueError
        Unknown ``--systems``, bad settings, missing side-feature files for a ``+side`` system (from
        `evaluate_counts`); a malformed ``--set``.
    FileNotFoundError
        A ``--data`` path that does not exist.
    RuntimeError
        ``ml-100k`` not found and its download failed.
    FloatingPointError
        A non-finite HPF ELBO (from the evaluation's HPF fit).
    validation.checks.registry.MissingDeclaration
        A solver that declares the "counts" evaluation without a runner.
    OSError
        Writing the report.

    Source: project addition (the command line); the evaluation is ``004_90693a0965f06816.txt`` sec. 5.4's.
    """
    from validation.evaluation import counts_eval

    df, path = _load_data(args.data)
    settings = {"dtype": args.dtype or "float32", "settings": evaluation_settings(args, "counts")}
    if getattr(args, "ease_lambdas", None) is not None:
        settings["ease_lambdas"] = tuple(args.ease_lambdas)
    data_dir = Path(path) if Path(path).is_dir() else Path(path).parent
    print(f"Top-N from counts (P3, seed {args.seed}) on {path}: K = {args.k}; systems "
          f"{', '.join(args.systems) if args.systems else 'all'}{' (+ side features)' if args.side_features else ''}",
          file=sys.stderr)
    result = counts_eval.evaluate_counts(df, systems=args.systems, K=args.k, seed=args.seed,
                                         side_features=args.side_features, data_dir=data_dir,
                                         out_dir=Path(args.out or "factorbayes-output/evaluate-counts"),
                                         progress=not args.no_progress, **settings)
    _print_table(result.table.drop(columns=["system", "setting"], errors="ignore"))
    _print_evaluation_extras(result.table, result.differences, result.tuning, result.notes)
    print(f"Report: {result.report}")
    return 0
