"""The generative programs: one NumPyro (or PyMC, with its NumPyro twin) program per model of the seeds, short enough to read against the paper; used for small-scale NUTS and ADVI ground truth."""

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("factorbayes")
except PackageNotFoundError:  # a checkout on sys.path without an install
    __version__ = "0+unknown"
