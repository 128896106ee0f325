"""Tests of `validation.evaluation.pfm_experiments.sbc_mixing` (the NPFM SBC mixing diagnosis, issue 13)."""

import numpy as np
import pytest

from validation.models import pfm as vp
from validation.evaluation import pfm_experiments as ex


def test_sbc_mixing_bad_arguments():
    with pytest.raises(ValueError, match="n_sims"):
        ex.sbc_mixing(n_sims=0)
    with pytest.raises(ValueError, match="scale"):
        ex.sbc_mixing(n_sims=2, scale=0)
    with pytest.raises(ValueError, match="compare"):
        ex.sbc_mixing(n_sims=2, compare="longer")


@pytest.mark.slow
def test_sbc_mixing_picks_the_heaviest_simulation_and_reports_each_run():
    """3 simulations, the heaviest fitted with a short config and 2x longer chains: one row with
    T the maximum of the three totals, finite R-hat >= 0.9 and ESS > 0 for both runs."""
    cfg = vp.SBCConfig(warmup=20, samples=30, thin=1, chains=2)
    df = ex.sbc_mixing(n_sims=3, n_worst=1, scale=2, config=cfg, functionals=("log_c", "log_total_rate"))
    simulate = vp.sbc_adapters("npfm", cfg)[0]
    from validation.checks import sbc
    T = [float(simulate(int(s))[1].sum()) for s in sbc.sbc_seeds(0, 3)]
    assert len(df) == 1 and df["T"].iloc[0] == max(T) and df["sim"].iloc[0] == int(np.argmax(T))
    for run in ("base", "x2"):
        for f in ("log_c", "log_total_rate"):
            assert np.isfinite(df[f"{run}/{f}/rhat"].iloc[0]) and df[f"{run}/{f}/rhat"].iloc[0] >= 0.9
            assert df[f"{run}/{f}/ess"].iloc[0] > 0
