"""Stored reference posteriors: gated NUTS runs of the cross-check problems, with provenance.

posteriordb keeps model, data and reference posterior apart and stores each reference with how
it was made; this module does the same for the cross-check problems of `validation.checks.registry`.
A reference is two small files in ``validation/checks/reference_posteriors/``:

- ``NAME.npz``: for each compared group of identifiable quantities, the ArviZ summaries of the
  full NUTS draws (``GROUP.mean``, ``.sd``, ``.mcse_mean``, ``.r_hat``, ``.ess_bulk``,
  ``.ess_tail``: float64 (Q,)) and evenly thinned draws ``GROUP.draws`` (float32 (chain, n, Q),
  for plots only; the comparisons use the summaries);
- ``NAME.json``: provenance: method, chains, warmup, draws, seed, target_accept, the gate
  diagnostics (divergences, E-BFMI per chain, the gates table), the package versions, the
  cross-check config, and the ``key`` (`ProblemKey.record`): what defines the problem, that is
  the model arguments (hyperparameters, sizes, K), the NUTS settings (chains, warmup, draws,
  seed, target_accept) and a description of every data array (kind, shape; a SHA-256 of the
  integer arrays); the data arrays themselves are stored in ``NAME.npz`` as
  ``problem.data.I`` (int64 / float64).

A stored reference is used only when it is for the same problem (`ProblemKey.differences`):
model arguments and NUTS settings equal, integer data equal, and float data equal within
`FLOAT_TOLERANCE` of the array's scale. Float data are compared within a tolerance, never by
their bits, because the simulated data come out of XLA, whose CPU code differs by instruction
set (AVX-512, AVX2, AVX, SSE4.2; and other processors): the same seed gives float data that
differ in the last bits (measured: at most 1.8e-15 absolute on values of order 1, 304 ulp of
a value near 0, for the MCMC-FM design under ``XLA_FLAGS=--xla_cpu_max_isa=AVX``). A changed
simulation, data value, hyperparameter or NUTS setting is detected and NUTS is re-run (or, with
``reference="stored"``, a ValueError names what differs).

`load_reference(name)` reads one; `regenerate(name)` re-runs NUTS on the model's default
cross-check problem and rewrites the files; `nuts_reference` is what every cross-check calls
(`validation.checks.crosscheck.exact_crosscheck` / `vi_crosscheck` consume its result).

Source: project addition (validation level 2; posteriordb).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from validation.checks.gates import QuantitySummary, nuts_gates, summarize

__all__ = [
    "REFERENCE_DIR",
    "Reference",
    "NutsSettings",
    "FLOAT_TOLERANCE",
    "ProblemKey",
    "problem_key",
    "nuts_reference",
    "from_run",
    "stored_names",
    "load_reference",
    "save_reference",
    "thin",
]

REFERENCE_DIR = Path(__file__).resolve().parent / "reference_posteriors"
THIN_BUDGET = 20_000  # float32 values of thinned draws kept per group (80 kB); plots only
MIN_THIN = 5  # draws per chain kept at least
KEY_VERSION = 2  # 1: SHA-256 of the float data's bits (refused on another CPU); 2: `ProblemKey`
# Float data of a stored problem match when max |stored - here| <= FLOAT_TOLERANCE * max(1, max |stored|).
# Why this value: rounding differences between XLA CPU instruction sets grow like (operations per
# value) x (a few ulp): measured at most 1.8e-15 absolute on values of order 1 (2e-16 = one float64
# ulp at 1); a simulation ~1e3 operations deep would still stay below ~1e-12. A different problem
# moves data by far more than 1e-8 of their scale (a new seed: O(1); one changed entry: its own
# size), and a change below 1e-8 of the data's scale moves every posterior mean by a negligible
# fraction of its Monte Carlo standard error (MCSE ~1e-2 posterior sd), so that NUTS run is still
# the reference for it.
FLOAT_TOLERANCE = 1e-8


@dataclass(frozen=True)
class NutsSettings:
    """The NUTS run of a cross-check, in the one vocabulary of the cross-check configs.

    Parameters
    ----------
    chains : int
        Number of chains.
    warmup : int
        Warmup (adaptation) iterations per chain.
    draws : int
        Kept draws per chain.
    seed : int
        Seed of the run.
    target_accept : float, default 0.8
        NUTS target acceptance probability.
    sampler : str, default "numpyro"
        The implementation ("numpyro", or "pymc+numpyro" for PyMC programs sampled by NumPyro).

    Raises
    ------
    None of its own (a frozen dataclass; the values are not checked).

    Source: project addition.
    """

    chains: int
    warmup: int
    draws: int
    seed: int
    target_accept: float = 0.8
    sampler: str = "numpyro"

    @classmethod
    def of(cls, config, *, sampler: str = "numpyro") -> "NutsSettings":
        """Read ``num_chains``, ``num_warmup``, ``num_samples``, ``seed`` and (default 0.8)
        ``target_accept`` from a cross-check config.

        Parameters
        ----------
        config : object
            A cross-check config with those attributes.
        sampler : str, default "numpyro"
            The implementation's name (keyword-only).

        Returns
        -------
        NutsSettings
            The settings, cast to int / float.

        Raises
        ------
        AttributeError
            ``config`` lacks one of ``num_chains``, ``num_warmup``, ``num_samples``, ``seed``.

        Source: project addition.
        """
        return cls(int(config.num_chains), int(config.num_warmup), int(config.num_samples), int(config.seed),
                   float(getattr(config, "target_accept", 0.8)), sampler)

    def line(self) -> str:
        """One human-readable line for reports.

        Returns
        -------
        str
            E.g. ``"4 chains x (1000 warmup + 1000 draws), seed 0, target accept 0.8, numpyro"``.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return (f"{self.chains} chains x ({self.warmup} warmup + {self.draws} draws), seed {self.seed}, "
                f"target accept {self.target_accept}, {self.sampler}")


@dataclass(frozen=True)
class Reference:
    """A NUTS reference posterior on the compared quantities, fresh or stored.

    Made by `from_run` (fresh) or `load_reference` (stored).

    Parameters
    ----------
    name : str
        The reference's name (the stored files' stem, e.g. "hpf", "hpf-small").
    summary : dict group name -> validation.checks.gates.QuantitySummary
        ArviZ summaries of the full draws of each group.
    draws : dict group name -> numpy.ndarray, shape (chain, n, Q), float
        The draws (all of them when fresh; thinned, float32, when stored: plots only).
    divergences : int
        Divergent transitions of the run that made it.
    bfmi : numpy.ndarray, shape (chain,), float64
        E-BFMI of each chain.
    seconds : float
        Wall-clock seconds of the run that made it.
    settings : NutsSettings
        The NUTS run's settings.
    key : ProblemKey
        The problem it is for (`problem_key`).
    source : str, default "fresh NUTS run"
        "fresh NUTS run" or the stored ``.npz`` file's path.
    provenance : dict, default {}
        The stored JSON (empty when fresh).
    idata : arviz.InferenceData, optional
        The run's draws (None when stored).

    Raises
    ------
    None of its own (a frozen dataclass).

    Source: project addition.
    """

    name: str
    summary: dict
    draws: dict = field(repr=False)
    divergences: int
    bfmi: np.ndarray = field(repr=False)
    seconds: float
    settings: NutsSettings
    key: "ProblemKey" = field(repr=False)
    source: str = "fresh NUTS run"
    provenance: dict = field(default_factory=dict, repr=False)
    idata: object = field(default=None, repr=False)

    @property
    def stored(self) -> bool:
        """True when the reference was read from files (it has no InferenceData).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return self.idata is None

    def gates(self, groups=None):
        """`validation.checks.gates.nuts_gates` on the summaries of ``groups``.

        Parameters
        ----------
        groups : iterable of str, optional
            The groups to gate (default every group of ``summary``).

        Returns
        -------
        validation.checks.gates.GateResult
            The gates, with the reference's divergences and E-BFMI.

        Raises
        ------
        KeyError
            A group that is not in ``summary``.
        ValueError
            ``groups`` is empty.

        Source: project addition (validation level 2).
        """
        groups = list(self.summary) if groups is None else list(groups)
        return nuts_gates({g: self.summary[g] for g in groups}, divergences=self.divergences, bfmi=self.bfmi)

    def line(self) -> str:
        """The NUTS line of a cross-check report.

        Returns
        -------
        str
            The settings' line, seconds, divergences and origin (fresh run, or the stored file and
            when it was made).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        origin = "fresh run" if not self.stored else f"stored reference {Path(self.source).name}"
        when = f", made {self.provenance.get('created', '?')}" if self.stored else ""
        return (f"{self.settings.line()}; {self.seconds:.1f} s; {self.divergences} divergences; "
                f"{origin}{when}")


def _as_key_array(a):
    """None, or ``a`` as a C-contiguous int64 (integer / boolean) or float64 array."""
    if a is None:
        return None
    if hasattr(a, "toarray"):
        a = a.toarray()
    a = np.asarray(a)
    if a.dtype.kind in "iub":
        return np.ascontiguousarray(a, dtype=np.int64)
    if a.dtype.kind == "f":
        return np.ascontiguousarray(a, dtype=np.float64)
    raise TypeError(f"problem data must be integer, boolean or float arrays, got dtype {a.dtype}")


@dataclass(frozen=True, eq=False)
class ProblemKey:
    """What defines a cross-check problem: its data, the model arguments and the NUTS settings.

    `record` is the JSON form stored with a reference (the arrays themselves go into the ``.npz``);
    `differences` says what separates two keys (empty: the same problem). Integers, model and
    settings must be equal; float arrays equal within `FLOAT_TOLERANCE` of their scale (see the
    module docstring for why not bits). Made by `problem_key` (or `from_record`).

    Parameters
    ----------
    data : tuple of (numpy.ndarray or None)
        The problem's arrays (int64 or float64, any shape), in the order the model module passes
        them.
    model : str
        Repr of the non-data model arguments (hyperparameters, K, sizes).
    nuts : dict
        The `NutsSettings` fields as a dict.

    Raises
    ------
    None of its own (a frozen dataclass; the arrays are not checked).

    Source: project addition.
    """

    data: tuple
    model: str
    nuts: dict

    def record(self) -> dict:
        """The JSON-ready description of the key.

        Returns
        -------
        dict
            ``version``, ``model``, ``nuts``, and ``data``: per data array None or
            ``{"kind": "integer", "shape", "sha256"}`` / ``{"kind": "float", "shape", "max_abs"}``
            (no hash of float bits: they differ across CPUs).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        arrays = []
        for a in self.data:
            if a is None:
                arrays.append(None)
            elif a.dtype.kind == "i":
                arrays.append({"kind": "integer", "shape": list(a.shape),
                               "sha256": hashlib.sha256(a.tobytes()).hexdigest()})
            else:
                finite = a[np.isfinite(a)]
                arrays.append({"kind": "float", "shape": list(a.shape),
                               "max_abs": float(np.max(np.abs(finite))) if finite.size else 0.0})
        return {"version": KEY_VERSION, "model": self.model, "nuts": _jsonable(self.nuts), "data": arrays}

    def differences(self, stored: "ProblemKey") -> list[str]:
        """What differs between this problem and a stored reference's.

        Float arrays match with the same NaN positions and max |stored - here| <= `FLOAT_TOLERANCE`
        * max(1, max |stored|); integer arrays, model arguments and NUTS settings must be equal.

        Parameters
        ----------
        stored : ProblemKey
            A stored reference's key.

        Returns
        -------
        list of str
            One phrase per difference; [] when they are the same problem.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        out = []
        if self.model != stored.model:
            out.append(f"model arguments: stored {stored.model}, here {self.model}")
        mine, theirs = _jsonable(self.nuts), _jsonable(stored.nuts)
        for k in sorted(set(mine) | set(theirs)):
            if mine.get(k) != theirs.get(k):
                out.append(f"NUTS setting {k}: stored {theirs.get(k)!r}, here {mine.get(k)!r}")
        if len(self.data) != len(stored.data):
            out.append(f"number of data arrays: stored {len(stored.data)}, here {len(self.data)}")
            return out
        for i, (a, b) in enumerate(zip(self.data, stored.data)):
            what = f"data array {i}"
            if (a is None) != (b is None):
                out.append(f"{what}: stored {'None' if b is None else 'an array'}, here {'None' if a is None else 'an array'}")
                continue
            if a is None:
                continue
            if a.dtype.kind != b.dtype.kind or a.shape != b.shape:
                out.append(f"{what}: stored {b.dtype} {b.shape}, here {a.dtype} {a.shape}")
            elif a.dtype.kind == "i":
                n = int(np.sum(a != b))
                if n:
                    out.append(f"{what} (integer {a.shape}): {n} of {a.size} entries differ")
            else:
                nan_a, nan_b = np.isnan(a), np.isnan(b)
                if not np.array_equal(nan_a, nan_b):
                    out.append(f"{what} (float {a.shape}): NaN at other positions")
                    continue
                ok = ~nan_b
                scale = max(1.0, float(np.max(np.abs(b[ok]), initial=0.0)))
                gap = float(np.max(np.abs(a[ok] - b[ok]), initial=0.0))
                if not gap <= FLOAT_TOLERANCE * scale:
                    out.append(f"{what} (float {a.shape}): differs by up to {gap:.3g} "
                               f"(tolerance {FLOAT_TOLERANCE:g} x scale {scale:.3g})")
        return out

    @classmethod
    def from_record(cls, record: dict, arrays: dict, *, source: str = "") -> "ProblemKey":
        """The key from its JSON record and the stored data arrays.

        Parameters
        ----------
        record : dict
            The stored `record`.
        arrays : dict str -> numpy.ndarray
            "problem.data.I" -> array, from the ``.npz``.
        source : str, default ""
            The file's name, for messages (keyword-only).

        Returns
        -------
        ProblemKey
            The key, its arrays as int64 / float64.

        Raises
        ------
        ValueError
            The record is of another version, or an array is missing.
        TypeError
            A stored array is neither integer, boolean nor float.

        Source: project addition.
        """
        if record.get("version") != KEY_VERSION:
            raise ValueError(f"{source}: stored problem key of version {record.get('version', 1)}, this "
                             f"package reads version {KEY_VERSION}; regenerate the reference "
                             f"(validation.models.catalog.regenerate_reference)")
        data = []
        for i, d in enumerate(record["data"]):
            if d is None:
                data.append(None)
                continue
            name = f"problem.data.{i}"
            if name not in arrays:
                raise ValueError(f"{source}: data array {name!r} of the problem key is missing")
            data.append(_as_key_array(arrays[name]))
        return cls(tuple(data), record["model"], dict(record["nuts"]))


def problem_key(data: tuple, model_args, settings: NutsSettings) -> ProblemKey:
    """The key that a stored reference must match.

    Parameters
    ----------
    data : tuple
        The problem's arrays (e.g. int32 (N,) indices and float64 (N,) values) or None entries;
        scipy.sparse matrices are made dense; integers / booleans are stored as int64, floats as
        float64.
    model_args : object
        The non-data model arguments (hyperparameters, K, ...); their repr is compared.
    settings : NutsSettings
        The NUTS run's settings.

    Returns
    -------
    ProblemKey
        The key.

    Raises
    ------
    TypeError
        An array that is not integer, boolean or float.

    Source: project addition.
    """
    return ProblemKey(tuple(_as_key_array(a) for a in data), repr(model_args),
                      {k: getattr(settings, k) for k in NutsSettings.__dataclass_fields__})


def thin(draws: np.ndarray, budget: int = THIN_BUDGET) -> np.ndarray:
    """Evenly spaced draws of every chain, at most ``budget`` values in all (at least `MIN_THIN` per chain).

    Parameters
    ----------
    draws : array_like, shape (chain, draw, Q), float
        MCMC draws.
    budget : int, default THIN_BUDGET
        Most values kept in all (chain x n x Q), unless `MIN_THIN` per chain needs more.

    Returns
    -------
    numpy.ndarray, shape (chain, n, Q), float32
        ``n = min(draw, max(MIN_THIN, budget // (chain Q)))`` evenly spaced draws of each chain.

    Raises
    ------
    ValueError
        ``draws`` is not 3-D.

    Source: project addition.
    """
    draws = np.asarray(draws)
    c, d, q = draws.shape
    n = int(min(d, max(MIN_THIN, budget // max(c * q, 1))))
    idx = np.linspace(0, d - 1, n).round().astype(int)
    return draws[:, idx, :].astype(np.float32)


def _versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("jax", "jaxlib", "numpyro", "arviz", "pymc", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def _paths(name: str, directory=None) -> tuple[Path, Path]:
    d = Path(directory) if directory is not None else REFERENCE_DIR
    return d / f"{name}.npz", d / f"{name}.json"


def stored_names(directory=None) -> list[str]:
    """Names of the references stored in a directory.

    Parameters
    ----------
    directory : str or pathlib.Path, optional
        Default `REFERENCE_DIR`.

    Returns
    -------
    list of str
        Sorted stems that have both a ``.json`` and a ``.npz`` file.

    Raises
    ------
    None of its own (a missing directory gives an empty list).

    Source: project addition.
    """
    d = Path(directory) if directory is not None else REFERENCE_DIR
    return sorted(p.stem for p in d.glob("*.json") if (d / f"{p.stem}.npz").exists())


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return float(x)
    if isinstance(x, (np.integer, int)) and not isinstance(x, bool):
        return int(x)
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if x is None or isinstance(x, str):
        return x
    return repr(x)


def save_reference(ref: Reference, *, config=None, directory=None) -> tuple[Path, Path]:
    """Write ``ref`` as ``NAME.npz`` + ``NAME.json`` (see the module docstring).

    Parameters
    ----------
    ref : Reference
        The reference to store (its ``draws`` are thinned by `thin`).
    config : object, optional
        The cross-check config, recorded as its repr and field values (keyword-only).
    directory : str or pathlib.Path, optional
        Default `REFERENCE_DIR` (created if missing; keyword-only).

    Returns
    -------
    tuple (pathlib.Path, pathlib.Path)
        The ``.npz`` and ``.json`` paths written.

    Raises
    ------
    OSError
        The files cannot be written.
    ValueError
        A group's draws are not (chain, draw, Q).
    KeyError
        ``ref.draws`` lacks a group of ``ref.summary``.

    Source: project addition.
    """
    npz, js = _paths(ref.name, directory)
    npz.parent.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for g, s in ref.summary.items():
        for f in QuantitySummary.FIELDS:
            arrays[f"{g}.{f}"] = np.asarray(getattr(s, f), np.float64)
        arrays[f"{g}.draws"] = thin(ref.draws[g])
    for i, a in enumerate(ref.key.data):
        if a is not None:
            arrays[f"problem.data.{i}"] = a
    np.savez_compressed(npz, **arrays)
    gate = ref.gates()
    fields = getattr(config, "__dataclass_fields__", None)
    meta = {
        "name": ref.name,
        "method": "nuts",
        **{k: getattr(ref.settings, k) for k in NutsSettings.__dataclass_fields__},
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": ref.seconds,
        "key": ref.key.record(),
        "groups": {g: {"Q": s.size, "n_chains": s.n_chains, "n_draws": s.n_draws} for g, s in ref.summary.items()},
        "diagnostics": {"divergences": ref.divergences, "bfmi": np.asarray(ref.bfmi).tolist(),
                        "gates_passed": gate.passed, "failures": gate.failures,
                        "gates_table": gate.table.to_dict(orient="records")},
        "versions": _versions(),
        "config": {"repr": repr(config), **({k: repr(getattr(config, k)) for k in fields} if fields else {})},
    }
    js.write_text(json.dumps(_jsonable(meta), indent=1) + "\n")
    return npz, js


def load_reference(name: str, directory=None) -> Reference:
    """Read a stored reference.

    Parameters
    ----------
    name : str
        The reference's name (e.g. "hpf", "mcmc-fm").
    directory : str or pathlib.Path, optional
        Default `REFERENCE_DIR`.

    Returns
    -------
    Reference
        The stored summaries, thinned draws (float32), diagnostics, settings, key and provenance
        (``idata`` None).

    Raises
    ------
    FileNotFoundError
        ``NAME.npz`` or ``NAME.json`` is not in the directory.
    ValueError
        Its problem key is of another version or incomplete.

    Source: project addition.
    """
    npz, js = _paths(name, directory)
    if not (npz.exists() and js.exists()):
        raise FileNotFoundError(f"no stored reference {name!r} in {npz.parent} (regenerate it with "
                                f"validation.models.catalog.regenerate_reference({name!r}))")
    meta = json.loads(js.read_text())
    summary, draws = {}, {}
    with np.load(npz) as f:
        for g, info in meta["groups"].items():
            summary[g] = QuantitySummary(**{k: f[f"{g}.{k}"] for k in QuantitySummary.FIELDS},
                                         n_chains=int(info["n_chains"]), n_draws=int(info["n_draws"]))
            draws[g] = f[f"{g}.draws"]
        key = ProblemKey.from_record(meta["key"], {k: f[k] for k in f.files if k.startswith("problem.data.")},
                                     source=str(npz))
    settings = NutsSettings(**{k: meta[k] for k in NutsSettings.__dataclass_fields__})
    return Reference(name, summary, draws, int(meta["diagnostics"]["divergences"]),
                     np.asarray(meta["diagnostics"]["bfmi"], np.float64), float(meta["seconds"]), settings,
                     key, source=str(npz), provenance=meta)


def nuts_reference(name: str, key: ProblemKey, settings: NutsSettings, run: Callable, quantities: Callable, *,
                   reference: str | None = None, directory=None) -> Reference:
    """The NUTS reference of a cross-check: stored when it matches, else a fresh run.

    A stored reference matches when `ProblemKey.differences` finds nothing (floats within
    `FLOAT_TOLERANCE`); the files searched are ``NAME`` and ``NAME-*`` (a model may store several
    problems, e.g. "hpf" for the default cross-check and "hpf-small" for the default test suite's).

    Parameters
    ----------
    name : str
        The model's reference name.
    key : ProblemKey
        `problem_key` of the problem.
    settings : NutsSettings
        The NUTS settings of a fresh run.
    run : callable
        ``run() -> validation.checks.crosscheck.NutsRun``, called only when a fresh run is needed.
    quantities : callable
        ``quantities(idata) -> dict group -> draws (chain, draw, Q)``.
    reference : {None, "stored", "rerun"}, optional
        "stored" (raise when no stored reference matches ``key``), "rerun" (always run NUTS), or None
        (stored when one matches, else run). Keyword-only.
    directory : str or pathlib.Path, optional
        Where the stored references are (default `REFERENCE_DIR`; keyword-only).

    Returns
    -------
    Reference
        A matching stored reference, or a fresh one (`from_run`).

    Raises
    ------
    ValueError
        ``reference`` is another value; or ``reference="stored"`` and none matches (the message
        names what differs from each stored candidate); or a stored key of another version.

    Source: project addition.
    """
    if reference not in (None, "stored", "rerun"):
        raise ValueError(f"reference must be 'stored', 'rerun' or None, got {reference!r}")
    if reference != "rerun":
        candidates = [n for n in stored_names(directory) if n == name or n.startswith(name + "-")]
        why = {}
        for n in candidates:
            stored = load_reference(n, directory)
            why[n] = key.differences(stored.key)
            if not why[n]:
                return stored
        if reference == "stored":
            why = ("none is stored" if not candidates else
                   "the problem (data, model or NUTS settings) differs from each stored one: "
                   + "; ".join(f"{n}: {', '.join(d[:3])}{' ...' if len(d) > 3 else ''}" for n, d in why.items()))
            raise ValueError(f"reference='stored': no stored reference {name!r} for this problem: {why}; "
                             f"regenerate with validation.models.catalog.regenerate_reference")
    return from_run(name, run(), quantities, settings, key)


def from_run(name: str, nuts, quantities: Callable, settings: NutsSettings, key: dict) -> Reference:
    """A fresh `Reference` from a finished NUTS run.

    Parameters
    ----------
    name : str
        The reference's name.
    nuts : validation.checks.crosscheck.NutsRun
        The finished run.
    quantities : callable
        ``quantities(idata) -> dict group -> draws (chain, draw, Q)``.
    settings : NutsSettings
        The run's settings.
    key : ProblemKey
        The problem's key (the annotation says dict).

    Returns
    -------
    Reference
        Summaries of the full draws, the draws, the run's diagnostics and ``idata``.

    Raises
    ------
    ValueError
        A group's draws are not 3-D.

    Source: project addition.
    """
    draws = quantities(nuts.idata)
    return Reference(name, {g: summarize(d) for g, d in draws.items()}, draws, nuts.divergences,
                     np.asarray(nuts.bfmi), nuts.seconds, settings, key, idata=nuts.idata)


def agreement(fresh: Reference, stored: Reference, *, false_alarm: float = 0.01) -> pd.DataFrame:
    """Do two NUTS references of the same problem agree within Monte Carlo error?

    For every group, `validation.checks.crosscheck.compare_exact`'s statistic on the summaries (Bonferroni
    threshold for ``false_alarm`` per group).

    Parameters
    ----------
    fresh, stored : Reference
        The two references (``stored`` has at least the groups of ``fresh``).
    false_alarm : float, default 0.01
        False-alarm probability per group (keyword-only).

    Returns
    -------
    pandas.DataFrame
        `compare_exact`'s table (quantity, Q, max_z, threshold, n_z_above_3, median_sd_ratio) with a
        ``passed`` column (bool).

    Raises
    ------
    KeyError
        ``stored`` lacks a group of ``fresh``.

    Source: project addition.
    """
    from validation.checks.crosscheck import compare_exact

    verdict = compare_exact(fresh.summary, stored.summary, fresh.gates(), false_alarm=false_alarm)
    table = verdict.table.copy()
    table["passed"] = table.max_z <= table.threshold
    return table
