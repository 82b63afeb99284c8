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


# ----------------------------------------------------------------------------- a rule per trial
def _rel(got, ref):
    """Largest relative difference of two records (NaN where both are NaN)."""
    got, ref = np.asarray(got, dtype=float), np.asarray(ref, dtype=float)
    assert got.shape == ref.shape
    both = np.isnan(got) & np.isnan(ref)
    assert not np.any(np.isnan(got) ^ np.isnan(ref))
    return float(np.max(np.where(both, 0.0, np.abs(got - ref) / np.abs(ref)), initial=0.0))


#: the rules of one descent family and Adam, each with its own step size / cap
SETTINGS = {"gd": dict(lr=1.0), "ngd": dict(lr=0.1), "polyak": dict(lr=1.0, eta_max=100.0),
            "polyak_star": dict(lr=1.0), "adam": dict(lr=0.01)}


@pytest.mark.parametrize("calls", ["one", "per_rule", "auto"])
def test_fit_rules_one_call_equals_one_fit_per_rule(inst, calls):
    """``runs.fit_rules``: GD, NGD, both Polyak steps and Adam as one ``fit`` (a rule, ``lr`` and
    ``eta_max`` per trial: ``optim.PerTrial``; the (L - L*) Polyak step's ``log_loss`` per
    trial) equals one ``fit`` per rule: every record and the final ``W`` (Frobenius norm) to
    ``RTOL`` relative (measured: <= 1.3e-15; module docstring). Can fail: the rules' runs differ
    from each other by more than 1e-3 relative (checked), so a trial given another trial's rule,
    step or cap, or the loss L where L - L* is due, fails by > 1e9 x RTOL."""
    data, opt, W_mm, W0 = inst
    common = dict(model="W", steps=300, init=W0, n_records=12, device="cpu")
    got = runs.fit_rules(data, SETTINGS, refs={"W_mm": W_mm}, calls=calls, **common)
    assert list(got) == list(SETTINGS)
    assert ("joint" in got["gd"].config) == (calls != "per_rule")     # auto: one call here
    finals = []
    for name, kw in SETTINGS.items():
        ref = train.fit(data, optimizer=name, refs={"W_mm": W_mm}, **common, **kw)
        h = got[name]
        assert h.trials == data.trials and h.config["optimizer"] == name
        assert h.config["eta_max"] == ref.config["eta_max"]
        for f in ("loss", "log_loss", "norm"):
            assert _rel(getattr(h, f), getattr(ref, f)) <= RTOL, (name, f)
        assert _rel(h.corr["W_mm"], ref.corr["W_mm"]) <= RTOL, name
        err = np.linalg.norm(h.W - ref.W, axis=(-2, -1)) / np.linalg.norm(ref.W, axis=(-2, -1))
        assert err.max() <= RTOL, name
        finals.append(ref.W)
    for a in range(len(finals)):                 # every two rules differ in every trial
        for b in range(a):
            gap = np.linalg.norm(finals[a] - finals[b], axis=(-2, -1))
            assert (gap / np.linalg.norm(finals[b], axis=(-2, -1))).min() > 1e-3, (a, b)


def test_fit_rules_at_saturation(inst):
    """Huge NGD steps (the norm passes 1e5 in 30 steps: the softmax saturated, the optimal
    token's mass 1 in float64) beside GD and the (L - L*) Polyak step in one call: equal to
    separate calls to ``RTOL`` and finite."""
    data, _, _, W0 = inst
    settings = {"ngd": dict(lr=5e4), "gd": dict(lr=1.0), "polyak_star": dict(lr=1.0)}
    common = dict(model="W", steps=30, init=W0, n_records=5, device="cpu")
    got = runs.fit_rules(data, settings, calls="one", **common)
    for name, kw in settings.items():
        ref = train.fit(data, optimizer=name, **common, **kw)
        assert np.all(np.isfinite(got[name].W))
        for f in ("log_loss", "norm"):
            assert _rel(getattr(got[name], f), getattr(ref, f)) <= RTOL, (name, f)
    assert got["ngd"].norm[-1].min() > 1e5 and np.all(got["ngd"].opt_mass[-1] == 1.0)


def test_fit_rules_model_object_and_random_inits():
    """A model object (chapter 16's next-token attention, ``init="random"``: the tiled trials
    draw their starts from the keys ``(seed, b)`` of the original trial) with GD and NGD in one
    call equals one ``fit`` per rule to ``RTOL`` (a start drawn from the wrong key differs by
    O(1))."""
    from attnsvm.data import ntp_sequences
    from attnsvm.models import SelfAttentionNTP
    data = ntp_sequences(12, 4, 3, queries=2, trials=2, seed=0)
    model = SelfAttentionNTP()
    settings = {"gd": dict(lr=np.array([0.5, 0.25])), "ngd": dict(lr=0.2)}
    common = dict(model=model, steps=100, init="random", init_scale=0.01, n_records=6,
                  device="cpu", seed=3)
    got = runs.fit_rules(data, settings, calls="one", **common)
    for name, kw in settings.items():
        ref = train.fit(data, optimizer=name, **common, **kw)
        for f in ("loss", "norm"):
            assert _rel(getattr(got[name], f), getattr(ref, f)) <= RTOL, (name, f)
        err = np.linalg.norm(got[name].W - ref.W) / np.linalg.norm(ref.W)
        assert err <= RTOL, name


def test_sweeps_in_one_call_equal_one_sweep_each(inst):
    """``runs.sensitivity_sweeps`` (GD's and the Polyak cap's sweeps in one ``fit``) gives each
    sweep's ``runs.sensitivity_sweep`` (its own call) to ``RTOL``."""
    data, opt, W_mm, W0 = inst
    sweeps = {"gd": dict(optimizer="gd", values=[0.5, 2.0]),
              "polyak": dict(optimizer="polyak", key="eta_max", values=[10.0, 1000.0],
                             base=dict(lr=1.0))}
    got = runs.sensitivity_sweeps(data, opt, W_mm, sweeps=sweeps, steps=100, init=W0, device="cpu")
    for name, sw in sweeps.items():
        ref = sensitivity_sweep(data, opt, W_mm, steps=100, init=W0, device="cpu", **sw)
        for k in ("one_minus_corr", "norm", "log_excess"):
            assert _rel(got[name][k], ref[k]) <= RTOL, (name, k)


@pytest.mark.parametrize("optimizer,kw,match", [
    (["gd", "ngd"], {}, "one name per trial \\(3\\), got 2"),
    (["gd", "sgd", "ngd"], {"batch_size": 2}, "full-batch rules only"),
    (["gd", "ngd", "nope"], {}, "optimizer"),
    (["gd", "ngd", "gd"], {"eta_max": 10.0}, "eta_max applies only"),
    (["gd", "polyak", "gd"], {"L_star": 0.0}, "L_star applies only"),
    (["gd", "polyak", "gd"], {"decay": 0.5}, "decay"),
    (["gd", 3, "ngd"], {}, "optimizer"),
])
def test_rule_per_trial_bad_input_names_the_argument(inst, optimizer, kw, match):
    data, _, _, W0 = inst
    with pytest.raises(ValueError, match=match):
        train.fit(data, model="W", optimizer=optimizer, steps=2, init=W0, device="cpu", **kw)


def test_history_take_keeps_the_trials_asked_for(inst):
    """``History.take`` returns the records of the trials asked for, in that order (a reversed
    index fails: the trials differ)."""
    data, _, W_mm, W0 = inst
    h = train.fit(data, model="W", optimizer="gd", steps=20, init=W0, refs={"W_mm": W_mm},
                  snapshots=True, n_records=4, device="cpu")
    part = h.take([2, 0])
    assert part.trials == 2 and part.config["trials"] == 2
    np.testing.assert_array_equal(part.loss, h.loss[:, [2, 0]])
    np.testing.assert_array_equal(part.snapshots, h.snapshots[:, [2, 0]])
    np.testing.assert_array_equal(part.W, h.W[[2, 0]])
    np.testing.assert_array_equal(part.corr["W_mm"], h.corr["W_mm"][:, [2, 0]])
    with pytest.raises(ValueError, match="trials"):
        h.take([3])
    with pytest.raises(ValueError, match="batched"):
        h.trial(0).take([0])


def test_fit_rules_names_the_setting_and_trial_that_became_non_finite(inst):
    """A non-finite trial of one call is reported by its optimizer's name in ``settings`` and its
    trial of ``data`` (not its index among the tiled trials): the uncapped Polyak step overflows
    within tens of steps on these instances (fit's docstring)."""
    from attnsvm.history import NonFiniteError
    data, _, _, W0 = inst
    settings = {"gd": dict(lr=1.0), "wild": dict(optimizer="polyak", lr=1.0, eta_max=None)}
    with pytest.raises(NonFiniteError, match=r"settings\['wild'\], trial \d") as err:
        runs.fit_rules(data, settings, model="W", steps=300, init=W0, n_records=2,
                       device="cpu", calls="one")
    assert err.value.setting == "wild" and 0 <= err.value.trial < data.trials
