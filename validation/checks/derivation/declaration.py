"""The declaration of `validation.checks.derivation`: `Derivation`, its `DeclarationError`, the block helpers.

Part of the `validation.checks.derivation` package (see its docstring for the conventions); moved here
from the former single module unchanged.

Source: project addition (issue 25 items 1 and 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

METHODS = ("exact", "vi")


class DeclarationError(ValueError):
    """A `Derivation` field is wrong; the message starts with ``Derivation.<field>``.

    A subclass of ValueError, raised at construction of a `Derivation` and when `solver_fit` builds
    or runs the declared blocks.

    Raises
    ------
    None (it is the exception).

    Source: project addition (issue 25 item 1).
    """


# ---------------------------------------------------------------------------------------------
# the declaration


def _block_sites(key) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def _block_label(key) -> str:
    return key if isinstance(key, str) else ",".join(key)


@dataclass(frozen=True)
class Derivation:
    """One model and its hand-derived solver, declared once (see the module docstring for conventions).

    Parameters
    ----------
    name : str
        A short label for reports and cache keys (non-empty).
    program : callable
        The NumPyro program, called as ``program(*args, **kwargs)`` with the observed data bound.
    method : {"exact", "vi"}
        "exact": a sampler (agreement with NUTS within Monte Carlo error, SBC); "vi": the VI gap
        against NUTS, with VSBC and k-hat as evidence.
    identified : callable
        ``identified(draws) -> dict group -> float array (chain, draw, Q)``; ``draws``: site ->
        (chain, draw, *site shape). numpy or jax.numpy. Identified quantities only (predictions,
        rates, hyperparameters; never raw factor coordinates).
    args : tuple, default ()
        The small problem: the program's positional arguments with the observed data (a few dozen
        observations: NUTS runs on it several times).
    kwargs : mapping, default {}
        The program's keyword arguments of the small problem.
    observed : mapping, default {}
        Observed site -> the keyword (str) or position (int) of ``args`` holding its data. With it,
        SBC / VSBC draw data sets from the program's prior predictive (`prior_simulator`).
    simulate : callable, optional
        ``simulate(seed) -> (truth, args, kwargs)`` with ``truth`` site -> array drawn from the prior
        and the data drawn given it; overrides ``observed`` for SBC / VSBC.
    fit : callable, optional
        ``fit(seed, *args, **kwargs) -> dict site -> (chain, draw, *site shape)`` (exact: posterior
        draws; VI: draws from q). Default: built from the declared blocks (`solver_fit`).
    conditionals : mapping, default {}
        Site -> ``conditional(values, *args, **kwargs) -> numpyro Distribution``: the claimed
        complete conditional of the site, samples of the site's shape.
    gibbs_blocks : mapping, default {}
        Site or tuple of sites -> ``block(key, values, *args, **kwargs) -> {site: value}``. Sweep
        order: ``gibbs_blocks`` in order, then the ``conditionals`` of sites no block owns.
    vi_init : callable, optional
        ``vi_init(seed, *args, **kwargs) -> params`` (dict or NamedTuple of float arrays).
    cavi_blocks : mapping, default {}
        Field or tuple of fields -> ``update(params, *args, **kwargs) -> params``; a sweep applies
        them in order.
    elbo : callable, optional
        ``elbo(params, *args, **kwargs) -> scalar`` (differentiable, JAX).
    q : callable, optional
        ``q(params) -> dict site -> numpyro Distribution`` on the program's latent sites.
    description : str, default ""
        One line for the report.

    Raises
    ------
    DeclarationError
        (A ValueError) at construction when a field has the wrong type or the fields do not make a
        solver (exact without ``fit`` and without blocks; VI without ``fit`` and without ``vi_init`` /
        ``cavi_blocks`` / ``q``); its message names the field.

    Source: project addition (issue 25 item 1).
    """

    name: str
    program: Callable
    method: str
    identified: Callable
    args: tuple = ()
    kwargs: Mapping = field(default_factory=dict)
    observed: Mapping = field(default_factory=dict)
    simulate: Callable | None = None
    fit: Callable | None = None
    conditionals: Mapping = field(default_factory=dict)
    gibbs_blocks: Mapping = field(default_factory=dict)
    vi_init: Callable | None = None
    cavi_blocks: Mapping = field(default_factory=dict)
    elbo: Callable | None = None
    q: Callable | None = None
    description: str = ""

    def __post_init__(self):
        def fail(f, msg):
            raise DeclarationError(f"Derivation.{f}: {msg}")

        if not isinstance(self.name, str) or not self.name:
            fail("name", f"must be a non-empty str, got {self.name!r}")
        for f in ("program", "identified"):
            if not callable(getattr(self, f)):
                fail(f, f"must be callable, got {type(getattr(self, f)).__name__}")
        if self.method not in METHODS:
            fail("method", f"must be one of {METHODS}, got {self.method!r}")
        if not isinstance(self.args, tuple):
            fail("args", f"must be a tuple (the program's positional arguments), got {type(self.args).__name__}")
        for f in ("kwargs", "observed", "conditionals", "gibbs_blocks", "cavi_blocks"):
            if not isinstance(getattr(self, f), Mapping):
                fail(f, f"must be a mapping, got {type(getattr(self, f)).__name__}")
        for f in ("simulate", "fit", "vi_init", "elbo", "q"):
            v = getattr(self, f)
            if v is not None and not callable(v):
                fail(f, f"must be callable or None, got {type(v).__name__}")
        for site, where in self.observed.items():
            if not isinstance(where, (str, int)) or isinstance(where, bool):
                fail(f"observed[{site!r}]", f"must be a keyword name (str) or a position in args (int), got {where!r}")
            if isinstance(where, str) and where not in self.kwargs:
                fail(f"observed[{site!r}]", f"names keyword {where!r}, which kwargs does not hold ({sorted(self.kwargs)})")
            if isinstance(where, int) and not 0 <= where < len(self.args):
                fail(f"observed[{site!r}]", f"position {where} is outside args (length {len(self.args)})")
        for site, fn in self.conditionals.items():
            if not isinstance(site, str) or not callable(fn):
                fail(f"conditionals[{site!r}]", "keys must be site names and values callables")
        for f in ("gibbs_blocks", "cavi_blocks"):
            for key, fn in getattr(self, f).items():
                names = _block_sites(key)
                if not names or not all(isinstance(n, str) for n in names) or not callable(fn):
                    fail(f"{f}[{key!r}]", "keys must be a name or a tuple of names, values callables")
        owned = [s for k in self.gibbs_blocks for s in _block_sites(k)]
        if len(owned) != len(set(owned)):
            fail("gibbs_blocks", f"a site is owned by two blocks: {owned}")
        if self.method == "exact" and self.fit is None and not (self.conditionals or self.gibbs_blocks):
            fail("fit", "an exact derivation needs fit, or conditionals / gibbs_blocks to build the sampler from")
        if self.method == "vi" and self.fit is None:
            for f in ("vi_init", "q"):
                if getattr(self, f) is None:
                    fail(f, "a VI derivation without fit needs vi_init, cavi_blocks and q (to run CAVI and draw from q)")
            if not self.cavi_blocks:
                fail("cavi_blocks", "a VI derivation without fit needs vi_init, cavi_blocks and q")
        if self.cavi_blocks and self.vi_init is None:
            fail("vi_init", "cavi_blocks need vi_init (the starting parameters)")

    def sampler_blocks(self) -> list[tuple[tuple[str, ...], str, Callable]]:
        """The sweep of the sampler, one entry per block in sweep order.

        Every declared Gibbs block, then one per conditional of a site no block owns (a draw from the
        conditional).

        Returns
        -------
        list of (tuple of str, str, callable)
            (sites, label, ``block(key, values, *args, **kwargs) -> {site: value}``).

        Raises
        ------
        None.

        Source: project addition.
        """
        out = [(_block_sites(k), _block_label(k), fn) for k, fn in self.gibbs_blocks.items()]
        owned = {s for sites, _, _ in out for s in sites}
        for site, cond in self.conditionals.items():
            if site not in owned:
                out.append(((site,), site, _conditional_block(site, cond)))
        return out


def _conditional_block(site: str, cond: Callable) -> Callable:
    def block(key, values, *args, **kwargs):
        return {site: cond(values, *args, **kwargs).sample(key)}

    block.__name__ = f"draw_{site}"
    return block
