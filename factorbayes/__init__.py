"""factorbayes: Bayesian factorization models for recommender data.

The import path for users. It holds the front door (`validation.frontdoor.api`) under a name that
no other PyPI project uses (``validation`` is also an unrelated PyPI project, so the repository's
three packages, ``ppl_models``, ``custom_inference`` and ``validation``, keep their names for
readers of the code and this package is what applications import)::

    import factorbayes as fb
    model = fb.fit("hpf", df, K=20, user_col="reader", item_col="book", value_col="stars")
    model.recommend(["u1"], N=10)
    train, test = fb.split(df, "loo", user_col="reader", item_col="book")
    model.evaluate(test)
    sel = fb.select("hpf", train, user_col="reader", item_col="book")   # K, prior shapes on a validation split of train
    sel.evaluate(test)

Names: `fit`, `load`, `split`, `select`, `compare`, `FittedModel`, `models`, `valid_options`,
`RunInterrupted`, `__version__`. The command line (``factorbayes ...`` or ``python -m factorbayes ...``) runs
`validation.frontdoor.cli`.

Source: project addition (issue 24, the collision-free import path; issue 25, the layout).
"""

from importlib.metadata import PackageNotFoundError, version as _version

from validation.frontdoor.api import FittedModel, compare, fit, load, models, select, split, valid_options

try:
    __version__ = _version("factorbayes")
except PackageNotFoundError:  # a checkout on sys.path without an install
    __version__ = "0+unknown"

__all__ = ["FittedModel", "RunInterrupted", "compare", "fit", "load", "models", "select", "split", "valid_options",
           "__version__"]


def __getattr__(name):
    # the driver's interruption lives in custom_inference.base (imports JAX): loaded on first use
    if name == "RunInterrupted":
        from custom_inference.base import RunInterrupted

        return RunInterrupted
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
