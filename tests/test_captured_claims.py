"""Chapter 9's claims that count trials captured by wrong-token saturation (found at the papers'
sizes: notes/paper_claims.md). A trial that neither reaches the region (or the cap) nor is
captured must make the claim fail; a captured one is counted, not failed, as long as at least the
stated share of the trials gets there."""
import numpy as np
import pytest

from attnsvm import metrics
from attnsvm.experiments import rates


def test_captured_definition():
    """metrics.captured: a sequence with non-optimal mass >= 1 - tol; the tolerance is checked."""
    m = np.array([0.5, 0.998, 0.999, 1.0])
    assert metrics.captured(m).tolist() == [False, False, True, True]
    assert metrics.captured(m, tol=0.01).tolist() == [False, True, True, True]
    for bad in (0, 1, -0.1):
        with pytest.raises(ValueError, match="tol"):
            metrics.captured(m, tol=bad)
    assert np.isnan(metrics.nanmax([np.nan, np.nan])) and metrics.nanmax([np.nan, 3.0, 1.0]) == 3.0


@pytest.fixture(scope="module")
def small_run():
    return rates.rates_experiment(6, 4, 8, trials=5, steps=1000, sweep_steps=10, thm_steps=10,
                                  seed=0, device="cpu")


def _claims_with(res, trial, *, captured):
    """The run's claims with ``trial`` of the capped Polyak step kept above the cap at every
    record, and its largest non-optimal mass set to 1 (captured) or 0.5 (not captured)."""
    m = res.metrics["polyak"]
    saved = m["excess"].copy(), m["max_mass"].copy()
    try:
        m["excess"][:, trial] = 10 * res.cap_threshold[trial]
        m["max_mass"][:, trial] = 1.0 if captured else 0.5
        res._cache = None
        return res.claims(), res.summary()
    finally:
        m["excess"][:], m["max_mass"][:] = saved
        res._cache = None


def test_polyak_claims_count_captured_trials(small_run):
    """Unmodified, every capped-Polyak claim holds (5/5 capped at 1,000 steps). One trial kept
    above the cap: captured, the claims hold (4/5 = 80% capped, the other captured) and the
    summary counts it; not captured, polyak_capped, polyak_cap_reached and polyak_bound_holds
    all fail."""
    names = ("polyak_capped", "polyak_cap_reached", "polyak_bound_holds")
    base = small_run.claims()
    assert all(base[k][0] for k in names), {k: base[k] for k in names}
    ok, s = _claims_with(small_run, 2, captured=True)
    assert all(ok[k][0] for k in names), {k: ok[k] for k in names}
    assert s["n_cap_t0"] == 4 and s["n_captured_polyak"] == 1
    bad, _ = _claims_with(small_run, 2, captured=False)
    assert not any(bad[k][0] for k in names), {k: bad[k] for k in names}
    assert small_run.claims() == base          # the fixture is restored


def test_slope_claims_fail_when_no_trial_is_covered():
    """Chapter 10's slope claims test cor-sparsity-rates, which holds from the first step t0 in
    the region: on a run so short that GD's last decade starts before t0 in (nearly) every trial
    (300 steps: no trial covered), gd_polyak_slope_one and gd_tmass_flat fail and say why,
    whatever the numbers over all trials (GD's t * mass varies by 1.45 over the decade there,
    which the former claim, taken over all trials, passed)."""
    from attnsvm.experiments import sparsity
    res = sparsity.sparsity_experiment(6, 4, 8, trials=4, steps=300, cx_steps=5, seed=0,
                                       device="cpu")
    s, claims = res.summary(), res.claims()
    assert s["n_covered_gd"] == 0, s["n_covered_gd"]
    for name in ("gd_polyak_slope_one", "gd_tmass_flat"):
        assert not claims[name][0] and "0/4" in claims[name][1], claims[name]
