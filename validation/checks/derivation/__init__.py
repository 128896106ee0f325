"""Validate a derivation of your own: declare the model once, run every check that applies, read one report.

Public and stable (project addition, issue 25 item 1). A researcher who has written a NumPyro program
and a hand-derived Gibbs sampler or CAVI solver for it declares both in one `Derivation` and calls
`check`; every check of `validation.checks` that the declaration makes possible runs, each with a
pass / fail verdict and a reason in words, and one Markdown report is written:

=====================  ===============================================================  ==========
check                  what it does (generic piece it runs)                            needs
=====================  ===============================================================  ==========
``conditional[SITE]``  the candidate complete conditional of SITE against the           ``conditionals``
                       program's own log joint (`numpyro.infer.util.log_density`),
                       one coordinate at a time along a grid, total variation
                       (`validation.checks.updates.conditional_distance`)
``stationarity[B]``    after CAVI block B's closed-form update, the gradient of the      ``elbo``,
                       ELBO with respect to that block's parameters is ~0               ``cavi_blocks``,
                       (`validation.checks.updates.stationarity`, ``jax.grad``)         ``vi_init``
``monotone``           CAVI sweeps never lower the ELBO                                 the same
                       (`validation.checks.updates.monotone_sweeps`)
``bridge[B]``          Gibbs block B as a NumPyro ``CustomGibbs`` block beside NUTS on   ``conditionals`` or
                       the other sites, against NUTS within Monte Carlo error            ``gibbs_blocks``
                       (`validation.checks.bridge.run_hybrid`, `~bridge.compare`)
``crosscheck``         the solver against a fresh NUTS run of the program on the         always
                       identified quantities, ArviZ-gated (exact:
                       `validation.checks.crosscheck.exact_crosscheck`; VI:
                       `~crosscheck.vi_crosscheck`)
``sbc``                simulation-based calibration of the sampler                       exact method,
                       (`validation.checks.sbc.run_sbc`)                                ``sbc_sims`` > 0
``vsbc``               VSBC of q (`validation.checks.vi_evidence.run_vsbc`); evidence,   VI method,
                       not counted in the verdict (a correct mean-field q may be biased) ``sbc_sims`` > 0
``khat``               PSIS k-hat of q against the program's posterior                   VI method, ``q``
                       (`validation.checks.vi_evidence.khat`); evidence, not counted
=====================  ===============================================================  ==========

A check the declaration does not make possible is listed as "not declared" with the field that
would enable it; a check left out by ``check(..., checks=...)`` is listed as "not selected". Nothing
is skipped silently.

Conventions (the user's functions take the program's arguments exactly as the program does:
``program(*args, **kwargs)``):

- site values are dicts site name -> array of the site's shape (constrained values, as NumPyro
  samples them); the functions given to the sampler and the CAVI sweeps are traced by ``jax.jit``,
  so they are written in ``jax.numpy``; array arguments of the program are traced inputs (the same
  compiled program serves every SBC data set), other arguments (ints, strings) are static;
- ``conditionals[site](values, *args, **kwargs)`` returns a ``numpyro.distributions.Distribution``
  whose samples have the site's shape: the claimed p(site | every other site, data). It is both
  checked on a grid and, unless ``gibbs_blocks`` names the site, used as the sampler's block;
- ``gibbs_blocks[block](key, values, *args, **kwargs)`` returns ``{site: new value}`` for the sites
  of ``block`` (a site name or a tuple of site names): a block that is not a plain conditional (an
  augmentation step, a joint draw of several sites);
- CAVI parameters are a dict (or NamedTuple) of float arrays; ``cavi_blocks[fields](params, *args,
  **kwargs)`` returns the parameters with ``fields`` (a name or a tuple of names) updated;
  ``elbo(params, *args, **kwargs)`` is the ELBO as a differentiable JAX function; ``q(params)``
  returns site -> ``numpyro.distributions.Distribution`` (mean-field factors on the program's
  latent sites);
- ``identified(draws)`` maps site -> draws (chain, draw, *site shape) to group -> (chain, draw, Q):
  identified quantities only (predictions, rates, hyperparameters; never raw factor coordinates,
  which are defined up to rotation, scale and permutation). For the VI cross-check the groups must
  be positive (`validation.checks.crosscheck.compare_vi` compares log means).

Example (the tests' Gamma-Poisson model; `tests/validation/test_derivation.py`, and
``notebooks/your_own_model.py`` for a factorization model)::

    d = Derivation(name="gamma-poisson", program=model, method="exact",
                   kwargs={"y": y, "item": item, "n_items": 5}, observed={"y": "y"},
                   identified=lambda s: {"lam": s["lam"], "b": s["b"][..., None]},
                   conditionals={"lam": lam_conditional, "b": b_conditional})
    report = check(d, sbc_sims=50, out_dir="derivation-report")
    report.status            # "pass", "fail" or "inconclusive"
    report.table()           # one row per check

The package (issue 25 item 3: the former single module split by concern, the code moved unchanged;
imports point one way, ``run`` -> ``levels`` -> ``solver`` -> ``outcomes`` -> ``declaration``):
``declaration`` (`Derivation`, `DeclarationError`), ``outcomes`` (`CHECKS`, `CheckSettings`,
`CheckOutcome`, `DerivationReport`, the Markdown report), ``solver`` (`prior_simulator`, `solver_fit`,
`nuts_reference`), ``levels`` (one function per check) and ``run`` (`check`). The stable API is the
package's ``__all__``, imported from the package (``from validation.checks.derivation import check``);
the submodules are not part of it.

Source: project addition (validation levels 1-3 of the design, behind one declaration); the checks'
references: Talts et al. (2018) and Säilynoja et al. (2022) for SBC; Yao, Vehtari, Simpson, Gelman
(2018) for k-hat and VSBC; Vehtari et al. (2021) for the ArviZ gates.
"""

from __future__ import annotations

from validation.checks.derivation import outcomes as _outcomes
from validation.checks.derivation.declaration import DeclarationError, Derivation
from validation.checks.derivation.outcomes import CheckOutcome, CheckSettings, DerivationReport
from validation.checks.derivation.run import check
from validation.checks.derivation.solver import nuts_reference, prior_simulator, solver_fit

__all__ = ["Derivation", "DeclarationError", "CheckSettings", "CheckOutcome", "DerivationReport", "check",
           "nuts_reference", "solver_fit", "prior_simulator", "CHECKS"]

# assigned here (not only imported) so that the API reference finds its doc comment on this page
#: The checks `check` knows, in the order they run and are reported.
CHECKS = _outcomes.CHECKS

