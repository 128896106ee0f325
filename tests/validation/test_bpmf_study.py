"""The BPMF Gibbs-vs-gated-NUTS study (validation/models/bpmf_study.py): the vectorized functionals and
the pooled statistics (fast); one simulation of the study rerun under -m slow."""

import numpy as np
import pytest

from validation.models import bpmf as vb
from validation.models import bpmf_study as st


def test_functional_draws_equal_the_sbc_functionals():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5, 2, 2))
    post = {"U": rng.standard_normal((3, 5, 10, 2)), "V": rng.standard_normal((3, 5, 8, 2)),
            "Lambda_U": a @ np.swapaxes(a, -1, -2) + np.eye(2), "Lambda_V": a @ np.swapaxes(a, -1, -2) + 2 * np.eye(2)}
    vec = st.functional_draws(post)
    for name, f in vb.bpmf_functionals().items():
        loop = np.array([[f({k: v[c, d] for k, v in post.items()}) for d in range(5)] for c in range(3)])
        np.testing.assert_allclose(vec[name], loop, rtol=1e-12, err_msg=name)  # same arithmetic up to rounding


def _record(m, s, offset, rng, mcse=0.01):
    """A study record whose "gibbs" means sit ``offset`` NUTS sd (sd 1) above NUTS's, plus MCSE noise."""
    scalars = [f"x[{i}]" for i in range(4)]
    nuts = rng.standard_normal(4)
    gib = nuts + offset + mcse * np.sqrt(2) * rng.standard_normal(4)
    gate = {"rung": 0, "passed": True}
    run = lambda m_: {"mean": m_.tolist(), "sd": [1.0] * 4, "mcse_mean": [mcse] * 4, "gate": gate}  # noqa: E731
    return {"master_seed": m, "sim": s, "seed": 0, "scalars": scalars, "runs": {"nuts": run(nuts), "gibbs": run(gib)}}


@pytest.mark.parametrize("offset", [0.0, 0.05])
def test_summary_finds_a_planted_offset_and_only_then(offset):
    rng = np.random.default_rng(1)
    pairs = st._pairs([_record(0, s, offset, rng) for s in range(40)])
    summ = st.study_summary(pairs)
    assert set(summ.n) == {40}
    # z = (offset + noise) / (0.01 sqrt 2): with the planted 0.05, sum z^2 ~ 40 (1 + 12.5) -> p ~ 0;
    # without it, chi2_40 with p < 1e-4 for any of the 4 scalars has probability 4e-4
    if offset:
        assert (summ.chi2_p < 1e-6).all() and np.allclose(summ.mean_d, offset, atol=0.01), summ  # se of mean_d 0.002
    else:
        assert (summ.chi2_p > 1e-4).all() and (summ.mean_d.abs() < 0.01).all(), summ


@pytest.mark.slow
def test_one_simulation_gibbs_agrees_with_gated_nuts():
    """Master seed 0, simulation 0 (the SBC's data set), without the SBC reproductions: ~100 CPU s."""
    cfg = st.StudyConfig(reproduce_sbc=False)
    pairs = st.gibbs_nuts_study((0,), [0], cfg)
    assert pairs.passed.all(), pairs[~pairs.passed]  # this seed's NUTS and both Gibbs runs pass their gates
    # 20 z-scores (2 Gibbs variants x 10 scalars), each N(0, 1) when both are exact: Bonferroni over 20
    # at a 1% family false alarm -> |z| <= 3.48
    assert pairs.z.abs().max() <= 3.48, pairs[["method", "scalar", "z", "d"]]
