"""Chapter 11 (joint training of W and v): every proposition checked numerically."""
import math

import numpy as np
import pytest
import torch

from attnsvm.experiments import joint as nets
import attnsvm.data as A_data
from attnsvm.data import AttnData
from attnsvm.metrics import attention, corr
from attnsvm.models import AttentionClassifier
from attnsvm.losses import get_loss
from attnsvm.svm import linear_svm
from attnsvm.train import fit


def loss_and_margins(data, W, v):
    """Logistic loss and margins of the joint model, numpy, per trial."""
    S = attention(data.X, W, data.Z)
    f = np.einsum("bnt,bnt->bn", S, np.einsum("bntd,bd->bnt", data.X, v))
    u = data.y * f
    return np.logaddexp(0, -u).mean(-1), u


@pytest.fixture(scope="module")
def inst():
    return A_data.planted_token(6, 5, 12, trials=3, seed=3)


@pytest.mark.parametrize("rule,kw", [("gd", dict(lr=0.7)), ("ngd", dict(lr=0.2)),
                                     ("polyak", dict(lr=1.0, eta_max=50.0))])
def test_head_moves_first(inst, rule, kw):
    data, alpha = inst
    h = fit(data, model="W", train_v=True, optimizer=rule, steps=1, seed=0, device="cpu", **kw)
    assert np.all(h.params["W"] == 0.0)
    xbar = data.X.mean(-2)                                             # (B,n,d)
    g = -0.5 * np.einsum("bn,bnd->bd", data.y, xbar) / data.n          # grad_v at (0,0)
    gn = np.linalg.norm(g, axis=-1, keepdims=True)
    step = {"gd": kw["lr"], "ngd": kw["lr"] / gn,
            "polyak": np.minimum(math.log(2) / gn ** 2, kw.get("eta_max", np.inf))}[rule]
    np.testing.assert_allclose(h.params["v"], -step * g, rtol=1e-10, atol=1e-14)


def test_W_gradient_vanishes_at_zero_head(inst):
    data, _ = inst
    rng = np.random.default_rng(0)
    net = AttentionClassifier("W", train_v=True)
    W = torch.as_tensor(rng.standard_normal((data.trials, data.d, data.d)))
    params = {"W": W, "v": torch.zeros(data.trials, data.d, dtype=torch.float64)}
    batch = {k: torch.as_tensor(getattr(data, k)) for k in ("X", "y", "Z")}
    _, grads, _ = net.grad(params, batch, get_loss("logistic"))
    assert torch.count_nonzero(grads["W"]) == 0
    assert torch.linalg.norm(grads["v"]) > 0


def test_head_norm_bound_random_points(inst):
    data, _ = inst
    rng = np.random.default_rng(1)
    R = np.linalg.norm(data.X, axis=-1).max(axis=(-2, -1))
    for scale in (0.1, 1.0, 10.0, 100.0):
        W = scale * rng.standard_normal((data.trials, data.d, data.d))
        v = scale * rng.standard_normal((data.trials, data.d))
        L, u = loss_and_margins(data, W, v)
        assert np.all(u <= R[:, None] * np.linalg.norm(v, axis=-1)[:, None] + 1e-12)
        ell_inv = -np.log(np.expm1(L))
        assert np.all(np.linalg.norm(v, axis=-1) >= ell_inv / R - 1e-9)


def test_loss_vanishes_at_fixed_W_along_separating_head(inst):
    data, _ = inst
    b = 0
    W = np.zeros((1, data.d, data.d))
    d1 = AttnData(data.X[b:b + 1], data.y[b:b + 1], data.Z[b:b + 1], data.v[b:b + 1])
    vbar = linear_svm(d1.X[0].mean(-2), d1.y[0])                      # separates the average tokens
    losses = [loss_and_margins(d1, W, c * vbar[None])[0][0] for c in (1, 10, 100, 1000)]
    assert all(a > b_ for a, b_ in zip(losses, losses[1:]))
    assert losses[-1] < 1e-100


def test_head_gradient_identity_against_autograd(inst):
    data, _ = inst
    rng = np.random.default_rng(2)
    X, y, Z = (torch.as_tensor(getattr(data, k)[0]) for k in ("X", "y", "Z"))
    W = torch.as_tensor(rng.standard_normal((data.d, data.d)))
    v = torch.as_tensor(rng.standard_normal(data.d), dtype=torch.float64).requires_grad_(True)
    s = torch.softmax(torch.einsum("ntd,de,ne->nt", X, W, Z), -1)
    u = y * torch.einsum("nt,ntd,d->n", s, X, v)
    L = torch.nn.functional.softplus(-u).mean()
    (g,) = torch.autograd.grad(L, v)
    lhs = float(v.detach() @ g)
    rhs = float((-torch.sigmoid(-u) * u).mean().detach())                      # (1/n) sum l'(u) u
    assert lhs == pytest.approx(rhs, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("rule,kw", [("gd", dict(lr=1.0)), ("ngd", dict(lr=0.1)),
                                     ("polyak", dict(lr=1.0, eta_max=100.0))])
def test_head_norm_increases_after_separation(inst, rule, kw):
    data, alpha = inst
    steps = 300
    r = nets.joint_fit(data, alpha, optimizer=rule, steps=steps,
                       record_steps=np.arange(steps + 1), device="cpu", **kw)
    assert np.array_equal(r.steps, np.arange(steps + 1))             # one record per step
    sep = r.min_margin[:-1] > 0
    assert sep.sum() > 100                                            # the check is not vacuous
    assert np.all(np.diff(r.norm_v, axis=0)[sep] > 0)
    # the bound of the previous proposition along the trajectory
    R = np.linalg.norm(data.X, axis=-1).max(axis=(-2, -1))
    ell_inv = np.where(r.log_loss < -30, -r.log_loss, -np.log(np.expm1(np.exp(r.log_loss))))
    assert np.all(r.norm_v[1:] >= ell_inv[1:] / R - 1e-9)


def test_segmented_fit_equals_one_run(inst):
    data, alpha = inst
    r = nets.joint_fit(data, alpha, optimizer="gd", lr=0.5, steps=200, segments=7, device="cpu")
    h = fit(data, model="W", train_v=True, optimizer="gd", lr=0.5, steps=200, device="cpu")
    np.testing.assert_allclose(r.W, h.params["W"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(r.v, h.params["v"], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("rule,kw", [("gd", dict(lr=1.0)), ("ngd", dict(lr=0.1)),
                                     ("polyak", dict(lr=1.0, eta_max=100.0))])
def test_observed_head_aligns_with_max_margin_head(rule, kw):
    data, alpha = A_data.planted_token(8, 6, 16, trials=4, seed=0)
    r = nets.joint_fit(data, alpha, optimizer=rule, steps=3000, segments=6, device="cpu", **kw)
    assert np.all(r.corr_v[-1] > r.corr_v[1])
    assert np.median(r.corr_v[-1]) > 0.8
    assert np.median(r.mass[-1]) > np.median(r.mass[0])


def test_joint_fit_is_one_run_also_for_adam(inst):
    # one fit call: the record at step k is the iterate of a k-step run (Adam's moments carried
    # through, which a run cut into restarted segments would not do)
    data, alpha = inst
    r = nets.joint_fit(data, alpha, optimizer="adam", lr=0.05, steps=60, segments=4, device="cpu")
    k = int(r.steps[2])
    h = fit(data, model="W", train_v=True, optimizer="adam", lr=0.05, steps=k, device="cpu")
    v = np.linalg.norm(h.params["v"], axis=-1)
    np.testing.assert_allclose(r.norm_v[2], v, rtol=1e-12)
    np.testing.assert_allclose(r.corr_W[2], corr(h.params["W"], r.W_ref), rtol=1e-9)
    seg = fit(data, model="W", train_v=True, optimizer="adam", lr=0.05, steps=60 - k, device="cpu",
              init={"W": h.params["W"], "v": h.params["v"]})
    assert not np.allclose(seg.params["W"], r.W, rtol=1e-6)        # restarting Adam differs
    with pytest.raises(ValueError, match="optimizer"):
        nets.joint_fit(data, alpha, optimizer="nope", steps=10)


@pytest.mark.slow
def test_chapter_result_object():
    """The notebook's numbers and claims at the notebook's size (4 trials, CPU): every claim of
    :class:`nets.JointExperiment` holds and the numbers sit in range (e.g. a head that did not
    move first, or a norm below the proved ell^-1(L)/R, would fail a claim)."""
    res = nets.joint_experiment(8, 6, 16, trials=4, steps=10000, segments=24, seed=0, device="cpu")
    s = res.summary()
    assert len(s) == 34
    claims = res.claims()
    assert len(claims) == 8 and all(bool(h) for h, _ in claims.values()), claims
    assert s["first_W_norm"] == 0.0 and s["v_bound_slack"] >= 0 and s["v_monotone"] is True
    for name in ("gd", "ngd", "polyak"):
        assert 0 <= s[f"opt_is_planted_{name}"] <= 1 and s[f"log10_loss_{name}"] < 0
        assert 0 <= s[f"feasible_learned_{name}"] <= 4
