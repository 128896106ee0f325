"""The one module that builds and reads ArviZ objects.

Everything in factorbayes that touches ArviZ goes through here, so that moving
from ArviZ 0.23 (`InferenceData`) to ArviZ 1.x (`DataTree`) is a change to this
file only. Solvers build their results with `to_inference_data`; validation reads
draws with `group_arrays` and computes diagnostics with `diagnostics` and
`mcse_mean`; plots go through `plot_rank`.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Mapping

import numpy as np

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)  # ArviZ 0.23 announces its 1.x refactor on import
    import arviz as az
import xarray as xr

__all__ = [
    "to_inference_data",
    "from_numpyro",
    "group_arrays",
    "diagnostics",
    "bfmi",
    "save",
    "load",
    "plot_rank",
    "InferenceData",
]

InferenceData = az.InferenceData


def _dataset(arrays: Mapping[str, np.ndarray], dims: Mapping[str, list[str]], coords: Mapping) -> xr.Dataset:
    data_vars = {}
    for name, value in arrays.items():
        value = np.asarray(value)
        vdims = list(dims.get(name, [f"{name}_dim_{k}" for k in range(value.ndim)]))
        if len(vdims) != value.ndim:
            raise ValueError(f"{name}: {value.ndim}-D array but dims {vdims}")
        data_vars[name] = (vdims, value)
    used = {d for v in data_vars.values() for d in v[0]}
    return xr.Dataset(data_vars, coords={k: v for k, v in coords.items() if k in used})


def to_inference_data(
    posterior: Mapping[str, np.ndarray] | None = None,
    *,
    dims: Mapping[str, list[str]] | None = None,
    coords: Mapping | None = None,
    sample_stats: Mapping[str, np.ndarray] | None = None,
    extra_groups: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    attrs: Mapping | None = None,
) -> az.InferenceData:
    """Build an `arviz.InferenceData` from plain arrays.

    Parameters
    ----------
    posterior : dict name -> array, each of shape (chain, draw, ...)
        Posterior draws (for VI: draws from q, with one chain).
    dims : dict name -> list of dimension names for the trailing axes
        (``chain`` and ``draw`` are prepended for posterior and sample_stats).
    coords : dict dimension -> coordinate values
        Coordinates of the named dimensions.
    sample_stats : dict name -> array (chain, draw)
        Per-draw sampler statistics (``diverging``, ``energy``, ``lp``, ...).
    extra_groups : dict group -> dict name -> array
        Further groups with their own dims taken from ``dims`` (e.g. the
        variational parameters, or the ELBO trace with dim ``iteration``).
    attrs : dict
        Provenance stored on every group (method, seed, versions, ...).

    Returns
    -------
    arviz.InferenceData
        One group per non-empty argument; arrays keep their dtypes.

    Raises
    ------
    ValueError
        When an array's number of trailing axes differs from the length of its ``dims`` entry
        (via `_dataset`).

    Source: project addition.
    """
    dims = dict(dims or {})
    coords = dict(coords or {})
    attrs = {k: (str(v) if not isinstance(v, (int, float, str)) else v) for k, v in (attrs or {}).items()}
    groups: dict[str, xr.Dataset] = {}
    for group, arrays in (("posterior", posterior), ("sample_stats", sample_stats)):
        if arrays:
            chain_dims = {k: ["chain", "draw", *dims.get(k, [])] for k in arrays}
            groups[group] = _dataset(arrays, chain_dims, coords)
    for group, arrays in (extra_groups or {}).items():
        groups[group] = _dataset(arrays, dims, coords)
    for ds in groups.values():
        ds.attrs.update(attrs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # custom group names are intended
        return az.InferenceData(**groups)


def from_numpyro(mcmc, *, dims=None, coords=None, attrs=None) -> az.InferenceData:
    """Convert a finished `numpyro.infer.MCMC` run (all chains) to InferenceData.

    No log_likelihood group is built (it would re-run the model over every draw and cell).

    Parameters
    ----------
    mcmc : numpyro.infer.MCMC
        A finished run.
    dims : mapping of str to list of str, optional
        Variable -> dimension names of its trailing axes (as in `to_inference_data`).
    coords : mapping, optional
        Dimension -> coordinate values.
    attrs : mapping, optional
        Provenance stored on every group.

    Returns
    -------
    arviz.InferenceData
        Posterior arrays of shape (chain, draw, ...), with the sample statistics of the run.

    Raises
    ------
    None of its own; errors of `arviz.from_numpyro` (e.g. an MCMC that has not run) propagate.

    Source: project addition.
    """
    # no log_likelihood group: it would re-run the model over every draw and cell
    idata = az.from_numpyro(mcmc, dims=dims, coords=coords, log_likelihood=False)
    for group in idata.groups():
        idata[group].attrs.update(attrs or {})
    return idata


def group_arrays(idata: az.InferenceData, group: str = "posterior") -> dict[str, np.ndarray]:
    """All variables of one group as numpy arrays.

    Parameters
    ----------
    idata : arviz.InferenceData
        The result.
    group : str, default "posterior"
        The group's name.

    Returns
    -------
    dict of str to numpy.ndarray
        Name -> array with the stored shape and dtype (posterior: (chain, draw, ...)).

    Raises
    ------
    ValueError
        When ``idata`` has no group ``group``.

    Source: project addition.
    """
    if group not in idata.groups():
        raise ValueError(f"InferenceData has no group {group!r}; it has {list(idata.groups())}")
    ds = idata[group]
    return {name: ds[name].values for name in ds.data_vars}


def diagnostics(draws: np.ndarray) -> dict[str, np.ndarray]:
    """Rank-normalized split R-hat, bulk and tail ESS, and MCSE of the mean.

    Parameters
    ----------
    draws : array_like, shape (chain, draw, Q), float
        Q scalar quantities.

    Returns
    -------
    dict of str to numpy.ndarray, shape (Q,), float64
        ``r_hat`` (rank-normalized split R-hat, Vehtari et al. 2021), ``ess_bulk``, ``ess_tail``,
        ``mcse_mean``, ``mean``, ``sd``.

    Raises
    ------
    ValueError
        When ``draws`` is not 3-D (or cannot be converted to float64).

    Source: project addition (diagnostics of Vehtari et al. 2021, computed by ArviZ).
    """
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim != 3:
        raise ValueError(f"draws must have shape (chain, draw, Q), got {draws.shape}")
    ds = xr.Dataset({"q": (["chain", "draw", "quantity"], draws)})
    return {
        "r_hat": az.rhat(ds, method="rank")["q"].values,
        "ess_bulk": az.ess(ds, method="bulk")["q"].values,
        "ess_tail": az.ess(ds, method="tail")["q"].values,
        "mcse_mean": az.mcse(ds, method="mean")["q"].values,
        "mean": draws.mean(axis=(0, 1)),
        "sd": draws.std(axis=(0, 1), ddof=1),
    }


def bfmi(idata: az.InferenceData) -> np.ndarray:
    """E-BFMI per chain (Betancourt 2016), from the ``energy`` sample statistic.

    Parameters
    ----------
    idata : arviz.InferenceData
        A sampler result with a ``sample_stats`` group holding ``energy`` (chain, draw).

    Returns
    -------
    numpy.ndarray, shape (chain,), float64
        The E-BFMI of each chain.

    Raises
    ------
    None of its own; ArviZ raises ValueError when ``idata`` has no ``sample_stats`` group.

    Source: project addition.
    """
    return np.asarray(az.bfmi(idata))


def save(idata: az.InferenceData, path: str | Path) -> Path:
    """Write to netCDF (``.nc``), creating the folder when missing.

    Parameters
    ----------
    idata : arviz.InferenceData
        The result.
    path : str or pathlib.Path
        The file to write.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    None of its own; OSError from creating the folder or writing the file propagates.

    Source: project addition.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    idata.to_netcdf(str(path))
    return path


def load(path: str | Path) -> az.InferenceData:
    """Read an InferenceData written by `save`.

    Parameters
    ----------
    path : str or pathlib.Path
        A ``.nc`` file.

    Returns
    -------
    arviz.InferenceData
        The stored groups.

    Raises
    ------
    FileNotFoundError
        When there is no file at ``path`` (a file that is not netCDF makes xarray raise).

    Source: project addition.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no saved result at {path}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return az.from_netcdf(str(path))


def plot_rank(draws: np.ndarray, names: list[str], ax=None):
    """Rank plots (one row per quantity) of draws with shape (chain, draw, Q).

    Parameters
    ----------
    draws : array_like, shape (chain, draw, Q), float
        The draws.
    names : list of str
        One name per plotted quantity (the first ``len(names)`` quantities are plotted).
    ax : matplotlib axes, optional
        Where to draw.

    Returns
    -------
    numpy.ndarray of matplotlib axes
        The axes of `arviz.plot_rank`.

    Raises
    ------
    None of its own; more ``names`` than Q quantities makes numpy raise IndexError.

    Source: project addition.
    """
    draws = np.asarray(draws)
    data = {name: draws[:, :, q] for q, name in enumerate(names)}
    return az.plot_rank(az.convert_to_inference_data(data), ax=ax)
