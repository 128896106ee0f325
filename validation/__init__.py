"""The proof that each solver computes the posterior its program defines, and what a user runs: `checks` (update checks, NUTS references, gates, cross-checks, SBC, bridge, errata), `models` (one module per model), `data` (loaders, splits, data sets), `evaluation` (held-out protocols and metrics) and `frontdoor` (fit by name, scoring, ArviZ output, CLI). Dependencies point one way: frontdoor -> evaluation -> models -> checks, data; nothing here is imported by `ppl_models` or `custom_inference`."""

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("factorbayes")
except PackageNotFoundError:  # a checkout on sys.path without an install
    __version__ = "0+unknown"
