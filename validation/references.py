"""Stored reference posteriors: gated NUTS runs of the cross-check problems, with provenance.

posteriordb keeps model, data and reference posterior apart and stores each reference with how
it was made; this module does the same for the cross-check problems of `validation.registry`.
A reference is two small files in ``validation/reference_posteriors/``:

- ``NAME.npz``: for each compared group of identifiable quantities, the ArviZ summaries of the
  full NUTS draws (``GROUP.mean``, ``.sd``, ``.mcse_mean``, ``.r_hat``, ``.ess_bulk``,
  ``.ess_tail``: float64 (Q,)) and evenly thinned draws ``GROUP.draws`` (float32 (chain, n, Q),
  for plots only; the comparisons use the summaries);
- ``NAME.json``: provenance: method, chains, warmup, draws, seed, target_accept, the gate
  diagnostics (divergences, E-BFMI per chain, the gates table), the package versions, the
  cross-check config, and the ``key``: a SHA-256 hash of the simulated data together with the
  settings that define the NUTS run (model arguments, chains, warmup, draws, seed,
  target_accept). A stored reference is used only when its key equals the problem's key, so a
  changed simulation, hyperparameter or NUTS setting is detected and NUTS is re-run.

`load_reference(name)` reads one; `regenerate(name)` re-runs NUTS on the model's default
cross-check problem and rewrites the files; `nuts_reference` is what every cross-check calls
(`validation.crosscheck.exact_crosscheck` / `vi_crosscheck` consume its result).

Source: project addition (validation level 2; posteriordb).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from .gates import QuantitySummary, nuts_gates, summarize

__all__ = [
    "REFERENCE_DIR",
    "Reference",
    "NutsSettings",
    "data_hash",
    "problem_key",
    "nuts_reference",
    "from_run",
    "stored_names",
    "load_reference",
    "save_reference",
    "regenerate",
    "thin",
]

REFERENCE_DIR = Path(__file__).resolve().parent / "reference_posteriors"
THIN_BUDGET = 20_000  # float32 values of thinned draws kept per group (80 kB); plots only
MIN_THIN = 5  # draws per chain kept at least


@dataclass(frozen=True)
class NutsSettings:
    """The NUTS run of a cross-check, in the one vocabulary of the cross-check configs.

    ``chains``, ``warmup``, ``draws`` (kept per chain), ``seed``, ``target_accept``; ``sampler``
    names the implementation ("numpyro", or "pymc+numpyro" for PyMC programs sampled by NumPyro).
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
        ``target_accept`` from a cross-check config. Raises AttributeError when one is missing."""
        return cls(int(config.num_chains), int(config.num_warmup), int(config.num_samples), int(config.seed),
                   float(getattr(config, "target_accept", 0.8)), sampler)

    def line(self) -> str:
        """One human-readable line for reports."""
        return (f"{self.chains} chains x ({self.warmup} warmup + {self.draws} draws), seed {self.seed}, "
                f"target accept {self.target_accept}, {self.sampler}")


@dataclass(frozen=True)
class Reference:
    """A NUTS reference posterior on the compared quantities, fresh or stored.

    ``summary``: group -> `validation.gates.QuantitySummary` (of the full draws);
    ``draws``: group -> float (chain, n, Q) draws (all of them when fresh, thinned when stored);
    ``divergences`` (int), ``bfmi`` (float64 (chain,)), ``seconds`` (of the run that made it);
    ``settings``: `NutsSettings`; ``key``: the problem key (`problem_key`); ``source``: "fresh
    NUTS run" or the stored file's path; ``provenance``: the stored JSON (empty when fresh);
    ``idata``: the run's InferenceData (None when stored).
    Source: project addition.
    """

    name: str
    summary: dict
    draws: dict = field(repr=False)
    divergences: int
    bfmi: np.ndarray = field(repr=False)
    seconds: float
    settings: NutsSettings
    key: dict = field(repr=False)
    source: str = "fresh NUTS run"
    provenance: dict = field(default_factory=dict, repr=False)
    idata: object = field(default=None, repr=False)

    @property
    def stored(self) -> bool:
        return self.idata is None

    def gates(self, groups=None):
        """`validation.gates.nuts_gates` on the summaries of ``groups`` (default all)."""
        groups = list(self.summary) if groups is None else list(groups)
        return nuts_gates({g: self.summary[g] for g in groups}, divergences=self.divergences, bfmi=self.bfmi)

    def line(self) -> str:
        """The NUTS line of a cross-check report."""
        origin = "fresh run" if not self.stored else f"stored reference {Path(self.source).name}"
        when = f", made {self.provenance.get('created', '?')}" if self.stored else ""
        return (f"{self.settings.line()}; {self.seconds:.1f} s; {self.divergences} divergences; "
                f"{origin}{when}")


def data_hash(*arrays) -> str:
    """SHA-256 (hex) of arrays' shapes, dtypes (widened to float64 / int64) and bytes.

    Array-likes (numpy, jax, scipy.sparse via ``.toarray()``) are accepted; None is hashed as a
    marker. Float arrays are hashed as float64, integer and boolean ones as int64.
    Raises nothing of its own. Source: project addition.
    """
    h = hashlib.sha256()
    for a in arrays:
        if a is None:
            h.update(b"none;")
            continue
        if hasattr(a, "toarray"):
            a = a.toarray()
        a = np.asarray(a)
        a = a.astype(np.float64) if a.dtype.kind == "f" else a.astype(np.int64) if a.dtype.kind in "iub" else a
        h.update(f"{a.shape};{a.dtype.str};".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def problem_key(data: tuple, model_args, settings: NutsSettings) -> dict:
    """The key that a stored reference must match: ``data_sha256`` (`data_hash` of ``data``),
    ``model`` (repr of the non-data model arguments: hyperparameters, K, ...) and the NUTS
    ``settings``. ``data``: a tuple of arrays (e.g. int32 (N,) indices and float64 (N,) values).
    Raises nothing of its own. Source: project addition."""
    return {"data_sha256": data_hash(*data), "model": repr(model_args),
            "nuts": {k: getattr(settings, k) for k in NutsSettings.__dataclass_fields__}}


def thin(draws: np.ndarray, budget: int = THIN_BUDGET) -> np.ndarray:
    """Evenly spaced draws of every chain, at most ``budget`` values in all (at least `MIN_THIN`
    per chain), as float32 (chain, n, Q). ``draws``: float (chain, draw, Q). Raises ValueError
    when ``draws`` is not 3-D. Source: project addition."""
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
    """Names of the references stored in ``directory`` (default `REFERENCE_DIR`).
    Raises nothing of its own (a missing directory gives an empty list). Source: project addition."""
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
    """Write ``ref`` as ``NAME.npz`` + ``NAME.json`` (see the module docstring); returns the paths.

    ``config``: the cross-check config, recorded as its repr and field values. Raises OSError when
    the files cannot be written; ValueError when a group's draws are not (chain, draw, Q);
    KeyError when ``ref.draws`` lacks a group of ``ref.summary``. Source: project addition.
    """
    npz, js = _paths(ref.name, directory)
    npz.parent.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for g, s in ref.summary.items():
        for f in QuantitySummary.FIELDS:
            arrays[f"{g}.{f}"] = np.asarray(getattr(s, f), np.float64)
        arrays[f"{g}.draws"] = thin(ref.draws[g])
    np.savez_compressed(npz, **arrays)
    gate = ref.gates()
    fields = getattr(config, "__dataclass_fields__", None)
    meta = {
        "name": ref.name,
        "method": "nuts",
        **{k: getattr(ref.settings, k) for k in NutsSettings.__dataclass_fields__},
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": ref.seconds,
        "key": ref.key,
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
    """The stored reference ``name`` (e.g. "hpf", "mcmc-fm"). Raises FileNotFoundError when it is
    not stored. Source: project addition."""
    npz, js = _paths(name, directory)
    if not (npz.exists() and js.exists()):
        raise FileNotFoundError(f"no stored reference {name!r} in {npz.parent} (regenerate it with "
                                f"validation.references.regenerate({name!r}))")
    meta = json.loads(js.read_text())
    summary, draws = {}, {}
    with np.load(npz) as f:
        for g, info in meta["groups"].items():
            summary[g] = QuantitySummary(**{k: f[f"{g}.{k}"] for k in QuantitySummary.FIELDS},
                                         n_chains=int(info["n_chains"]), n_draws=int(info["n_draws"]))
            draws[g] = f[f"{g}.draws"]
    settings = NutsSettings(**{k: meta[k] for k in NutsSettings.__dataclass_fields__})
    return Reference(name, summary, draws, int(meta["diagnostics"]["divergences"]),
                     np.asarray(meta["diagnostics"]["bfmi"], np.float64), float(meta["seconds"]), settings,
                     meta["key"], source=str(npz), provenance=meta)


def nuts_reference(name: str, key: dict, settings: NutsSettings, run: Callable, quantities: Callable, *,
                   reference: str | None = None, directory=None) -> Reference:
    """The NUTS reference of a cross-check: stored when it matches, else a fresh run.

    ``key``: `problem_key` of the problem; a stored reference matches when its key is equal; the
    files searched are ``NAME`` and ``NAME-*`` (a model may store several problems, e.g. "hpf" for
    the default cross-check and "hpf-small" for the default test suite's);
    ``run()`` -> `validation.crosscheck.NutsRun`;
    ``quantities(idata)`` -> dict group -> draws (chain, draw, Q). ``reference``: "stored" (raise
    ValueError when no stored reference matches ``key``), "rerun" (always run NUTS), or None
    (stored when one matches, else run). Raises ValueError on another value.
    Source: project addition.
    """
    if reference not in (None, "stored", "rerun"):
        raise ValueError(f"reference must be 'stored', 'rerun' or None, got {reference!r}")
    if reference != "rerun":
        want = json.loads(json.dumps(_jsonable(key)))
        candidates = [n for n in stored_names(directory) if n == name or n.startswith(name + "-")]
        for n in candidates:
            stored = load_reference(n, directory)
            if stored.key == want:
                return stored
        if reference == "stored":
            why = ("none is stored" if not candidates else
                   f"the problem key (data, model or NUTS settings) differs from those of {candidates}")
            raise ValueError(f"reference='stored': no stored reference {name!r} for this problem: {why}; "
                             f"regenerate with validation.references.regenerate")
    return from_run(name, run(), quantities, settings, key)


def from_run(name: str, nuts, quantities: Callable, settings: NutsSettings, key: dict) -> Reference:
    """A fresh `Reference` from a finished `validation.crosscheck.NutsRun` ``nuts`` and the
    function ``quantities(idata)`` -> dict group -> draws (chain, draw, Q). Raises ValueError when
    a group's draws are not 3-D. Source: project addition."""
    draws = quantities(nuts.idata)
    return Reference(name, {g: summarize(d) for g, d in draws.items()}, draws, nuts.divergences,
                     np.asarray(nuts.bfmi), nuts.seconds, settings, key, idata=nuts.idata)


def regenerate(name: str, *, directory=None, progress: bool = False) -> Reference:
    """Re-run NUTS on the default cross-check problem of reference ``name`` and rewrite its files.

    The problem comes from `validation.registry` (the `ReferenceSpec` named ``name``).
    Returns the fresh `Reference`. Raises KeyError for an unknown name. Source: project addition.
    """
    from . import registry

    spec = registry.by_reference(name)
    config = spec.default_config()
    ref = registry.resolve(spec.nuts_reference)(config, reference="rerun", progress=progress)
    ref = dataclasses.replace(ref, name=name)
    save_reference(ref, config=config, directory=directory)
    return ref


def agreement(fresh: Reference, stored: Reference, *, false_alarm: float = 0.01) -> pd.DataFrame:
    """Do two NUTS references of the same problem agree within Monte Carlo error?

    For every group, `validation.crosscheck.compare_exact`'s statistic on the summaries (Bonferroni
    threshold for ``false_alarm`` per group). Returns that table (quantity, Q, max_z, threshold,
    n_z_above_3, median_sd_ratio) with a ``passed`` column. Source: project addition.
    """
    from .crosscheck import compare_exact

    verdict = compare_exact(fresh.summary, stored.summary, fresh.gates(), false_alarm=false_alarm)
    table = verdict.table.copy()
    table["passed"] = table.max_z <= table.threshold
    return table
