"""Every bad-input class against every registered model, through the front door and the CLI.

Issue 10, "Input checks at every entry, whatever the container": `validation.frontdoor.api.fit` (and the
public solvers behind it) must refuse bad input with a ValueError or TypeError that names the
field, before any solver work. The data and K checks are tested with each model's solver
replaced by a stub that fails the test if it is reached (so the refusal provably comes first);
the hyperparameter checks live in the solvers, so those run the real solver with a listener on
JAX's compilation events, which must stay silent. Nothing here fits a model: the whole module
runs in seconds.

Bad-input classes (rows of `CASES`): negative and non-integer counts (count models), values
outside {0, 1} in an Observations (binary models), NaN, inf, empty data, K < 1 / non-integer /
bool / non-number, hyperparameters <= 0 (`test_hyperparameters_must_be_positive`), unsupported
dtypes (float16 is converted to float64, never computed in; object, complex and datetime values
are refused), mismatched lengths, ids out of range, duplicate pairs, unsupported containers; and
the CLI (missing file, malformed file, bad --k: exit status 2 with a message).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from custom_inference.data import Observations
from validation.frontdoor import api

MODELS = api.models()
KIND = {m: api.ADAPTERS[m].values for m in MODELS}

USERS = ["u1", "u1", "u2", "u3"]
ITEMS = ["a", "b", "a", "c"]
GOOD = {"count": [1.0, 2.0, 3.0, 1.0], "real": [1.5, 2.0, 4.0, 5.0], "binary": [1.0, 1.0, 1.0, 1.0]}
TRANSFORM_OPTIONS = ("'round'", "'double'", "'binarize'")


class SolverReached(AssertionError):
    """Raised by the stub solver: bad input got past the front door's checks."""


def _stub(captured: list):
    def run(key, obs, K, **options):
        captured.append(obs)
        raise SolverReached(f"the solver was called (K={K}, {obs!r}); the input should have been refused first")

    return run


@pytest.fixture
def stub_solvers(monkeypatch):
    """Replace every adapter's solver by `_stub`; yields the list of Observations it received."""
    captured: list = []
    for name in MODELS:
        monkeypatch.setitem(api.ADAPTERS, name, dataclasses.replace(api.ADAPTERS[name], run=_stub(captured)))
    return captured


#: Key handling that a solver may do before its checks (seeding is not solver work): compiled
#: once by `no_compilation` before it listens, and not counted if compiled again.
_KEY_PROGRAMS = re.compile(r"prng|random|seed|threefry|split|key|unstack|fold_in|_wrap|_unwrap", re.IGNORECASE)


@pytest.fixture
def no_compilation():
    """Fails the test if JAX traces or compiles any program other than PRNG key set-up while it runs."""
    import jax

    from custom_inference import base, vi_driver

    jax.random.split(base.as_key(0))  # warm: key set-up is compiled once per process
    vi_driver.host_seed(0)
    events: list[tuple[str, str]] = []

    def listener(event, duration, **kwargs):
        name = str(kwargs.get("fun_name", ""))
        if event.startswith("/jax/core/compile") and not _KEY_PROGRAMS.search(name):
            events.append((event.rsplit("/", 1)[-1], name))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield events
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert not events, f"JAX compiled before refusing the input: {events}"


# ------------------------------------------------------------------------------------------
# containers


def _frame(values, users=USERS, items=ITEMS) -> pd.DataFrame:
    return pd.DataFrame({"user": users, "item": items, "rating": values})


def _sparse(values) -> sp.csr_matrix:
    return sp.csr_matrix((np.asarray(values), ([0, 0, 1, 2], [0, 1, 0, 2])), shape=(3, 3))


def _index(x) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else np.asarray(x, np.int32)


def _direct(values, rows=(0, 0, 1, 2), cols=(0, 1, 0, 2), shape=(3, 3)) -> Observations:
    """An Observations built with the plain constructor (no checks of its content)."""
    return Observations(_index(rows), _index(cols), np.asarray(values), *shape)


def _with(values, pos, bad):
    out = list(values)
    out[pos] = bad
    return out


# Each case: (id, kinds it applies to, data(kind) -> data, extra fit kwargs, exception types,
# regex the message must match: the field named).
CASES = [
    ("negative/DataFrame", ("count",), lambda k: _frame(_with(GOOD[k], 1, -2.0)), {}, ValueError,
     r"rating.*negative|negative.*rating"),
    ("negative/sparse", ("count",), lambda k: _sparse(_with(GOOD[k], 1, -2.0)), {}, ValueError,
     r"rating.*negative"),
    ("negative/Observations", ("count",), lambda k: _direct(_with(GOOD[k], 1, -2.0)), {}, ValueError,
     r"data\.values.*non-negative"),
    ("non-integer/DataFrame", ("count",), lambda k: _frame(_with(GOOD[k], 1, 2.5)), {}, ValueError,
     r"rating.*integer"),
    ("non-integer/sparse", ("count",), lambda k: _sparse(_with(GOOD[k], 1, 2.5)), {}, ValueError,
     r"rating.*integer"),
    ("non-integer/Observations", ("count",), lambda k: _direct(_with(GOOD[k], 1, 2.5)), {}, ValueError,
     r"data\.values.*integer"),
    ("non-binary/Observations", ("binary",), lambda k: _direct(_with(GOOD[k], 1, 2.0)), {}, ValueError,
     r"data\.values.*\{0, 1\}"),
    ("non-binary/Observations-from_coo", ("binary",),
     lambda k: Observations.from_coo([0, 0, 1], [0, 1, 0], [1.0, 0.5, 1.0], (2, 2), kind="real"), {}, ValueError,
     r"data\.values.*\{0, 1\}"),
    ("nan/DataFrame", ("count", "real", "binary"), lambda k: _frame(_with(GOOD[k], 2, np.nan)), {}, ValueError,
     r"'rating'.*NaN"),
    ("nan-id/DataFrame", ("count", "real", "binary"), lambda k: _frame(GOOD[k], users=["u1", None, "u2", "u3"]), {},
     ValueError, r"'user'.*missing"),
    ("nan/sparse", ("count", "real", "binary"), lambda k: _sparse(_with(GOOD[k], 2, np.nan)), {}, ValueError,
     r"matrix\.data.*NaN"),
    ("nan/Observations", ("count", "real", "binary"), lambda k: _direct(_with(GOOD[k], 2, np.nan)), {}, ValueError,
     r"data\.values.*NaN"),
    ("inf/DataFrame", ("count", "real", "binary"), lambda k: _frame(_with(GOOD[k], 0, np.inf)), {}, ValueError,
     r"'rating'.*infinite"),
    ("-inf/sparse", ("count", "real", "binary"), lambda k: _sparse(_with(GOOD[k], 0, -np.inf)), {}, ValueError,
     r"matrix\.data.*infinite"),
    ("inf/Observations", ("count", "real", "binary"), lambda k: _direct(_with(GOOD[k], 3, np.inf)), {}, ValueError,
     r"data\.values.*infinite"),
    ("empty/DataFrame", ("count", "real", "binary"), lambda k: _frame([], users=[], items=[]), {}, ValueError,
     r"DataFrame: no ratings"),
    ("empty/sparse", ("count", "real", "binary"), lambda k: sp.csr_matrix((3, 3)), {}, ValueError,
     r"matrix: no ratings"),
    ("empty/Observations", ("count", "real", "binary"), lambda k: _direct([], rows=[], cols=[]), {}, ValueError,
     r"data: no entries"),
    ("all-zero/DataFrame", ("count", "binary"), lambda k: _frame([0.0] * 4), {}, ValueError,
     r"data: no entries left"),
    ("object-values/DataFrame", ("count", "real", "binary"), lambda k: _frame(["1", "x", "2", "3"]), {}, ValueError,
     r"'rating'.*non-numeric"),
    ("complex-values/DataFrame", ("count", "real", "binary"), lambda k: _frame(np.array(GOOD[k]) + 1j), {},
     ValueError, r"'rating'.*complex"),
    ("datetime-values/DataFrame", ("count", "real", "binary"),
     lambda k: _frame(pd.to_datetime(["2020-01-01"] * 4)), {}, ValueError, r"'rating'.*datetime"),
    ("object-values/Observations", ("count", "real", "binary"),
     lambda k: _direct(np.array(["1", "2", "3", "4"], dtype=object)), {}, TypeError, r"data\.values.*dtype object"),
    ("float-ids/Observations", ("count", "real", "binary"),
     lambda k: _direct(GOOD[k], rows=np.array([0.0, 0.0, 1.0, 2.0])), {}, TypeError, r"data\.rows.*integer"),
    ("mismatched-lengths/Observations", ("count", "real", "binary"),
     lambda k: _jax_direct(GOOD[k][:3], rows=[0, 0, 1, 2]), {}, ValueError, r"data\.rows, \.cols and \.values.*same length"),
    ("ids-out-of-range/Observations", ("count", "real", "binary"),
     lambda k: _direct(GOOD[k], rows=[0, 0, 1, 3]), {}, ValueError, r"data\.rows index out of range.*\[0, 2\]"),
    ("negative-ids/Observations", ("count", "real", "binary"),
     lambda k: _direct(GOOD[k], cols=[0, -1, 0, 2]), {}, ValueError, r"data\.cols index out of range"),
    ("duplicate-pairs/Observations", ("count", "real", "binary"),
     lambda k: _direct(GOOD[k], rows=[0, 0, 1, 1], cols=[0, 1, 0, 0]), {}, ValueError, r"duplicate"),
    ("dense-array", ("count", "real", "binary"), lambda k: np.ones((3, 3)), {}, TypeError, r"data must be"),
    ("list", ("count", "real", "binary"), lambda k: [(0, 0, 1.0)], {}, TypeError, r"data must be"),
    ("bad-transform", ("count", "real", "binary"), lambda k: _frame(GOOD[k]), {"transform": "floor"}, ValueError,
     r"transform"),
    ("missing-column", ("count", "real", "binary"), lambda k: _frame(GOOD[k]), {"user_col": "reader"}, ValueError,
     r"'reader'.*columns"),
]


def _jax_direct(values, rows=(0, 0, 1, 2), cols=(0, 1, 0, 2), shape=(3, 3)) -> Observations:
    """Device-array leaves: the constructor's O(1) host check does not see them (as in a tree map)."""
    import jax.numpy as jnp

    return Observations(jnp.asarray(np.asarray(rows, np.int32)), jnp.asarray(np.asarray(cols, np.int32)),
                        jnp.asarray(np.asarray(values, np.float32)), *shape)


def _cases():
    for case_id, kinds, make, kwargs, exc, pattern in CASES:
        for model in MODELS:
            if KIND[model] in kinds:
                yield pytest.param(model, make, kwargs, exc, pattern, id=f"{case_id}-{model}")


@pytest.mark.parametrize("model, make, kwargs, exc, pattern", list(_cases()))
def test_bad_data_is_refused_before_the_solver(model, make, kwargs, exc, pattern, stub_solvers):
    data = make(KIND[model])
    with pytest.raises(exc) as err:
        api.fit(model, data, K=2, seed=0, progress=False, **kwargs)
    assert type(err.value) in (ValueError, TypeError)
    assert re.search(pattern, str(err.value)), str(err.value)
    assert not stub_solvers


def test_non_integer_counts_name_the_transform_options(stub_solvers):
    for model in (m for m in MODELS if KIND[m] == "count"):
        for data in (_frame([1.0, 2.5, 3.0, 1.0]), _direct([1.0, 2.5, 3.0, 1.0])):
            with pytest.raises(ValueError) as err:
                api.fit(model, data, K=2, progress=False)
            for option in TRANSFORM_OPTIONS:
                assert option in str(err.value), (model, str(err.value))


BAD_K = [(0, ValueError), (-1, ValueError), (2.5, ValueError), (True, TypeError), (False, TypeError),
         ("3", TypeError), (None, TypeError), (np.nan, ValueError)]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("K, exc", BAD_K, ids=[repr(k) for k, _ in BAD_K])
def test_bad_K_is_refused_before_the_solver(model, K, exc, stub_solvers):
    with pytest.raises(exc, match=r"\bK must be an integer >= 1"):
        api.fit(model, _frame(GOOD[KIND[model]]), K=K, progress=False)
    assert not stub_solvers


@pytest.mark.parametrize("model", MODELS)
def test_unsupported_dtypes_are_converted_to_float64(model, stub_solvers):
    """float16, integer and bool inputs reach the solver as float64 (never computed in float16)."""
    kind = KIND[model]
    good = np.asarray(GOOD[kind])
    ints = np.round(good)  # exact in every integer dtype below
    inputs = [(_frame(good.astype(np.float16)), good), (_direct(good.astype(np.float16)), good),
              (_frame(ints.astype(np.int8)), ints), (_sparse(ints.astype(np.int64)), ints),
              (_direct(ints.astype(np.int64)), ints), (_frame(good.astype(np.float32)), good)]
    if kind == "binary":
        inputs.append((_direct(good.astype(bool)), good))
    extra = {"n_batches": 2} if model == "ovbfm" else {}  # its default 10 exceeds GOOD's entries
    for data, expected in inputs:
        with pytest.raises(SolverReached):
            api.fit(model, data, K=2, progress=False, **extra)
        obs = stub_solvers.pop()
        assert np.asarray(obs.values).dtype == np.float64, (type(data).__name__, np.asarray(obs.values).dtype)
        np.testing.assert_array_equal(np.sort(np.asarray(obs.values)), np.sort(expected))


def test_observations_constructors_refuse_bad_containers():
    with pytest.raises(ValueError, match=r"rows, cols and values must have the same length"):
        Observations.from_coo([0, 1, 2], [0, 1], [1.0, 1.0, 1.0], (3, 3))
    with pytest.raises(ValueError, match=r"rows, cols and values must have the same length, got 3, 3, 2"):
        Observations(np.array([0, 1, 2]), np.array([0, 1, 2]), np.array([1.0, 1.0]), 3, 3)
    with pytest.raises(ValueError, match=r"values must be 1-D"):
        Observations(np.array([0]), np.array([0]), np.ones((1, 1)), 3, 3)
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(ValueError, match=r"n_rows must be an integer >= 1"):
            Observations(np.array([0]), np.array([0]), np.array([1.0]), bad, 3)
    with pytest.raises(TypeError, match=r"dtype.*float32 or float64"):
        Observations.from_coo([0], [0], [1.0], (1, 1), dtype=np.float16)
    with pytest.raises(TypeError, match=r"values must be real numbers"):
        Observations.from_coo([0], [0], [1 + 1j], (1, 1), kind="real")
    with pytest.raises(TypeError, match=r"rows must hold integer indices"):
        Observations.from_coo(["a"], [0], [1.0], (1, 1))
    # validate: the full O(N) check of a container however built
    obs = _direct(np.array([1.0, 2.0, 3.0, 1.0], np.float16))
    with pytest.raises(TypeError, match=r"data\.values has dtype float16.*astype\(np\.float64\)"):
        obs.validate("count")
    assert obs.validate("count", float_only=False) is obs
    assert _direct([1.0, 0.0, 1.0, 1.0]).validate("binary") is not None


# ------------------------------------------------------------------------------------------
# hyperparameters <= 0: checked by each solver, before it compiles anything

#: model -> (hyperparameter type, fields that must be > 0 (>= 0 for the L2 constants of SGD-FM
#: and BPR, so -1 is refused there too)). Every registered model takes ``hyper=``.
HYPER = {
    "hpf": ("ppl_models.hpf:HPFHyper", ("a", "a_prime", "b_prime", "c", "c_prime", "d_prime")),
    "hpf-gibbs": ("ppl_models.hpf:HPFHyper", ("a", "a_prime", "b_prime", "c", "c_prime", "d_prime")),
    "sbmf": ("ppl_models.sbmf:SBMFHyper", ("sigma_g", "a0", "b0", "nu0", "alpha0", "beta0")),
    "bpmf": ("ppl_models.bpmf:BPMFHyper", ("alpha", "beta0", "nu0", "W0")),
    "mcmc-fm": ("ppl_models.fm:FMHierHyper", ("sigma_0", "nu_0", "alpha_0p", "beta_0p", "alpha_0", "beta_0")),
    "vbfm": ("ppl_models.fm:FMFlatHyper", ("alpha", "sigma_0", "sigma_w", "sigma_v")),
    "ovbfm": ("ppl_models.fm:FMFlatHyper", ("alpha", "sigma_0", "sigma_w", "sigma_v")),
    "sgd-fm": ("custom_inference.fm_sgd:SGDReg", ("lambda_0", "lambda_w", "lambda_v")),
    "sibm": ("ppl_models.sibm:SIBMHyper", ("u_tilde0", "v_tilde0", "z_tilde0")),
    "sibm-svi": ("ppl_models.sibm:SIBMHyper", ("u_tilde0", "v_tilde0", "z_tilde0")),
    "sibm-map": ("ppl_models.sibm:SIBMHyper", ("u_tilde0", "v_tilde0", "z_tilde0")),
    "rg": ("ppl_models.rg:RGHyper", ("alpha", "beta", "r")),
    "bpr": ("custom_inference.bpr:BPRHyper", ("reg", "bias_reg")),
    "npfm": ("ppl_models.pfm:PFMHyper", ("a_0", "b_0", "c_0", "d_0", "a", "b", "c", "d", "e", "f", "g", "h",
                                          "e_0", "f_0", "g_0", "h_0")),
    "ppfm": ("ppl_models.pfm:PFMHyper", ("a_0", "b_0", "c_0", "d_0", "a", "b", "c", "d", "e", "f", "g", "h",
                                          "e_0", "f_0", "g_0", "h_0")),
    "psm": ("ppl_models.psm:PSMHyper", ("alpha0", "beta0", "tau_u", "tau_v", "tau_b")),
}


def test_every_model_has_a_hyper_entry():
    assert set(HYPER) == set(MODELS)


def _hyper_cases():
    for model in MODELS:
        for field in HYPER[model][1]:
            yield pytest.param(model, field, id=f"{model}-{field}")


@pytest.mark.parametrize("model, field", list(_hyper_cases()))
def test_hyperparameters_must_be_positive(model, field, no_compilation):
    import importlib

    path, _ = HYPER[model]
    module, name = path.split(":")
    Hyper = getattr(importlib.import_module(module), name)
    hyper = Hyper()._replace(**{field: -1.0})
    # OVBFM's default 10 minibatches exceed GOOD's entries (refused on its own, before the solver:
    # test_bad_input_audit.py); 2 batches let the solver's hyperparameter check speak
    extra = {"n_batches": 2} if model == "ovbfm" else {}
    with pytest.raises((ValueError, TypeError)) as err:
        api.fit(model, _frame(GOOD[KIND[model]]), K=2, seed=0, progress=False, hyper=hyper, **extra)
    assert re.search(rf"\b{field}\b[^.]* must|hyper\.{field}\b", str(err.value)), str(err.value)


# ------------------------------------------------------------------------------------------
# the public solvers themselves refuse a bad container built directly (before compiling)


def _solver_calls():
    from custom_inference import bpmf, bpr, hpf, hpf_gibbs, psm, rg, sbmf, sibm
    from ppl_models.bpmf import BPMFHyper
    from ppl_models.hpf import HPFHyper
    from ppl_models.psm import PSMHyper
    from ppl_models.rg import RGHyper
    from ppl_models.sbmf import SBMFHyper
    from ppl_models.sibm import SIBMHyper

    mcmc = {"num_chains": 1, "num_warmup": 1, "num_samples": 1, "progress": False}
    return {
        "hpf.fit": ("count", lambda o: hpf.fit(0, o, 2, HPFHyper(), progress=False)),
        "hpf_gibbs.sample": ("count", lambda o: hpf_gibbs.sample(0, o, 2, HPFHyper(), **mcmc)),
        "sbmf.sample": ("real", lambda o: sbmf.sample(0, o, 2, SBMFHyper(), **mcmc)),
        "bpmf.sample": ("real", lambda o: bpmf.sample(0, o, 2, BPMFHyper(), **mcmc)),
        "rg.fit": ("binary", lambda o: rg.fit(0, o, 2, RGHyper(), progress=False)),
        "bpr.fit": ("binary", lambda o: bpr.fit(0, o, 2, progress=False)),
        "sibm.fit": ("binary", lambda o: sibm.fit(0, o, 2, SIBMHyper(), progress=False)),
        "psm.fit": ("count", lambda o: psm.fit(0, o, 2, PSMHyper(), progress=False)),
    }


SOLVERS = ("hpf.fit", "hpf_gibbs.sample", "sbmf.sample", "bpmf.sample", "rg.fit", "bpr.fit", "sibm.fit", "psm.fit")
DIRECT_BAD = {
    "ids-out-of-range": (lambda v: _direct(v, rows=[0, 0, 1, 3]), r"rows index out of range"),
    "nan": (lambda v: _direct(_with(v, 1, np.nan), ), r"values.*(NaN|finite)"),
    "empty": (lambda v: _direct([], rows=[], cols=[]), r"no (entries|observed|\(nonzero\))|empty"),
}


@pytest.mark.parametrize("bad", list(DIRECT_BAD))
@pytest.mark.parametrize("solver", SOLVERS)
def test_public_solvers_refuse_a_bad_container_built_directly(solver, bad, no_compilation):
    kind, call = _solver_calls()[solver]
    make, pattern = DIRECT_BAD[bad]
    obs = make(np.asarray(GOOD[kind], np.float64))
    with pytest.raises((ValueError, TypeError)) as err:
        call(obs)
    assert re.search(pattern, str(err.value)), str(err.value)


# ------------------------------------------------------------------------------------------
# the command line: exit status 2 and a message


def test_cli_bad_input_exits_with_status_2(tmp_path, capsys, stub_solvers):
    from validation.frontdoor import cli

    good = tmp_path / "good.csv"
    good.write_text("reader,book,stars\nr1,b1,3\nr1,b2,4\nr2,b1,5\n")
    base = ["fit", "hpf", "--format", "csv", "--user-col", "reader", "--item-col", "book", "--value-col", "stars",
            "--out", str(tmp_path / "out"), "--no-progress"]

    def run(*argv):
        status = cli.main(list(argv))
        return status, capsys.readouterr().err

    status, err = run("fit", "hpf", "--data", str(tmp_path / "nowhere.csv"), "--no-progress")
    assert status == 2 and "factorbayes: error:" in err and "nowhere.csv" in err
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"reader,book,stars\nr1,b1,3\nr2,\x00b2,\xff4\n")
    status, err = run(*base[:2], "--data", str(binary), *base[2:])
    assert status == 2 and str(binary) in err and "line 3" in err and "UTF-8" in err
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("reader,book,stars\nr1,b1,3\nr2,b2,4,extra,fields\n")
    status, err = run(*base[:2], "--data", str(ragged), *base[2:])
    assert status == 2 and str(ragged) in err and "line 3" in err
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    status, err = run("fit", "hpf", "--data", str(empty), "--no-progress")
    assert status == 2 and str(empty) in err and "empty" in err
    for k in ("0", "-3"):
        status, err = run(*base[:2], "--data", str(good), *base[2:], "--k", k)
        assert status == 2 and "K must be an integer >= 1" in err, err
    for k in ("2.5", "two"):
        with pytest.raises(SystemExit) as exc:
            cli.main([*base[:2], "--data", str(good), *base[2:], "--k", k])
        assert exc.value.code == 2 and "--k" in capsys.readouterr().err
    assert not stub_solvers
