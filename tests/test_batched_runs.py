"""More work per launch (issue #25): runs of one shape batched into one ``fit`` call equal one
call per run up to rounding. Not bit for bit: torch's CPU kernels of the transcendental
functions (``log``, ``exp``, ``log1p`` of the loss derivative) take a SIMD path for the full
vector blocks of a tensor and a scalar path for its tail, and the two differ in the last bit,
so a trial's entries round differently when its position in the batch moves (measured: the
log-derivative of the logistic loss at step 3 of a 3-trial run differs by 4.4e-16 once the
trials are tiled 3 times). After the runs below, the largest relative difference is ~1e-15
(``RTOL = 1e-12`` leaves room for other CPUs' vector widths); the quantities compared differ
between the swept values by factors of order one (checked), so a step or cap taken from the
wrong trial fails by more than 1e10 x RTOL. Booleans and integer counts are compared exactly.
The log of a per-trial cap is ``torch.log`` instead of ``math.log`` (one ulp apart on ~1 value
in 3e4); for the caps used here they are equal (checked)."""
import math

import numpy as np
import pytest
import torch

from attnsvm import runs, svm, train
from attnsvm.data import random_inits, score_instances
from attnsvm.runs import sensitivity_sweep
from attnsvm.losses import excess_loss
from attnsvm.metrics import one_minus_corr

RTOL = 1e-12


def _close(got, ref, name):
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, name
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, ref, err_msg=name)
    else:
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=0, equal_nan=True, err_msg=name)


@pytest.fixture(scope="module")
def inst():
    data, opt = score_instances(4, 3, 5, trials=3, seed=1)
    W_mm = svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
    W0 = random_inits(5, 3, radius=1.0, seed=1)
    return data, opt, W_mm, W0


def _one_fit_per_value(data, opt, W_mm, W0, *, optimizer, values, key, base):
    oc, nr, le = [], [], []
    for val in values:
        h = train.fit(data, model="W", optimizer=optimizer, steps=200, init=W0, n_records=2,
                      seed=0, device="cpu", **dict(base, **{key: val}))
        oc.append(one_minus_corr(h.W, W_mm))
        nr.append(h.norm[-1])
        le.append(excess_loss(data, opt, h.W, log=True))
    return dict(one_minus_corr=np.array(oc), norm=np.array(nr), log_excess=np.array(le))


@pytest.mark.parametrize("optimizer,key,values,base", [
    ("gd", "lr", [0.25, 1.0, 4.0], {}),
    ("ngd", "lr", [0.025, 0.1, 0.4], {}),
    ("polyak", "eta_max", [10.0, 100.0, 1000.0], {"lr": 1.0}),
])
def test_sweep_one_fit_equals_one_fit_per_value(inst, optimizer, key, values, base):
    """``runs.sensitivity_sweep`` (one ``fit`` over V*B trials, ``lr`` or ``eta_max`` per trial)
    equals one ``fit`` per value to ``RTOL`` (module docstring). Can fail: a cap or step taken
    from the wrong trial (e.g. ``np.tile`` instead of ``np.repeat``) changes the entries by
    factors of order one."""
    data, opt, W_mm, W0 = inst
    got = sensitivity_sweep(data, opt, W_mm, optimizer=optimizer, values=values, key=key, base=base,
                            steps=200, init=W0, seed=0, device="cpu")
    ref = _one_fit_per_value(data, opt, W_mm, W0, optimizer=optimizer, values=values, key=key,
                             base=base)
    for k, v in ref.items():
        assert got[k].shape == (len(values), data.trials)
        _close(got[k], v, k)
    # the swept values change the results by far more than RTOL: the comparison can fail
    assert (np.ptp(got["norm"], axis=0) / np.abs(got["norm"]).max(0)).min() > 1e-3


def test_per_trial_eta_max_caps_each_trial(inst):
    """A per-trial cap (array (B,)) runs trial b as a fit with the scalar cap ``eta_max[b]``
    (to ``RTOL``: module docstring); the caps of this test have ``torch.log == math.log``."""
    data, _, _, W0 = inst
    caps = np.array([10.0, 100.0, 1000.0])
    assert all(torch.log(torch.tensor(c, dtype=torch.float64)).item() == math.log(c) for c in caps)
    h = train.fit(data, model="W", optimizer="polyak", lr=1.0, eta_max=caps, steps=100, init=W0,
                  n_records=2, device="cpu")
    assert h.config["eta_max"] == caps.tolist()
    for b, c in enumerate(caps):
        hb = train.fit(data.take([b]), model="W", optimizer="polyak", lr=1.0, eta_max=c, steps=100,
                       init=W0[b:b + 1], n_records=2, seed=[(0, b)], device="cpu")
        _close(h.W[b], hb.W[0], f"W[{b}]")


@pytest.mark.parametrize("bad", [np.array([10.0, 100.0]), np.array([10.0, -1.0, 5.0])])
def test_per_trial_eta_max_checked(inst, bad):
    data, _, _, W0 = inst
    with pytest.raises(ValueError, match="eta_max"):
        train.fit(data, model="W", optimizer="polyak", eta_max=bad, steps=2, init=W0, device="cpu")


@pytest.mark.parametrize("optimizer,lr", [("ngd", "theorem"), ("gd", "theorem"), ("gd", 1.0)])
def test_global_runs_equal_global_run_per_start(inst, optimizer, lr):
    """``runs.global_runs`` (both starts in one ``every_step`` call, each at its own theorem
    step, a per-trial ``lr``) returns, per start, ``runs.global_run``'s dict (floats to
    ``RTOL``, booleans and counts exactly: module docstring)."""
    data, opt, W_mm, W0 = inst
    starts = {"random": W0, "adversarial": 1.5 * W_mm / np.linalg.norm(W_mm, axis=(-2, -1),
                                                                       keepdims=True)}
    got = runs.global_runs(data, opt, W_mm, starts, optimizer=optimizer, lr=lr, steps=60,
                            device="cpu")
    assert list(got) == list(starts)
    etas = set()
    for name, W in starts.items():
        ref = runs.global_run(data, opt, W_mm, W, optimizer=optimizer, lr=lr, steps=60, device="cpu")
        etas.add(ref["eta"])
        assert got[name].keys() == ref.keys()
        for k, v in ref.items():
            if k == "consts":
                for c, cv in v.items():
                    np.testing.assert_array_equal(got[name][k][c], cv, err_msg=c)   # same inputs
            else:
                _close(got[name][k], v, k)
    if lr == "theorem":
        assert len(etas) == 2            # the two starts do run at different steps


def test_per_trial_lr_list_of_the_wrong_length_names_lr():
    """A list of step sizes of the wrong length is refused with a ValueError naming ``lr`` (it
    used to reach torch and fail there with a broadcasting RuntimeError)."""
    from attnsvm import data as D
    from attnsvm import train as T
    d, _ = D.score_instances(3, 3, 4, trials=2, seed=0)
    with pytest.raises(ValueError, match="lr as an array must have one step size per trial"):
        T.fit(d, model="W", optimizer="gd", lr=[0.1, 0.2, 0.3], steps=2)
    T.fit(d, model="W", optimizer="gd", lr=[0.1, 0.2], steps=2)


def test_tile_and_untile_trials_invert_each_other(inst):
    """``untile_trials`` puts copy ``j`` of :func:`attnsvm.runs.tile_trials` at ``out[j]`` along
    any axis (a transposed split, B and V swapped, fails: the trials differ)."""
    data = inst[0]
    tiled, idx = runs.tile_trials(data, 3)
    assert tiled.trials == 3 * data.trials
    np.testing.assert_array_equal(idx, np.tile(np.arange(data.trials), 3))
    np.testing.assert_array_equal(tiled.X[idx == 1], np.repeat(data.X[1:2], 3, axis=0))
    x = np.arange(2 * 3 * data.trials * 4).reshape(2, 3 * data.trials, 4)     # trials on axis 1
    out = runs.untile_trials(x, 3, axis=1)
    assert out.shape == (3, 2, data.trials, 4)
    for j in range(3):
        np.testing.assert_array_equal(out[j], x[:, j * data.trials:(j + 1) * data.trials])
    with pytest.raises(ValueError, match="not a multiple of V"):
        runs.untile_trials(x, 4, axis=1)
    with pytest.raises(ValueError, match="V"):
        runs.tile_trials(data, 0)
