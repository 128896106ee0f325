"""Recall@N against the number of entries observed: seed 002 fig. 2 (top) and fig. 3.

`recall_curves` / `sibm_recall_curves` on the SIBM protocol (`validation.evaluation.implicit_protocols.split_sibm`)
and on the sec. 4 synthetic matrix (`sec4_synthetic`, `binary_split`), as CSV, PNG and Markdown. Split
out of `validation.evaluation.implicit_eval`, which re-exports every public name here (behaviour unchanged).

Source: ``002_5408d341cb9fc544.txt`` sec. 4, figs. 2 and 3.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from validation.evaluation import metrics
from validation.data.datasets import ImplicitSplit, IndexedRatings
from validation.evaluation.implicit_protocols import _hold_out_one_per_row, recall_at, split_sibm

__all__ = ["binary_split", "sec4_synthetic", "sibm_recall_curves", "recall_curves", "RecallCurves",
           "CURVE_DEFAULTS", "CURVE_DATA"]

# ---------------------------------------------------------------------------
# recall@N versus the number of entries observed (seed 002 figs. 2 and 3)
# ---------------------------------------------------------------------------

#: Defaults of `sibm_recall_curves` / `recall_curves`: D = 10 (seed 002 sec. 4), a budget of
#: ``passes`` x I J entries (I J = one batch sweep), ``n_points`` log-spaced recall evaluations per
#: SVI run, fixed minibatch size S = max(I, J) for the strategy comparison (the seed's minimum S;
#: it selects S per strategy by cross-validation instead, which we cannot afford), the automatic S
#: (13) capped at ``auto_S_max`` for "SIBM-auto". On the SIBM split of MovieLens 100K (I J ~ 0.9e6)
#: and the 1000 x 1000 synthetic matrix a full run is a few minutes on 2 cores.
CURVE_DEFAULTS = {"D": 10, "passes": 10, "n_points": 10, "S": None, "auto_S_max": 20000}

_STRATEGY_LABEL = {"uniform": "S-Uniform", "balanced": "S-Balanced", "biased": "S-Biased"}


def binary_split(X, seed: int = 0, min_ones: int = 10, dtype=np.float64) -> ImplicitSplit:
    """Seed 002 sec. 4 hold-out on a given binary matrix: keep the rows with >= ``min_ones`` ones,
    move one random one of each kept row to the test set (the draw of `split_sibm`, step 5).

    Parameters
    ----------
    X : array-like, scipy.sparse matrix or Observations, shape (I0, J), 0/1
        The binary matrix: a dense array (bool/int/float), scipy.sparse, or `Observations` of the ones.
    seed : int, default 0
        Seeds the held-out draws (``numpy.random.default_rng(seed)``, rows in order).
    min_ones : int >= 2, default 10
        Rows with fewer ones are dropped.
    dtype : numpy float dtype, default numpy.float64
        Dtype of ``train.values``.

    Returns
    -------
    ImplicitSplit
        ``train`` (I, J) with I the kept rows (in their original order; all J columns kept),
        ``test_users`` = 0 .. I-1 (int64), ``test_items`` (I,) int64; ``indexed`` holds the ones (rating
        1) with ``user_ids`` the kept rows' original indices and ``item_ids`` = 0 .. J-1.

    Raises
    ------
    ValueError
        X not 2-D or not binary (`custom_inference.sibm.as_binary`); ``min_ones`` not an integer >= 2;
        no row with ``min_ones`` ones.

    Source: ``002_5408d341cb9fc544.txt`` sec. 4 (discard rows with fewer than 10 ones, move one random
    one of each row to the test set); applying it to any given matrix is a project addition.
    """
    from custom_inference.sibm import as_binary

    if isinstance(min_ones, bool) or int(min_ones) != min_ones or min_ones < 2:
        raise ValueError(f"min_ones must be an integer >= 2 (one one is held out), got {min_ones!r}")
    obs = as_binary(X)
    I0, J = obs.shape
    rows = np.asarray(obs.rows, np.int64)
    cols = np.asarray(obs.cols, np.int64)
    order = np.lexsort((cols, rows))
    rows, cols = rows[order], cols[order]
    count = np.bincount(rows, minlength=I0)
    keep_rows = np.flatnonzero(count >= min_ones)
    if keep_rows.size == 0:
        raise ValueError(f"X: no row has >= {min_ones} ones")
    row_map = np.full(I0, -1, np.int64)
    row_map[keep_rows] = np.arange(keep_rows.size)
    sel = row_map[rows] >= 0
    u, i = row_map[rows[sel]], cols[sel]
    I = keep_rows.size
    train, test_items = _hold_out_one_per_row(u, i, I, J, seed, dtype)
    frame = pd.DataFrame({"u": u, "i": i, "rating": np.ones(u.size), "timestamp": np.zeros(u.size, np.int64)})
    return ImplicitSplit(train=train, test_users=np.arange(I, dtype=np.int64), test_items=test_items,
                         indexed=IndexedRatings(frame=frame, user_ids=keep_rows, item_ids=np.arange(J, dtype=np.int64)))


def sec4_synthetic(I: int = 1000, J: int = 1000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The synthetic data of seed 002 sec. 4, dense: a data generator for evaluation, not a solver.

    ``ppl_models.sibm.simulate(key, I, J, **SEC4_SYNTHETIC)`` in float64 (D = 10, u_id, v_jd ~ N(0, 1),
    no biases, z = -7.5: about 98% zeros), with ``key = jax.random.PRNGKey(seed)``.

    Parameters
    ----------
    I : int >= 1, default 1000
        Rows.
    J : int >= 1, default 1000
        Columns.
    seed : int, default 0
        Seed of the PRNG key.

    Returns
    -------
    X : numpy.ndarray, shape (I, J), int8
        The 0/1 matrix.
    logits : numpy.ndarray, shape (I, J), float64
        U V^T + z, the truth an oracle ranks by.

    Raises
    ------
    ValueError
        Not of its own: `ppl_models.sibm.simulate` raises it for a size that is not a positive integer.

    Source: ``002_5408d341cb9fc544.txt`` sec. 4 (D = 10, u_id, v_jd ~ N(0, 1), z = -7.5, "about 98%
    sparsity").
    """
    import jax

    from ppl_models.sibm import SEC4_SYNTHETIC, logits, simulate

    with jax.enable_x64(True):
        params, X = simulate(jax.random.PRNGKey(int(seed)), I, J, **SEC4_SYNTHETIC)
        eta = np.asarray(logits(params["U"], params["V"], params["z"]), np.float64)
    return np.asarray(X, np.int8), eta


def _geometric_checkpoints(first: float, last: float, n_points: int) -> np.ndarray:
    if n_points <= 1 or last <= first:
        return np.array([float(last)])
    return np.geomspace(first, last, n_points)


def sibm_recall_curves(
    split: ImplicitSplit,
    *,
    D: int = CURVE_DEFAULTS["D"],
    strategies: Sequence[str] = ("uniform", "balanced", "biased"),
    S: int | None = CURVE_DEFAULTS["S"],
    passes: float = CURVE_DEFAULTS["passes"],
    n_points: int = CURVE_DEFAULTS["n_points"],
    auto: bool = True,
    auto_S_max: int = CURVE_DEFAULTS["auto_S_max"],
    batch: bool = True,
    references: Mapping[str, metrics.ScoreFn] | None = None,
    seed: int = 0,
    n: int = 10,
    dtype=np.float32,
    hyper=None,
    progress: bool = False,
) -> pd.DataFrame:
    """Recall@N against the number of entries of X observed: seed 002 fig. 2 (top) and fig. 3.

    - fig. 2 (top): SVI (Algorithm 1) with each sub-sampling strategy of sec. 2.3 at the same fixed
      minibatch size S (default max(I, J));
    - fig. 3: "SIBM-auto" (S-Biased with the automatic S of eq. 13, S_min = max(I, J), capped at
      ``auto_S_max``) against batch VB, whose every sweep touches all I J entries;
    - ``references``: constant systems (popularity, the true logits of a synthetic matrix), drawn
      as horizontal lines.

    An SVI run samples up to ``passes * I * J`` cells; recall is evaluated at ``n_points`` budgets
    spaced geometrically from the first minibatch to the end (at the first minibatch that reaches
    each), and at the end. Batch VB runs ``ceil(passes)`` sweeps (no tolerance stop), recall after each.

    Parameters
    ----------
    split : ImplicitSplit
        From `split_sibm` or `binary_split`; the fit sees ``split.train`` (I, J) only.
    D : int >= 1, default 10
        Latent factors (biases on top, `ppl_models.sibm.SIBMHyper` defaults unless ``hyper``).
    strategies : sequence of {"uniform", "balanced", "biased"}, default all three
        The fig. 2 runs.
    S : int >= 1, optional
        Fixed minibatch size of the strategy runs (None: max(I, J)).
    passes : float > 0, default 10
        The budget in units of I J entries.
    n_points : int >= 1, default 10
        Recall evaluations per SVI run.
    auto : bool, default True
        Include the fig. 3 "SIBM-auto" run.
    auto_S_max : int, default 20000
        Cap of SIBM-auto's automatic S.
    batch : bool, default True
        Include the fig. 3 batch VB run.
    references : mapping of str to callable, optional
        Label -> score function ``(B,) int users -> (B, J)`` (scored once).
    seed : int, default 0
        ``jax.random.PRNGKey(seed)`` initializes every run (the same initial q for all).
    n : int >= 1, default 10
        N of recall@N (seed 002: 10).
    dtype : numpy float dtype, default numpy.float32
        float32 (fast) or float64, for the training matrix and the fits.
    hyper : ppl_models.sibm.SIBMHyper, optional
        Priors (None: the defaults).
    progress : bool, default False
        Print a line per run.

    Returns
    -------
    pandas.DataFrame
        One row per evaluation: ``method`` ("S-Uniform", "S-Balanced", "S-Biased",
        "SIBM-auto", "batch VB", or a reference label), ``figure`` ("fig2", "fig3" or "reference"; the
        fixed-S S-Biased run is also drawn in fig. 3 as SIBM with a hand-picked S), ``iteration``
        (minibatches or sweeps so far), ``entries`` (cells observed so far: sum of S, or sweeps x I J;
        NaN for references), ``recall`` (recall@N in [0, 1]), ``S`` (current minibatch size; NaN for
        batch), ``seconds`` (wall time of the run so far, recall evaluations excluded, the first
        call's compilation included), ``n`` (N). attrs: I, J, nnz, D, budget.

    Raises
    ------
    ValueError
        Unknown strategy, passes not finite and > 0, n_points not an integer >= 1, S not a positive
        integer, nothing to run; what the solvers raise (e.g. a bad ``D`` or ``hyper``).

    Source: 002_5408d341cb9fc544.txt sec. 4.1 (fig. 2 top), sec. 4.3 (fig. 3), recall@N of sec. 4.
    """
    import jax

    from custom_inference import sibm as sibm_solver
    from ppl_models.sibm import SIBMHyper

    unknown = [s for s in strategies if s not in _STRATEGY_LABEL]
    if unknown:
        raise ValueError(f"strategies: unknown {unknown}; known {list(_STRATEGY_LABEL)}")
    if not (np.isfinite(passes) and passes > 0):
        raise ValueError(f"passes must be > 0, got {passes!r}")
    if isinstance(n_points, bool) or int(n_points) != n_points or n_points < 1:
        raise ValueError(f"n_points must be an integer >= 1, got {n_points!r}")
    if not strategies and not auto and not batch and not references:
        raise ValueError("strategies: nothing to run (no strategy, auto=False, batch=False, no references)")
    hyper = SIBMHyper() if hyper is None else hyper
    train = split.train.astype(dtype)
    I, J = train.shape
    S_fixed = max(I, J) if S is None else S
    if isinstance(S_fixed, bool) or int(S_fixed) != S_fixed or S_fixed < 1:
        raise ValueError(f"S must be a positive integer or None, got {S!r}")
    S_fixed = int(S_fixed)
    budget = int(math.ceil(passes * I * J))
    key = jax.random.PRNGKey(int(seed))
    rows: list[dict] = []

    def recall_of(score_fn) -> float:
        return recall_at(score_fn, split, n=n)

    def svi_run(label: str, figure: str, strategy: str, size) -> None:
        first = S_fixed if size != "auto" else max(I, J)
        marks = _geometric_checkpoints(first, budget, int(n_points))
        state = {"next": 0, "eval": 0.0, "t0": time.perf_counter()}

        def callback(t, st, n_cells):
            if (state["next"] < marks.size and n_cells >= marks[state["next"]]) or n_cells >= budget:
                e0 = time.perf_counter()
                rec = recall_of(lambda users: sibm_solver.score_users(st, users))
                rows.append({"method": label, "figure": figure, "iteration": t + 1, "entries": float(n_cells),
                             "recall": rec, "S": float(st.S) if size == "auto" else float(size),
                             "seconds": e0 - state["t0"] - state["eval"], "n": n})
                state["eval"] += time.perf_counter() - e0
                while state["next"] < marks.size and marks[state["next"]] <= n_cells:
                    state["next"] += 1

        n_iter = budget // min(first, budget) + 2
        sibm_solver.fit_svi(key, train, D, hyper, n_iter=n_iter, progress=False, strategy=strategy, S=size,
                            S_min=first if size == "auto" else None, S_max=auto_S_max, max_cells=budget,
                            callback=callback)
        if progress:
            last = rows[-1]
            print(f"[recall curves] {label}: recall@{n}={last['recall']:.4f} after {last['entries']:.3g} entries, "
                  f"{last['seconds']:.1f}s", flush=True)

    for strategy in strategies:
        svi_run(_STRATEGY_LABEL[strategy], "fig2", strategy, S_fixed)
    if auto:
        svi_run("SIBM-auto", "fig3", "biased", "auto")
    if batch:
        t0 = time.perf_counter()
        spent = {"eval": 0.0}

        def batch_callback(t, state):
            e0 = time.perf_counter()
            rec = recall_of(lambda users: sibm_solver.score_users(state, users))
            rows.append({"method": "batch VB", "figure": "fig3", "iteration": t + 1, "entries": float((t + 1) * I * J),
                         "recall": rec, "S": np.nan, "seconds": e0 - t0 - spent["eval"], "n": n})
            spent["eval"] += time.perf_counter() - e0

        sibm_solver.fit(key, train, D, hyper, max_iter=int(math.ceil(passes)), tol=0.0, progress=False,
                        callback=batch_callback)
        if progress:
            print(f"[recall curves] batch VB: recall@{n}={rows[-1]['recall']:.4f} after {rows[-1]['entries']:.3g} "
                  f"entries, {rows[-1]['seconds']:.1f}s", flush=True)
    for label, score_fn in (references or {}).items():
        rows.append({"method": label, "figure": "reference", "iteration": 0, "entries": np.nan,
                     "recall": recall_of(score_fn), "S": np.nan, "seconds": 0.0, "n": n})
    out = pd.DataFrame(rows, columns=["method", "figure", "iteration", "entries", "recall", "S", "seconds", "n"])
    out.attrs.update(I=I, J=J, nnz=int(train.nnz), D=int(D), budget=budget)
    return out


@dataclass
class RecallCurves:
    """What `recall_curves` returns.

    Parameters
    ----------
    curves : pandas.DataFrame
        The rows of `sibm_recall_curves` for every data set, with a ``data`` column in front.
    summary : pandas.DataFrame
        The last point of each (data, method): data, method, figure, ``recall``, ``entries``, ``seconds``.
    plots : dict of str to pathlib.Path, default {}
        Data name -> PNG path (empty without ``out_dir``).
    csv : pathlib.Path or None, default None
        Path of ``recall_curves.csv`` (None without ``out_dir``).
    report : pathlib.Path or None, default None
        Path of ``recall_curves.md`` (None without ``out_dir``).

    Raises
    ------
    None on construction (a dataclass).

    Source: ``002_5408d341cb9fc544.txt`` sec. 4, figs. 2 and 3 (the curves); the container is a project
    addition.
    """

    curves: pd.DataFrame
    summary: pd.DataFrame
    plots: dict = field(default_factory=dict)
    csv: Path | None = None
    report: Path | None = None


CURVE_DATA = ("ratings", "sec4-synthetic")


def recall_curves(
    df=None,
    data: Sequence[str] = CURVE_DATA,
    *,
    seed: int = 0,
    synthetic_shape: tuple[int, int] = (1000, 1000),
    out_dir=None,
    progress: bool = False,
    **curve_kwargs,
) -> RecallCurves:
    """Seed 002 figs. 2 (top) and 3 on the given ratings and on the sec. 4 synthetic matrix.

    Parameters
    ----------
    df : pandas.DataFrame, optional
        Ratings table (`validation.data.datasets.load_movielens`), split by `split_sibm` (ratings >= 4,
        1000 most popular columns, rows with >= 10 ones, one held-out one per row); needed for "ratings".
    data : sequence of str, default ("ratings", "sec4-synthetic")
        Names among `CURVE_DATA`: ``"ratings"`` (``df`` under the SIBM protocol) and ``"sec4-synthetic"``
        (`sec4_synthetic` of ``synthetic_shape`` with seed ``seed``, then `binary_split`).
    seed : int, default 0
        Seeds the splits, the synthetic matrix and the fits.
    synthetic_shape : tuple of int, default (1000, 1000)
        (I, J) of the synthetic matrix.
    out_dir : str or path-like, optional
        Writes ``recall_curves.csv``, ``recall_curves_<data>.png`` (left: fig. 2 top, the strategies;
        right: fig. 3, SIBM-auto and S-Biased with fixed S against batch VB; dashed: popularity, and the
        true logits on synthetic data) and ``recall_curves.md`` there (created if missing).
    progress : bool, default False
        A line per run.
    **curve_kwargs
        Passed to `sibm_recall_curves` (D, strategies, S, passes, n_points, auto, auto_S_max, batch, n,
        dtype, hyper).

    Returns
    -------
    RecallCurves
        The curves of every data set, their last points, and the written files.

    Raises
    ------
    ValueError
        An unknown data name, "ratings" without ``df``, and what `split_sibm`, `sec4_synthetic`,
        `binary_split` and `sibm_recall_curves` raise.
    TypeError
        ``curve_kwargs`` holds a keyword `sibm_recall_curves` does not take (or one set here:
        references, seed, progress).
    OSError
        ``out_dir`` cannot be written.

    Source: ``002_5408d341cb9fc544.txt`` fig. 2 (top) and fig. 3, secs. 4.1 and 4.3 (recall@N of sec. 4).
    """
    unknown = [d for d in data if d not in CURVE_DATA]
    if unknown:
        raise ValueError(f"data: unknown {unknown}; known {list(CURVE_DATA)}")
    if "ratings" in data and df is None:
        raise ValueError("df: a ratings table is needed for data 'ratings'")
    frames = []
    for name in data:
        if name == "ratings":
            split = split_sibm(df, seed=seed)
            refs = {"popularity": metrics.popularity_score_fn(split.train)}
        else:
            X, eta = sec4_synthetic(*synthetic_shape, seed=seed)
            split = binary_split(X, seed=seed)
            truth = eta[split.indexed.user_ids]
            refs = {"popularity": metrics.popularity_score_fn(split.train),
                    "true logits": lambda users, truth=truth: truth[np.asarray(users)]}
        c = sibm_recall_curves(split, references=refs, seed=seed, progress=progress, **curve_kwargs)
        c.insert(0, "data", name)
        c.attrs = {}
        frames.append((name, c, split))
    curves = pd.concat([c for _, c, _ in frames], ignore_index=True)
    summary = (curves.groupby(["data", "method"], sort=False).tail(1)
               [["data", "method", "figure", "recall", "entries", "seconds"]].reset_index(drop=True))
    result = RecallCurves(curves=curves, summary=summary)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        result.csv = out / "recall_curves.csv"
        curves.to_csv(result.csv, index=False)
        for name, c, split in frames:
            result.plots[name] = _plot_recall_curves(c, name, split, out / f"recall_curves_{name}.png")
        from validation.checks.report import markdown_table

        lines = ["# Recall@N versus entries observed (seed 002 figs. 2 and 3)", "",
                 "Entries: cells of X sampled by SVI (sum of the minibatch sizes) or touched by batch VB "
                 "(I J per sweep). Seconds exclude the recall evaluations.", "",
                 markdown_table(summary), ""]
        lines += [f"![{name}](recall_curves_{name}.png)" for name in result.plots] + [""]
        result.report = out / "recall_curves.md"
        result.report.write_text("\n".join(lines))
    return result


def _plot_recall_curves(c: pd.DataFrame, name: str, split: ImplicitSplit, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = int(c["n"].iloc[0]) if len(c) else 10
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    panels = ((axes[0], "fig. 2 (top): sub-sampling strategies, fixed S", ["S-Uniform", "S-Balanced", "S-Biased"]),
              (axes[1], "fig. 3: SVI versus batch VB", ["SIBM-auto", "S-Biased", "batch VB"]))
    refs = c[c["figure"] == "reference"]
    for ax, title, methods in panels:
        for m in methods:
            sub = c[c["method"] == m]
            if len(sub):
                label = m if m != "S-Biased" or ax is axes[0] else "S-Biased, fixed S"
                ax.plot(sub["entries"], sub["recall"], marker="o", ms=3, label=label)
        for k, (_, r) in enumerate(refs.iterrows()):
            ax.axhline(r["recall"], ls="--", lw=1, color=f"C{7 + k}", label=r["method"])
        ax.set_xscale("log")
        ax.set_xlabel("entries of X observed")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel(f"recall@{n}")
    fig.suptitle(f"{name}: I = {split.n_users}, J = {split.n_items}, {split.train.nnz} training ones", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
