"""The papers' scalable solvers, derived by hand and written in JAX over the observed entries only: CAVI, stochastic VI, Gibbs samplers and SGD baselines, on the shared drivers (`vi_driver`, `mcmc_driver`)."""

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("factorbayes")
except PackageNotFoundError:  # a checkout on sys.path without an install
    __version__ = "0+unknown"
