"""A first script against the library: the defaults of ``fit`` that a reader meets first.

The L-based Polyak step is capped by default (``eta_max="auto"`` = ``POLYAK_CAP``), every
``NonFiniteError`` names the knob that helps for its rule, and ``History.trial(b)`` gives one
trial's arrays without the trials axis (shaped like data without one).
"""
from __future__ import annotations

import numpy as np
import pytest

import attnsvm as A
from attnsvm.train import POLYAK_CAP, NonFiniteError, fit


@pytest.fixture(scope="module")
def one_instance():
    """The reader's instance of issue 38: one random 30 x 5 x 4 instance, no trials axis. The
    uncapped Polyak step overflows on it at step 7 (lr 1), 44 (lr 0.1) and 334 (lr 0.01)."""
    return A.data.random_unit(n=30, T=5, d=4, seed=0)


def test_polyak_with_its_defaults_is_capped_and_finishes(one_instance):
    """``optimizer="polyak"`` with no other option runs 2,000 steps with the cap POLYAK_CAP
    recorded in the config; the same run uncapped (``eta_max=None``, the default before) raises
    at step 7 on this instance, so the test fails if the default cap goes."""
    h = fit(one_instance, model="W", optimizer="polyak", steps=2000)
    assert h.config["eta_max"] == POLYAK_CAP == 100.0
    assert np.all(np.isfinite(h.W)) and h.loss[-1, 0] < h.loss[0, 0]
    with pytest.raises(NonFiniteError):
        fit(one_instance, model="W", optimizer="polyak", eta_max=None, steps=2000)


@pytest.mark.parametrize("optimizer,cap", [("polyak", 100.0), ("polyak_star", 10.0)])
def test_polyak_overflow_names_the_cap_that_helps(one_instance, optimizer, cap):
    """Uncapped, both Polyak steps overflow on this instance whatever the multiplier ``lr``
    (1, 0.1, 0.01: a smaller lr only delays the overflow), and the message names ``eta_max``;
    the cap it names makes the same run finish. A hint saying "try a smaller lr" fails the
    first assertion; a cap that did not help fails the last."""
    for lr in (1.0, 0.1, 0.01):
        with pytest.raises(NonFiniteError, match=r"cap it with eta_max") as info:
            fit(one_instance, model="W", optimizer=optimizer, lr=lr, eta_max=None, steps=2000)
        assert "try a smaller lr" not in str(info.value)
    h = fit(one_instance, model="W", optimizer=optimizer, eta_max=cap, steps=2000)
    assert np.all(np.isfinite(h.W))


def test_polyak_star_is_uncapped_by_default(one_instance):
    """``eta_max="auto"`` caps only the L-based step: polyak_star (the (L - L*) step of its
    theorem) keeps no cap, and a rule without a cap records None."""
    with pytest.raises(NonFiniteError, match="eta_max"):
        fit(one_instance, model="W", optimizer="polyak_star", steps=2000)
    assert fit(one_instance, model="W", optimizer="gd", steps=2).config["eta_max"] is None


def test_a_capped_overflow_names_the_cap_and_others_name_lr(one_instance):
    """The hint of a capped Polyak run asks for a smaller cap, naming the one it had (one per
    trial: their range; no cap from 1e3 to 1e300 overflows on this instance, so the message is
    read from the configuration); a gradient step that overflows asks for a smaller lr, naming
    it."""
    from attnsvm.train import FitConfig, _nonfinite_hint
    two = A.data.random_unit(n=30, T=5, d=4, trials=2, seed=0)
    cfg = FitConfig.build(two, model="W", optimizer="polyak", eta_max=[1e2, 1e3])
    assert _nonfinite_hint(cfg).startswith("try a smaller cap eta_max (now 100 to 1000 per trial")
    cfg = FitConfig.build(two, model="W", optimizer="adam", eps=0.0)
    assert _nonfinite_hint(cfg) == "try a smaller lr (now 0.01) or eps > 0"
    data = A.data.separable(n=6, d=3, trials=2, seed=4)
    X = data.X.copy()
    X[1] *= 1e200                                 # trial 1 overflows at step 1
    bad = A.data.LinearData(X, data.y)
    with pytest.raises(NonFiniteError, match=r"trial 1 .*smaller lr \(now 1e\+100\)"):
        fit(bad, model="linear", loss="correlation", lr=1e100, steps=5)


@pytest.mark.parametrize("value", ["big", "none", 0.0, -1.0])
def test_eta_max_bad_values_name_it(one_instance, value):
    with pytest.raises(ValueError, match="eta_max"):
        fit(one_instance, model="W", optimizer="polyak", eta_max=value, steps=2)


def test_trial_drops_the_trials_axis(one_instance):
    """``fit`` on data without a trials axis returns the batched History (B = 1);
    ``.trial(0)`` has every array of that trial without the axis, equal to the batched ones,
    and its ``selected[-1]`` is what ``att_svm`` takes for that instance."""
    data = one_instance
    h = fit(data, model="W", optimizer="ngd", lr=0.1, steps=300, snapshots=True)
    one = h.trial(0)
    K = len(h.steps)
    assert h.selected.shape == (K, 1, data.n) and one.selected.shape == (K, data.n)
    assert one.W.shape == (data.d, data.d) and one.loss.shape == (K,)
    assert one.snapshots.shape == (K, data.d, data.d) and one.opt.shape == (data.n,)
    assert one.trials == 1 and one.config["trial"] == 0
    np.testing.assert_array_equal(one.W, h.W[0])
    np.testing.assert_array_equal(one.norm, h.norm[:, 0])
    np.testing.assert_array_equal(one.snapshots, h.snapshots[:, 0])
    W_mm = A.svm.att_svm(data.X, data.Z, one.selected[-1])
    assert W_mm.shape == (data.d, data.d) and A.metrics.corr(one.W, W_mm) > 0.9
    with pytest.raises(ValueError):
        A.svm.att_svm(data.X, data.Z, h.selected[-1])          # the batched one is refused
    with pytest.raises(ValueError, match="b must be < 1"):
        h.trial(1)
    with pytest.raises(ValueError, match="batched History"):
        one.trial(0)


def test_trial_of_a_batch_is_that_trial():
    data = A.data.random_unit(n=6, T=4, d=3, trials=3, seed=1)
    h = fit(data, model="W", optimizer="gd", lr=1.0, steps=50, refs={"I": np.eye(3)})
    for b in range(3):
        one = h.trial(b)
        np.testing.assert_array_equal(one.selected, h.selected[:, b])
        np.testing.assert_array_equal(one.corr["I"], h.corr["I"][:, b])
    np.testing.assert_array_equal(h.trial(-1).W, h.W[2])
